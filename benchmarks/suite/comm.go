package suite

import (
	"context"
	"fmt"
	"time"

	"github.com/goshmem/goshmem/benchmarks/report"
	"github.com/goshmem/goshmem/ring"
)

// Tagged two-sided messages (ring.Comm), measured as OSU measures MPI's
// (osu_latency, osu_bw), each next to a figure of the layer below it
// measured in the same job:
//
//   - comm-latency (PE 0 and PE 1): osu_latency: PE 0 Sends size bytes
//     with tag 1 and Recvs the echo; PE 1 Recvs and Sends it back.
//     One-way time = half a round trip. Its limit ("ring") is the raw
//     ring lane ping-pong of the same size (ring-latency's figure: Safe
//     lanes 0→1 and 1→0, receivers copying each payload, cumulative
//     acks), so the ratio says what tags, matching and the Comm's
//     checks cost on top of a lane. The machine's floor is the extra
//     limit.
//   - comm-bw (PE 0 and PE 1): osu_bw: PE 0 Sends a window of size-byte
//     messages, PE 1 Recvs them, then Sends PE 0 a 4-byte reply, which
//     PE 0 Recvs before the next window. Bytes moved per second. Its
//     limit ("put") is put-bw's figure (a window of blocking Puts, then
//     Quiet): large-message bandwidth should stay near Put's. Over
//     shared memory a further limit is copy-stream, the same stream of
//     messages with plain copies through the mapping, whose bytes cross
//     between the cores as the Comm's do (a Put that no one reads
//     does not).
//
// The Comm is created once per figure (collectively, outside the timed
// loops) and closed after it. Send and Recv run with
// context.Background(): a deadline would only add a timer.
func init() {
	Register(&Suite{Name: "comm-latency", Group: "comm", Sized: true, DefaultSizes: commSizes, Pair: true, Default: true,
		Doc: "osu_latency over ring.Comm: ping-pong of size-byte tagged messages, Send + Recv; one-way ns, held to a raw ring lane ping-pong of the same size (ring) and to copy-floor / tcp-floor",
		Run: func(b *B, size int) error { return b.commFigure(size, report.Latency) }})
	Register(&Suite{Name: "comm-bw", Group: "comm", Sized: true, DefaultSizes: commSizes, Pair: true, Default: true,
		Doc: "osu_bw over ring.Comm: windows of size-byte Sends from PE 0 to PE 1, a 4-byte reply after each; bytes per second, held to put-bw's window of Puts (put) and to copy and copy-stream / tcp-stream",
		Run: func(b *B, size int) error { return b.commFigure(size, report.Bandwidth) }})
}

// commSizes are the comm suites' sizes when the command line gives none:
// the (8 B, 64 KiB, 1 MiB) and some between.
var commSizes = []int{8, 512, 4 << 10, 64 << 10, 1 << 20}

// commAreas is the bulk areas of one of a Comm's lanes: EagerCredits + 4
// (acknowledgement batch) + 8 (early rendezvous frags), docs/ring.md.
const commAreas = ring.EagerCredits + 4 + 8

// commHeapBytes is what a Comm between npes PEs needs of each PE's heap
// for lanes of full-size rendezvous frags (ring.NewComm gives frags above
// the eager limit an eighth of the heap, so eight times what the lanes
// take): lanes of commAreas bulk areas.
func commHeapBytes(npes int) int {
	return 8 * (npes - 1) * commAreas * (ring.FragMax + 2*ring.InlineMax + 64)
}

// A Comm's message takes its lane's bulk areas in turn, so the first
// commAreas messages of a lane write memory the job has not used that
// way before, and on this machine kind (a PVM guest) the first write
// into a page by the kernel (a TCP receive), and the first access by a
// process that has not touched it (the receiver's copy out, a
// same-host sender's copy in), cost about 1.3 to 3 ms per MiB on top
// (docs/performance.md, "First touch of heap memory"). osu_latency's
// skip warms MPI's one user buffer; the comm figures' warm-up must take
// every bulk area once: commAreas messages per lane (a ping-pong sends
// one each way per iteration, an osu_bw iteration window of them),
// plus a few.
func commWarm(size, window int) int {
	if size <= ring.InlineMax {
		return 0
	}
	if window == 0 {
		return commAreas + 4
	}
	return (commAreas+window-1)/window + 1
}

const limRing, limPut = "ring", "put"

func (b *B) commFigure(size int, m report.Metric) error {
	c, err := ring.NewComm(b.pe.World())
	if err != nil {
		return fmt.Errorf("ring.NewComm: %w", err)
	}
	f := figure{suite: "comm-bw", size: size, metric: m}
	var rb *ringBench
	if m == report.Latency {
		if rb, err = b.openRing(size, true, false); err != nil {
			return err
		}
		f.suite, f.run, f.warm = "comm-latency", b.commPingPong(c, size), commWarm(size, 0)
		f.limit = limit{name: limRing, run: rb.ringPingPong}
		f.extra = []limit{b.messageLimit(size, m, false)}
	} else {
		f.run, f.warm = b.commWindow(c, size, b.cfg.Window), commWarm(size, b.cfg.Window)
		f.limit = limit{name: limPut, run: b.putLoop(size, b.cfg.Window, false)}
		f.extra = append([]limit{b.dataLimit(size, m, false)}, b.streamExtra(size, m, false)...)
	}
	if err := b.figure(f); err != nil {
		return err // partners may be mid-figure: Close would wait for them
	}
	if rb != nil {
		if err := rb.close(); err != nil {
			return err
		}
	}
	return c.Close()
}

// commPingPong is n round trips of Send and Recv between PE 0 and PE 1.
func (b *B) commPingPong(c *ring.Comm, size int) measureFn {
	return func(n int) (sample, error) {
		if b.rank > 1 {
			return sample{}, nil
		}
		ctx, peer := context.Background(), 1-b.rank
		src, dst := b.src[:size], b.dst[:size]
		start := time.Now()
		for range n {
			if b.rank == 0 {
				if err := ring.Send(ctx, c, peer, 1, src); err != nil {
					return sample{}, err
				}
			}
			if _, err := ring.Recv(ctx, c, peer, 1, dst); err != nil {
				return sample{}, err
			}
			if b.rank == 1 {
				if err := ring.Send(ctx, c, peer, 1, dst); err != nil {
					return sample{}, err
				}
			}
		}
		return timed(start, 2*n, 2*n*size), nil
	}
}

// commWindow is n windows of window Sends from PE 0 to PE 1, each window
// answered by a 4-byte reply (osu_bw).
func (b *B) commWindow(c *ring.Comm, size, window int) measureFn {
	return func(n int) (sample, error) {
		if b.rank > 1 {
			return sample{}, nil
		}
		ctx := context.Background()
		src, dst := b.src[:size], b.dst[:size]
		var reply [4]byte
		start := time.Now()
		for range n {
			if b.rank == 0 {
				for range window {
					if err := ring.Send(ctx, c, 1, 2, src); err != nil {
						return sample{}, err
					}
				}
				if _, err := ring.Recv(ctx, c, 1, 3, reply[:]); err != nil {
					return sample{}, err
				}
			} else {
				for range window {
					if _, err := ring.Recv(ctx, c, 0, 2, dst); err != nil {
						return sample{}, err
					}
				}
				if err := ring.Send(ctx, c, 0, 3, reply[:]); err != nil {
					return sample{}, err
				}
			}
		}
		if b.rank == 1 {
			return sample{}, nil
		}
		return timed(start, n*window, n*window*size), nil
	}
}
