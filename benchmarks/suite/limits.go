package suite

import (
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/goshmem/goshmem/benchmarks/report"
	"github.com/goshmem/goshmem/netmesh"
	"github.com/goshmem/goshmem/shmem"
)

// The machine's limits, measured with plain Go in the same job as the
// figures they bound. Each is a measureFn like a figure's, so the
// harness calibrates and repeats it the same way.

// Limit names, as they appear in records.
const (
	limCopy       = "copy"              // copy() between two Go slices of the figure's size
	limCopyMap    = "copy-to-mapping"   // copy() from a Go slice into this PE's own shared segment
	limCacheline  = "cacheline-rtt"     // raw cross-process round trip on two words of the shared mappings
	limBarrier    = "cacheline-floor"   // ceil(log2 P) one-way cache-line transfers (half a round trip each)
	limAtomicRaw  = "atomic-raw"        // the same sync/atomic operation on the same mapped word, without goshmem
	limTCPRTT     = "tcp-rtt"           // 8-byte ping-pong over a loopback TCP connection between PEs 0 and 1, each side parked in Go's netpoller until the bytes come
	limTCPRTTPoll = "tcp-rtt-poll"      // the same ping-pong with each side spinning on non-blocking reads (8 bytes each way, or the figure's payload one way)
	limTCPFloor   = "tcp-floor"         // ceil(log2 P) one-way TCP transfers (half a tcp-rtt-poll each)
	limTCPStream  = "tcp-stream"        // one-directional TCP stream of 1 MiB writes, PE 0 to PE 1
	limTCPFrames  = "tcp-stream-frames" // tcp-stream in frames of a rate figure's operation per second
	limCopyFloor  = "copy-floor"        // one-way hand-over of a payload through the shared mappings (half a round trip)
	limCopyStream = "copy-stream"       // a stream of payloads PE 0 to PE 1 through PE 1's mapped segment, each copied in and out
	tcpStreamSize = 1 << 20
)

// Wire sizes of the operations of the TCP rate figures, from netmesh's
// own encoder (docs/wire.md; type codes 0x01 PUT, 0x04 ATOMIC, 0x06
// PUT_SIGNAL): what one 8-byte Put and one 64-bit atomic request put on
// the stream, and the header of a PutSignal (its payload follows).
var (
	putFrameBytes       = len(netmesh.AppendFrame(nil, &netmesh.Frame{Type: 0x01, Payload: make([]byte, 8)}))
	atomicFrameBytes    = len(netmesh.AppendFrame(nil, &netmesh.Frame{Type: 0x04, Op: byte(netmesh.OpFetchAdd), Width: 8}))
	putSignalHeaderSize = len(netmesh.AppendFrame(nil, &netmesh.Frame{Type: 0x06, Op: 1}))
)

// copyLimit is copy() of size bytes between two Go slices, n times, on
// PE 0 (all: on every PE at once, combined like an aggregate figure).
func (b *B) copyLimit(size int, all bool) limit {
	return limit{name: limCopy, agg: all, run: func(n int) (sample, error) {
		if b.rank != 0 && !all {
			return sample{}, nil
		}
		src, dst := b.src[:size], b.dst[:size]
		start := time.Now()
		for range n {
			copy(dst, src)
		}
		return timed(start, n, n*size), nil
	}}
}

// copyBig is copy() of size bytes between two fresh Go slices on PE 0
// (for reference sizes beyond the job's buffers).
func (b *B) copyBig(size int) limit {
	var src, dst []byte
	if b.rank == 0 {
		src, dst = make([]byte, size), make([]byte, size)
		// Write both: an untouched source would read the kernel's zero
		// page, which stays in cache and doubles the "bandwidth".
		fillPattern(src)
		copy(dst, src)
	}
	return limit{name: limCopy, run: func(n int) (sample, error) {
		if b.rank != 0 {
			return sample{}, nil
		}
		start := time.Now()
		for range n {
			copy(dst, src)
		}
		return timed(start, n, n*size), nil
	}}
}

// copyToMapping is copy() from a Go slice into PE 0's own segment.
func (b *B) copyToMapping(size int) limit {
	return limit{name: limCopyMap, run: func(n int) (sample, error) {
		if b.rank != 0 {
			return sample{}, nil
		}
		dst, src := b.buf.Local()[:size], b.src[:size]
		start := time.Now()
		for range n {
			copy(dst, src)
		}
		return timed(start, n, n*size), nil
	}}
}

