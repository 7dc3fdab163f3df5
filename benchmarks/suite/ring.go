package suite

import (
	"fmt"
	"time"

	"github.com/goshmem/goshmem/benchmarks/report"
	"github.com/goshmem/goshmem/ring"
	"github.com/goshmem/goshmem/shmem"
)

// Ring lanes (package ring), measured the way ring/bench_test.go measures
// them (docs/ring.md), each figure next to a plain blocking put+signal of
// the same size measured in the same job: that baseline is the figure's
// limit ("putsignal"), so the record's ratio is the bar (the
// ring must be at least 1x a blocking put+signal at every size), and the
// machine's own limit for a message of that size is the figure's extra
// limit (messageLimit; for ring-rate over shared memory copy-stream
// too, whose bytes cross between the cores as the lane's do).
//
// All lanes are Safe, with Capacity the payload size and a depth of
// ringDepth(size); payloads above ring.InlineMax take the lane's bulk
// path. In every figure and every baseline the receiver copies each
// payload into a Go buffer of its own (the least a program does with a
// message it keeps), and Safe receivers acknowledge what they took.
//
//   - ring-latency (PE 0 and PE 1): ping-pong on lanes 0→1 and 1→0; PE 1
//     echoes each message. One-way time = half a round trip. Receivers
//     acknowledge every Depth/2 messages (cumulative), so a sender never
//     waits. Baseline: the PutSignal + SignalWaitUntil ping-pong.
//   - ring-rate (PE 0 and PE 1): PE 0 sends n messages on lane 0→1; PE 1
//     takes whatever has arrived (PollAppend, or Recv when nothing has),
//     copies each and acknowledges each batch. Baseline: PE 0 PutSignals
//     into PE 1's one receive buffer, PE 1 waits for the signal, copies
//     the payload and signals the buffer free (AtomicSet on PE 0's word),
//     and PE 0 waits for that before its next put (without the wait a put
//     could overwrite a message not yet read). The time is the slower
//     PE's, up to the last message received.
//   - ring-rate-all (every PE count): PE r sends on lane r→r+1 (mod P)
//     while it receives on lane r-1→r, the sending in a goroutine of its
//     own (a Safe sender may wait for an acknowledgement that only its
//     partner's receiving side gives). Baseline: the same pattern with
//     the blocking put+signal. The job's messages received, over the
//     slowest PE's time.
//
// The lanes and the baseline's objects are created once per figure
// (collectively, outside the timed loops) and closed after it; sequence
// numbers and acknowledgements continue across repetitions.
func init() {
	Register(&Suite{Name: "ring-latency", Group: "ring", Sized: true, DefaultSizes: ringSizes, Pair: true, Default: true,
		Doc: "ring lanes 0→1 and 1→0 (Safe): ping-pong of size-byte messages, receivers copying each; " +
			"one-way ns, held to a PutSignal+SignalWaitUntil ping-pong of the same size (putsignal) and to copy-floor / tcp-floor",
		Run: func(b *B, size int) error {
			return b.ringFigure("ring-latency", size, report.Latency, false)
		}})
	Register(&Suite{Name: "ring-rate", Group: "ring", Sized: true, DefaultSizes: ringSizes, Pair: true, Default: true,
		Doc: "ring lane 0→1 (Safe): PE 0 sends size-byte messages, PE 1 polls, copies and acks each batch; " +
			"messages per second, held to a blocking put+signal of the same size (putsignal) and to copy and copy-stream / tcp-stream-frames",
		Run: func(b *B, size int) error {
			return b.ringFigure("ring-rate", size, report.Rate, false)
		}})
	Register(&Suite{Name: "ring-rate-all", Group: "ring", Sized: true, DefaultSizes: ringSizes, Default: true,
		Doc: "every PE sends size-byte messages on its lane to PE r+1 while receiving from PE r-1 (Safe); " +
			"the job's messages per second, held to the same pattern with blocking put+signal (putsignal) and to copy / tcp-stream-frames",
		Run: func(b *B, size int) error {
			return b.ringFigure("ring-rate-all", size, report.Rate, true)
		}})
}

