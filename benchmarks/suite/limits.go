package suite

import (
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/goshmem/goshmem/benchmarks/report"
	"github.com/goshmem/goshmem/shmem"
)

// The machine's limits, measured with plain Go in the same job as the
// figures they bound. Each is a measureFn like a figure's, so the
// harness calibrates and repeats it the same way.

// Limit names, as they appear in records.
const (
	limCopy       = "copy"            // copy() between two Go slices of the figure's size
	limCopyMap    = "copy-to-mapping" // copy() from a Go slice into this PE's own shared segment
	limCacheline  = "cacheline-rtt"   // raw cross-process round trip on two words of the shared mappings
	limBarrier    = "cacheline-floor" // ceil(log2 P) one-way cache-line transfers (half a round trip each)
	limAtomicRaw  = "atomic-raw"      // the same sync/atomic operation on the same mapped word, without goshmem
	limTCPRTT     = "tcp-rtt"         // 8-byte ping-pong over a loopback TCP connection between PEs 0 and 1
	limTCPStream  = "tcp-stream"      // one-directional TCP stream of 1 MiB writes, PE 0 to PE 1
	tcpStreamSize = 1 << 20
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
		for i := range src {
			src[i] = byte(i)
		}
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
// the floor for any same-host synchronisation.
//
// oneWays scales the figure: the sample counts n*2/oneWays operations
// per n round trips, so that its latency is oneWays one-way transfers.
func (b *B) cachelineRTT(name string, oneWays float64) limit {
	return limit{name: name, run: func(n int) (sample, error) {
		if b.rank > 1 {
			return sample{}, nil
		}
		mine := &b.words.Local()[wRaw]
		theirs := &shmem.Ptr(b.words, 1-b.rank)[wRaw]
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
		s := timed(start, n, 0)
		s.ops = float64(n) * 2 / oneWays
		return s, nil
	}}
}

// barrierFloor is the least time a barrier of npes PEs can take: a
// dissemination barrier needs ceil(log2 npes) rounds, each at least one
// one-way cache-line transfer (half the measured round trip).
func (b *B) barrierFloor() limit {
	rounds := float64(bits.Len(uint(b.npes - 1)))
	return b.cachelineRTT(limBarrier, rounds)
}

// rawAtomic is op applied with sync/atomic to the same word of PE 1's
// heap that the atomic figures target, through shmem.Ptr: the hardware
// cost without goshmem's checks and wake-ups.
func (b *B) rawAtomic(op string) limit {
	return limit{name: limAtomicRaw, run: func(n int) (sample, error) {
		if b.rank != 0 {
			return sample{}, nil
		}
		w := &shmem.Ptr(b.words, 1)[wCtr]
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

var sinkWord atomic.Uint64

// keep stops the compiler from dropping a loop whose results are unused.
func keep(v uint64) { sinkWord.Store(v) }

// dataLimit is the limit of a figure that moves size bytes: copy() of
// the same size over shared memory; over TCP the raw TCP round trip
// (latency) or stream (bandwidth and rate).
func (b *B) dataLimit(size int, m report.Metric, all bool) limit {
	if b.cfg.Transport == "tcp" {
		if m == report.Latency {
			return b.tcpRTT()
		}
		return b.tcpStream()
	}
	return b.copyLimit(size, all)
}

// syncLimit is the limit of a synchronisation taking oneWays one-way
// transfers: over shared memory the cache line, over TCP the raw round
// trip (one way = half of it).
func (b *B) syncLimit(name string, oneWays float64) limit {
	if b.cfg.Transport == "tcp" {
		l := b.tcpRTT()
		run := l.run
		l.run = func(n int) (sample, error) {
			s, err := run(n)
			s.ops = s.ops * 2 / oneWays
			return s, err
		}
		return l
	}
	return b.cachelineRTT(name, oneWays)
}

// atomicLimit is the limit of a remote atomic: the raw hardware atomic
// over shared memory, the raw TCP round trip over TCP.
func (b *B) atomicLimit(op string) limit {
	if b.cfg.Transport == "tcp" {
		return b.tcpRTT()
	}
	return b.rawAtomic(op)
}

// The reference limits: measured on their own at the start of each job
// and listed beside the figures, whether or not a figure uses them, so
// that every run shows what this machine can do.
func init() {
	Register(&Suite{Name: "limits", Group: "limits", Default: true,
		Doc: "the machine's limits with plain Go: copy() at 1 and 16 MiB, copy into the shared mapping, " +
			"cache-line round trip between PE processes, TCP loopback 8-byte round trip and 1 MiB-write stream",
		Run: func(b *B, _ int) error {
			refs := []struct {
				size   int
				metric report.Metric
				l      limit
			}{
				{1 << 20, report.Bandwidth, b.copyLimit(1<<20, false)},
				{16 << 20, report.Bandwidth, b.copyBig(16 << 20)},
				{1 << 20, report.Bandwidth, b.copyToMapping(1 << 20)},
				{8, report.Latency, b.cachelineRTT(limCacheline, 2)},
				{8, report.Latency, b.tcpRTT()},
				{tcpStreamSize, report.Bandwidth, b.tcpStream()},
			}
			for _, r := range refs {
				if err := b.reference(r.l.name, r.size, r.metric, r.l); err != nil {
					return err
				}
			}
			return nil
		}})
}