// cachelineRTT is the raw round trip between PEs 0 and 1 over their
// shared mappings: PE 0 stores a sequence number into a word of PE 1's
// heap (through shmem.Ptr, with sync/atomic) and spins on a word of its
// own until PE 1 stores it back. No goshmem call is on the path: it is
// the floor for any same-host synchronisation. Same-host only: where the
// partner's heap is not mapped here (a tcp job) it fails, never touches
// memory.
//
// oneWays scales the figure: the sample counts n*2/oneWays operations
// per n round trips, so that its latency is oneWays one-way transfers.
func (b *B) cachelineRTT(name string, oneWays float64) limit {
	return oneWay(limit{name: name, run: func(n int) (sample, error) {
		if b.rank > 1 {
			return sample{}, nil
		}
		peer, err := b.mapped(b.words, 1-b.rank, name)
		if err != nil {
			return sample{}, err
		}
		mine, theirs := &b.words.Local()[wRaw], &peer[wRaw]
		base := b.rawSeq
		b.rawSeq += uint64(n)
		start := time.Now()
		for i := base + 1; i <= base+uint64(n); i++ {
			if b.rank == 0 {
				atomic.StoreUint64(theirs, i)
				if err := spinUntil(mine, i, b.cfg.Timeout); err != nil {
					return sample{}, err
				}
			} else {
				if err := spinUntil(mine, i, b.cfg.Timeout); err != nil {
					return sample{}, err
				}
				atomic.StoreUint64(theirs, i)
			}
		}
		return timed(start, n, 0), nil
	}}, oneWays)
}

// copyFloor is the least time a message of size bytes takes from PE 0
// to PE 1 on this machine with plain Go: a round trip in which each side
// copy()s size bytes into the partner's segment (mapped here through
// shmem.Ptr), stores a sequence number into the partner's flag word with
// sync/atomic, and the partner, spinning on its own flag, copy()s the
// payload out into a Go buffer (as the ring and put+signal receivers do);
// scaled to one way (half a round trip). At 8 bytes it is about the
// one-way cache-line transfer (cacheline-floor); at large sizes about two
// copies. Same-host only, like cachelineRTT.
func (b *B) copyFloor(size int) limit {
	return oneWay(limit{name: limCopyFloor, run: func(n int) (sample, error) {
		if b.rank > 1 {
			return sample{}, nil
		}
		peerWords, err := b.mapped(b.words, 1-b.rank, limCopyFloor)
		if err != nil {
			return sample{}, err
		}
		peerBuf, err := b.mappedBuf(1-b.rank, size, limCopyFloor)
		if err != nil {
			return sample{}, err
		}
		mine, theirs := &b.words.Local()[wRaw], &peerWords[wRaw]
		in, out := b.buf.Local()[:size], peerBuf[:size]
		src, dst := b.src[:size], b.dst[:size]
		base := b.rawSeq
		b.rawSeq += uint64(n)
		start := time.Now()
		for i := base + 1; i <= base+uint64(n); i++ {
			if b.rank == 0 {
				copy(out, src)
				atomic.StoreUint64(theirs, i)
				if err := spinUntil(mine, i, b.cfg.Timeout); err != nil {
					return sample{}, err
				}
				copy(dst, in)
			} else {
				if err := spinUntil(mine, i, b.cfg.Timeout); err != nil {
					return sample{}, err
				}
				copy(dst, in)
				copy(out, dst)
				atomic.StoreUint64(theirs, i)
			}
		}
		return timed(start, n, 2*n*size), nil
	}}, 1)
}