// ringSizes are the ring suites' sizes when the command line gives none:
// the (and ring/bench_test.go's), from a small message to far
// above ring.InlineMax.
var ringSizes = []int{8, 64, 512, 4 << 10, 32 << 10, 256 << 10}

// ringDepth is a lane's depth for a payload size, as in ring's own
// benchmarks: deep for small messages, about 2 MiB of bulk areas (and at
// least 4 slots) for large ones.
func ringDepth(size int) int {
	return max(4, min(64, (2<<20)/max(size, 1)))
}

// ringHeapBytes is what the ring suites need in each PE's heap besides
// the job's own objects, for payloads of up to size bytes: one incoming
// lane's slots and bulk areas (each slot at most ring.InlineMax plus a
// header, each bulk area the payload rounded up to a cache line), the
// baseline's receive buffer, and room for the small objects and the
// allocator's alignment.
func ringHeapBytes(sizes []int) int {
	need := 0
	for _, s := range sizes {
		d := ringDepth(s)
		need = max(need, d*(min(s, ring.InlineMax)+256)+d*(s+256)+s)
	}
	return need + 1<<20
}

// ringBench is one ring figure's state on one PE.
type ringBench struct {
	b           *B
	size, depth int
	all         bool // ring-rate-all: every PE sends to the next
	r           *ring.Ring
	right, left int // the PE this one sends to, and the one it receives from

	// The baseline's objects: pbuf receives the payload (on the
	// receiver), sig[0] counts messages put into it (on the receiver),
	// free[0] counts messages the receiver is done with (on the sender).
	pbuf      shmem.Sym[byte]
	sig, free shmem.Sym[uint64]
	seq       uint64 // the baseline's messages (or round trips) so far, the same on every PE

	batch []ring.Message
}

// ringFigure measures one ring figure of size bytes: the ring, the
// put+signal baseline as its limit, and the machine's limit as extra.
func (b *B) ringFigure(name string, size int, m report.Metric, all bool) error {
	rb, err := b.openRing(size, m == report.Latency, all)
	if err != nil {
		return err
	}
	f := figure{suite: name, size: size, metric: m, agg: m == report.Rate,
		extra: append([]limit{b.messageLimit(size, m, all)}, b.streamExtra(size, m, all)...)}
	switch {
	case m == report.Latency:
		f.run = rb.ringPingPong
		f.limit = limit{name: limPutSignal, run: rb.putSignalPingPong}
	case all:
		f.run = rb.ringRateAll
		f.limit = limit{name: limPutSignal, run: rb.putSignalRateAll, agg: true}
	default:
		f.run = rb.ringRate
		f.limit = limit{name: limPutSignal, run: rb.putSignalRate, agg: true}
	}
	ferr := b.figure(f)
	if ferr != nil {
		// A PE that failed mid-figure may have left its partners in a
		// collective call: Close would only wait for them.
		return ferr
	}
	return rb.close()
}

// limPutSignal names the ring figures' limit: the plain blocking
// put+signal of the same size and pattern, measured in the same job.
const limPutSignal = "putsignal"

// openRing creates the figure's lanes and the baseline's objects on every
// PE (collective). bidir: lanes 0→1 and 1→0 (latency); all: lane r→r+1
// on every PE; otherwise lane 0→1.
func (b *B) openRing(size int, bidir, all bool) (*ringBench, error) {
	rb := &ringBench{b: b, size: size, depth: ringDepth(size), all: all,
		right: (b.rank + 1) % b.npes, left: (b.rank + b.npes - 1) % b.npes}
	var lanes []ring.Lane
	switch {
	case all:
		for r := range b.npes {
			lanes = append(lanes, ring.Lane{From: r, To: (r + 1) % b.npes, Depth: rb.depth, Capacity: size})
		}
	case bidir:
		lanes = []ring.Lane{{From: 0, To: 1, Depth: rb.depth, Capacity: size}, {From: 1, To: 0, Depth: rb.depth, Capacity: size}}
	default:
		lanes = []ring.Lane{{From: 0, To: 1, Depth: rb.depth, Capacity: size}}
	}
	var err error
	if rb.r, err = ring.New(b.pe, lanes, ring.Safe); err != nil {
		return nil, fmt.Errorf("ring.New of %d lanes of depth %d and capacity %d: %w", len(lanes), rb.depth, size, err)
	}
	if rb.pbuf, err = shmem.Malloc[byte](b.pe, size); err != nil {
		return nil, err
	}
	// 16 words each: the signal word alone on its 128 bytes.
	if rb.sig, err = shmem.Malloc[uint64](b.pe, 16); err != nil {
		return nil, err
	}
	if rb.free, err = shmem.Malloc[uint64](b.pe, 16); err != nil {
		return nil, err
	}
	rb.batch = make([]ring.Message, 0, rb.depth)
	return rb, b.sync()
}