// copyStream is the most a stream of size-byte messages from PE 0 to
// PE 1 can move on this machine with plain Go: the bandwidth analogue of
// copyFloor, and the shared-memory one of tcp-stream. PE 0 copy()s each
// message into a slot of PE 1's segment (mapped here through shmem.Ptr)
// and stores its sequence number into PE 1's flag word with sync/atomic;
// PE 1, spinning on that word, copy()s the slot out into a Go buffer and
// stores the number back into PE 0's word, which frees the slot. A
// message goes in pieces of up to streamPiece bytes; slots are a piece
// rounded up to 64-byte lines, as many as the payload area (at least 1
// MiB) holds, up to the run's window. So both copies cross between the
// PEs' cores, as a ring lane's and a Comm's do, and PE 0 runs ahead of
// PE 1 by up to the window: no round trip per message. The time ends
// when PE 1 has taken the last message. Same-host only, like copyFloor.
//
// It is the limit that follows the machine's cross-core bandwidth, which
// moves between states minutes or seconds apart (docs/performance.md,
// "Cross-core bandwidth"), where copy() and a Put that no one reads stay
// in one core's cache.
func (b *B) copyStream(size int) limit {
	return limit{name: limCopyStream, run: func(n int) (sample, error) {
		if b.rank > 1 {
			return sample{}, nil
		}
		peerWords, err := b.mapped(b.words, 1-b.rank, limCopyStream)
		if err != nil {
			return sample{}, err
		}
		area := b.cfg.MaxSize()
		peerBuf, err := b.mappedBuf(1, area, limCopyStream)
		if err != nil {
			return sample{}, err
		}
		piece := max(min(size, streamPiece), 1)
		pieces := (max(size, 1) + piece - 1) / piece
		stride := (piece + 63) &^ 63
		slots := min(b.cfg.Window, area/stride) // area >= 1 MiB: at least 8
		slot := b.buf.Local()
		if b.rank == 0 {
			slot = peerBuf
		}
		mine, theirs := &b.words.Local()[wRaw], &peerWords[wRaw]
		total := uint64(n * pieces)
		base := b.rawSeq
		b.rawSeq += total
		start := time.Now()
		for i := range total {
			off := int(i%uint64(pieces)) * piece
			m := min(piece, size-off)
			at := slot[int(i%uint64(slots))*stride:][:m]
			if b.rank == 0 {
				if i >= uint64(slots) {
					if err := spinUntil(mine, base+i-uint64(slots)+1, b.cfg.Timeout); err != nil {
						return sample{}, err
					}
				}
				copy(at, b.src[off:off+m])
				atomic.StoreUint64(theirs, base+i+1)
			} else {
				if err := spinUntil(mine, base+i+1, b.cfg.Timeout); err != nil {
					return sample{}, err
				}
				copy(b.dst[off:off+m], at)
				atomic.StoreUint64(theirs, base+i+1)
			}
		}
		if b.rank == 0 {
			if err := spinUntil(mine, base+total, b.cfg.Timeout); err != nil {
				return sample{}, err
			}
		}
		return timed(start, n, n*size), nil
	}}
}

// streamPiece is copyStream's largest piece: the largest frag a
// ring.Comm sends to a PE on its host. Through a 1 MiB area, 64 and 128
// KiB pieces streamed at 55-56 GB/s in the machine's fast state, 512 KiB
// pieces at 44-45 and 1 MiB pieces (whose copies take memmove's
// non-temporal stores) at 17-18; in the slow state all at 8.0-8.2.
const streamPiece = 128 << 10

// rawAtomic is op applied with sync/atomic to the same word of PE 1's
// heap that the atomic figures target, through shmem.Ptr: the hardware
// cost without goshmem's checks and wake-ups.
func (b *B) rawAtomic(op string) limit {
	return limit{name: limAtomicRaw, run: func(n int) (sample, error) {
		if b.rank != 0 {
			return sample{}, nil
		}
		peer, err := b.mapped(b.words, 1, limAtomicRaw)
		if err != nil {
			return sample{}, err
		}
		w := &peer[wCtr]
		var sink uint64
		start := time.Now()
		switch op {
		case "fetch":
			for range n {
				sink += atomic.LoadUint64(w)
			}
		case "swap":
			for i := range n {
				sink += atomic.SwapUint64(w, uint64(i))
			}
		case "compare-swap":
			cur := atomic.LoadUint64(w)
			for range n {
				if atomic.CompareAndSwapUint64(w, cur, cur+1) {
					cur++
				}
			}
		default: // fetch-add, add, inc, fetch-inc: one locked add
			for range n {
				sink += atomic.AddUint64(w, 1)
			}
		}
		s := timed(start, n, 0)
		keep(sink)
		return s, nil
	}}
}

// mapped is target's copy of s mapped here (shmem.Ptr), or an error
// naming the same-host limit that needed it: shmem.Ptr is nil for a PE
// on another host.
func (b *B) mapped(s shmem.Sym[uint64], target int, what string) ([]uint64, error) {
	p := shmem.Ptr(s, target)
	if p == nil {
		return nil, fmt.Errorf("goshbench: limit %s needs PE %d's heap mapped here, and it is not "+
			"(a %s job: PE %d is on another host); same-host limits apply to shm jobs only", what, target, b.cfg.Transport, target)
	}
	return p, nil
}

// mappedBuf is target's payload buffer (at least n bytes) mapped here,
// or an error naming the same-host limit that needed it.
func (b *B) mappedBuf(target, n int, what string) ([]byte, error) {
	p := shmem.Ptr(b.buf, target)
	if len(p) < n {
		return nil, fmt.Errorf("goshbench: limit %s needs PE %d's heap mapped here, and it is not; "+
			"same-host limits apply to shm jobs only", what, target)
	}
	return p, nil
}

var sinkWord atomic.Uint64

// keep stops the compiler from dropping a loop whose results are unused.
func keep(v uint64) { sinkWord.Store(v) }

// Transports, as in Config.Transport.
const (
	TransportSHM = "shm" // all PEs on this host: heaps mapped into each other
	TransportTCP = "tcp" // every PE on a host of its own: every pair over netmesh (TCP loopback)
	// every PE in a network namespace of its own (.ci/netns.sh's g1, g2,
	// ...: NetnsHost, NetnsIP): every pair over netmesh across a veth
	// bridge, the path of two hosts on one switch
	TransportNetns = "netns"
)

// NetnsHost is the namespace, and the host name, of PE r in a netns job;
// NetnsIP its address there (.ci/netns.sh gives namespace gi the address
// 10.77.0.i).
func NetnsHost(r int) string { return fmt.Sprintf("g%d", r+1) }

// NetnsIP is PE r's address in a netns job (see NetnsHost).
func NetnsIP(r int) net.IP { return net.IPv4(10, 77, 0, byte(r+1)) }

// remote reports whether this job's PEs reach each other over TCP. Then
// no PE maps another's heap (shmem.Ptr of a peer is nil), and the
// same-host limits (cache line, copy into the mapping, raw atomics on a
// peer's word) neither apply nor can be measured.
func (b *B) remote() bool { return b.cfg.Transport != TransportSHM }

// tcpIP is the address the plain-TCP limits of PE r listen on: loopback,
// or in a netns job PE r's namespace address, so that they take the path
// goshmem's links take.
func (b *B) tcpIP(r int) net.IP {
	if b.cfg.Transport == TransportNetns {
		return NetnsIP(r)
	}
	return net.IPv4(127, 0, 0, 1)
}

// dataLimit is the limit of a figure that moves size bytes from PE 0 to
// PE 1 (put-like): copy() of the same size over shared memory. Over TCP:
// latency, the raw round trip carrying size bytes out and 8 back
// (tcpRTT); bandwidth, the raw 1 MiB-write stream; rate, the same stream
// in 8-byte PUT frames per second (tcpFrames).
func (b *B) dataLimit(size int, m report.Metric, all bool) limit {
	if b.remote() {
		switch m {
		case report.Latency:
			return b.tcpRTT(size, 8)
		case report.Rate:
			return b.tcpFrames(putFrameBytes)
		}
		return b.tcpStream()
	}
	return b.copyLimit(size, all)
}

// getLatencyLimit is the limit of a blocking Get of size bytes: copy()
// over shared memory; over TCP the raw round trip carrying an 8-byte
// request out and size bytes back.
func (b *B) getLatencyLimit(size int) limit {
	if b.remote() {
		return b.tcpRTT(8, size)
	}
	return b.copyLimit(size, false)
}

// syncLimit is the limit of a synchronisation taking oneWays one-way
// transfers (2 for a ping-pong, ceil(log2 P) for a barrier). Over shared
// memory it is the cache-line round trip scaled to oneWays halves of it
// (name: limCacheline for a ping-pong, limBarrier for a barrier's floor);
// over TCP the raw, polled 8-byte TCP round trip scaled the same way
// (tcp-rtt-poll, tcp-floor).
func (b *B) syncLimit(name string, oneWays float64) limit {
	if !b.remote() {
		return b.cachelineRTT(name, oneWays)
	}
	l := oneWay(b.tcpRTT(8, 8), oneWays)
	if name == limBarrier {
		l.name = limTCPFloor
	}
	return l
}

// oneWay scales round-trip limit l to oneWays one-way transfers: its
// samples count n*2/oneWays operations per n round trips.
func oneWay(l limit, oneWays float64) limit {
	if oneWays == 2 {
		return l
	}
	run := l.run
	l.run = func(n int) (sample, error) {
		s, err := run(n)
		s.ops = s.ops * 2 / oneWays
		return s, err
	}
	return l
}