// close frees what openRing created (collective).
func (rb *ringBench) close() error {
	err := rb.r.Close()
	for _, e := range []error{shmem.Free(rb.free), shmem.Free(rb.sig), shmem.Free(rb.pbuf)} {
		if err == nil {
			err = e
		}
	}
	return err
}

// ringPingPong is n round trips on lanes 0→1 and 1→0.
func (rb *ringBench) ringPingPong(n int) (sample, error) {
	b := rb.b
	if b.rank > 1 {
		return sample{}, nil
	}
	peer, half := 1-b.rank, uint64(rb.depth/2)
	src, dst := b.src[:rb.size], b.dst[:rb.size]
	start := time.Now()
	for range n {
		if b.rank == 0 {
			if _, err := rb.r.Send(peer, src); err != nil {
				return sample{}, err
			}
		}
		m, err := rb.r.Recv()
		if err != nil {
			return sample{}, err
		}
		copy(dst, m.Data)
		if b.rank == 1 {
			if _, err := rb.r.Send(peer, dst); err != nil {
				return sample{}, err
			}
		}
		// Cumulative acknowledgements, one per half lane: the sender
		// never waits, and they are off the round trip.
		if m.Seq%half == 0 {
			if err := rb.r.Ack(m.Origin, m.Seq); err != nil {
				return sample{}, err
			}
		}
	}
	return timed(start, 2*n, 2*n*rb.size), nil
}

// putSignalPingPong is n round trips of PutSignal + SignalWaitUntil,
// each receiver copying the payload out before it answers.
func (rb *ringBench) putSignalPingPong(n int) (sample, error) {
	b := rb.b
	if b.rank > 1 {
		return sample{}, nil
	}
	peer, base := 1-b.rank, rb.seq
	rb.seq += uint64(n)
	src, dst, in := b.src[:rb.size], b.dst[:rb.size], rb.pbuf.Local()[:rb.size]
	start := time.Now()
	for i := base + 1; i <= base+uint64(n); i++ {
		if b.rank == 0 {
			if err := shmem.PutSignal(rb.pbuf, src, rb.sig, i, shmem.SignalSet, peer); err != nil {
				return sample{}, err
			}
		}
		if _, err := shmem.SignalWaitUntil(rb.sig, shmem.CmpGE, i); err != nil {
			return sample{}, err
		}
		copy(dst, in)
		if b.rank == 1 {
			if err := shmem.PutSignal(rb.pbuf, dst, rb.sig, i, shmem.SignalSet, peer); err != nil {
				return sample{}, err
			}
		}
	}
	return timed(start, 2*n, 2*n*rb.size), nil
}

// ringSend sends n messages on the lane to PE to.
func (rb *ringBench) ringSend(n, to int) error {
	src := rb.b.src[:rb.size]
	for range n {
		if _, err := rb.r.Send(to, src); err != nil {
			return err
		}
	}
	return nil
}