// messageLimit is the machine's limit for a message of size bytes from
// one PE to another (the ring figures' extra limit; their limit proper
// is a plain put+signal measured in the same job). Latency, one way:
// over shared memory copyFloor; over TCP half a raw round trip carrying
// size bytes each way (tcp-floor). Rate: over shared memory copy() of
// size bytes per message (all: on every PE at once, combined like an
// aggregate figure); over TCP the raw stream counted in PUT_SIGNAL frames
// of size bytes (one stream, as for put-rate-all).
func (b *B) messageLimit(size int, m report.Metric, all bool) limit {
	if m == report.Latency {
		if !b.remote() {
			return b.copyFloor(size)
		}
		l := oneWay(b.tcpRTT(size, size), 1)
		l.name = limTCPFloor
		return l
	}
	if b.remote() {
		return b.tcpFrames(putSignalHeaderSize + size)
	}
	return b.copyLimit(size, all)
}

// streamExtra is the further limit of a bandwidth or rate figure whose
// messages go from PE 0 to PE 1 to be copied out there (comm-bw,
// ring-rate): copyStream over shared memory; none over TCP (tcp-stream
// already crosses processes) or for a latency or all-PE figure.
func (b *B) streamExtra(size int, m report.Metric, all bool) []limit {
	if b.remote() || all || m == report.Latency {
		return nil
	}
	return []limit{b.copyStream(size)}
}

// atomicLimit is the limit of a remote atomic. Over shared memory, the
// same sync/atomic operation on the same mapped word (latency and rate).
// Over TCP: latency, the raw 8-byte round trip (a request and its
// answer); rate, the raw stream in ATOMIC request frames per second.
func (b *B) atomicLimit(op string, m report.Metric) limit {
	if !b.remote() {
		return b.rawAtomic(op)
	}
	if m == report.Rate {
		return b.tcpFrames(atomicFrameBytes)
	}
	return b.tcpRTT(8, 8)
}

// The reference limits: measured on their own at the start of each job
// and listed beside the figures, whether or not a figure uses them, so
// that every run shows what this machine can do. A tcp job skips the
// same-host ones (its PEs map no peer's heap) and says so in the run's
// skipped list.
func init() {
	Register(&Suite{Name: "limits", Group: "limits", Default: true,
		Doc: "the machine's limits with plain Go: copy() at 1 and 16 MiB, copy into the shared mapping, " +
			"cache-line round trip and 1 MiB copy stream between PE processes (these three: shm jobs only), " +
			"TCP loopback 8-byte round trip and 1 MiB-write stream",
		Run: func(b *B, _ int) error {
			refs := []struct {
				name     string
				size     int
				metric   report.Metric
				sameHost bool // needs the peers' heaps mapped here
				spins    bool // spins on a CPU: not where the PEs outnumber them
				l        func() limit
			}{
				{limCopy, 1 << 20, report.Bandwidth, false, false, func() limit { return b.copyLimit(1<<20, false) }},
				{limCopy, 16 << 20, report.Bandwidth, false, false, func() limit { return b.copyBig(16 << 20) }},
				{limCopyMap, 1 << 20, report.Bandwidth, true, false, func() limit { return b.copyToMapping(1 << 20) }},
				{limCopyStream, 1 << 20, report.Bandwidth, true, false, func() limit { return b.copyStream(1 << 20) }},
				{limCacheline, 8, report.Latency, true, false, func() limit { return b.cachelineRTT(limCacheline, 2) }},
				{limTCPRTT, 8, report.Latency, false, false, b.tcpRTTParked},
				{limTCPRTTPoll, 8, report.Latency, false, true, func() limit { return b.tcpRTT(8, 8) }},
				{limTCPStream, tcpStreamSize, report.Bandwidth, false, false, b.tcpStream},
			}
			for _, r := range refs {
				if r.spins && b.oversub {
					b.skip(fmt.Sprintf("limit %s in the %s job of %d PEs", r.name, b.cfg.Transport, b.npes),
						"the PEs outnumber the CPUs: a spinning ping-pong would take the CPUs the other PEs need (tcp figures are held to tcp-rtt there)")
					continue
				}
				if r.sameHost && b.remote() {
					b.skip(fmt.Sprintf("limit %s in the %s job of %d PEs", r.name, b.cfg.Transport, b.npes),
						"same-host only: over tcp no PE maps a peer's heap (tcp figures are held to tcp-rtt-poll and tcp-stream)")
					continue
				}
				if err := b.reference(r.name, r.size, r.metric, r.l()); err != nil {
					return err
				}
			}
			return nil
		}})
}