// ringReceive takes n messages from the lane from PE from: whatever has
// arrived (PollAppend), or one (Recv) when nothing has; it copies each
// and acknowledges each batch.
func (rb *ringBench) ringReceive(n, from int) error {
	dst := rb.b.dst[:rb.size]
	for got := 0; got < n; {
		batch, err := rb.r.PollAppend(rb.batch[:0])
		if err != nil {
			return err
		}
		if len(batch) == 0 {
			m, err := rb.r.Recv()
			if err != nil {
				return err
			}
			batch = append(batch, m)
		}
		for _, m := range batch {
			copy(dst, m.Data)
		}
		got += len(batch)
		if err := rb.r.Ack(from, batch[len(batch)-1].Seq); err != nil {
			return err
		}
		rb.batch = batch[:0]
	}
	return nil
}

// ringRate is n messages on lane 0→1. Each PE reports its own time; PE 1
// counts the messages (the figure is aggregate: the slower PE's time).
func (rb *ringBench) ringRate(n int) (sample, error) {
	start := time.Now()
	switch rb.b.rank {
	case 0:
		if err := rb.ringSend(n, 1); err != nil {
			return sample{}, err
		}
		return timed(start, 0, 0), nil
	case 1:
		if err := rb.ringReceive(n, 0); err != nil {
			return sample{}, err
		}
		return timed(start, n, n*rb.size), nil
	}
	return sample{}, nil
}

// putSignalRate is the blocking put+signal baseline of ringRate.
func (rb *ringBench) putSignalRate(n int) (sample, error) {
	base := rb.seq
	rb.seq += uint64(n)
	start := time.Now()
	switch rb.b.rank {
	case 0:
		if err := rb.putSignalSend(base, n, 1); err != nil {
			return sample{}, err
		}
		return timed(start, 0, 0), nil
	case 1:
		if err := rb.putSignalReceive(base, n, 0); err != nil {
			return sample{}, err
		}
		return timed(start, n, n*rb.size), nil
	}
	return sample{}, nil
}

// putSignalSend puts messages base+1 .. base+n into PE to's receive
// buffer, each after PE to has signalled the previous one free.
func (rb *ringBench) putSignalSend(base uint64, n, to int) error {
	src := rb.b.src[:rb.size]
	for i := base + 1; i <= base+uint64(n); i++ {
		if err := shmem.WaitUntil(rb.free, 0, shmem.CmpGE, i-1); err != nil {
			return err
		}
		if err := shmem.PutSignal(rb.pbuf, src, rb.sig, i, shmem.SignalSet, to); err != nil {
			return err
		}
	}
	return nil
}

// putSignalReceive takes messages base+1 .. base+n from PE from: waits
// for each signal, copies the payload and signals the buffer free.
func (rb *ringBench) putSignalReceive(base uint64, n, from int) error {
	dst, in := rb.b.dst[:rb.size], rb.pbuf.Local()[:rb.size]
	for i := base + 1; i <= base+uint64(n); i++ {
		if _, err := shmem.SignalWaitUntil(rb.sig, shmem.CmpGE, i); err != nil {
			return err
		}
		copy(dst, in)
		if err := shmem.AtomicSet(rb.free, 0, i, from); err != nil {
			return err
		}
	}
	return nil
}

// both runs send in a goroutine of its own and receive in this one, and
// returns the first error. On an error of receive it does not wait for
// send, which may be waiting for a partner that will never answer: the
// job is failing anyway.
func both(send, receive func() error) error {
	errc := make(chan error, 1)
	go func() { errc <- send() }()
	if err := receive(); err != nil {
		return err
	}
	return <-errc
}

// ringRateAll is n messages from every PE to the next, all at once.
func (rb *ringBench) ringRateAll(n int) (sample, error) {
	start := time.Now()
	err := both(func() error { return rb.ringSend(n, rb.right) }, func() error { return rb.ringReceive(n, rb.left) })
	if err != nil {
		return sample{}, err
	}
	return timed(start, n, n*rb.size), nil
}

// putSignalRateAll is the blocking put+signal baseline of ringRateAll.
func (rb *ringBench) putSignalRateAll(n int) (sample, error) {
	base := rb.seq
	rb.seq += uint64(n)
	start := time.Now()
	err := both(func() error { return rb.putSignalSend(base, n, rb.right) },
		func() error { return rb.putSignalReceive(base, n, rb.left) })
	if err != nil {
		return sample{}, err
	}
	return timed(start, n, n*rb.size), nil
}
