package suite

import (
	"time"

	"github.com/goshmem/goshmem/benchmarks/report"
	"github.com/goshmem/goshmem/shmem"
)

// Put and get, as OSU Micro-Benchmarks define them for OpenSHMEM
// (osu_oshm_put, osu_oshm_get, osu_oshm_put_bw, osu_oshm_get_bw,
// osu_oshm_put_nb_bw, osu_oshm_get_nb_bw, osu_oshm_put_mr): PE 0 acts
// on PE 1's copy of a symmetric buffer, PE 1 is idle, and PE 0's clock
// times the loop.

func init() {
	Register(&Suite{Name: "put-latency", Group: "rma", Sized: true, Pair: true, Default: true,
		Doc: "osu_oshm_put: blocking Put of size bytes to PE 1, then Quiet; ns per Put+Quiet",
		Run: func(b *B, size int) error {
			return b.figure(figure{suite: "put-latency", size: size, metric: report.Latency,
				run: b.putLoop(size, 1, false), limit: b.dataLimit(size, report.Latency, false)})
		}})
	Register(&Suite{Name: "get-latency", Group: "rma", Sized: true, Pair: true, Default: true,
		Doc: "osu_oshm_get: blocking Get of size bytes from PE 1; ns per Get",
		Run: func(b *B, size int) error {
			return b.figure(figure{suite: "get-latency", size: size, metric: report.Latency,
				run: b.getLoop(size, 1, false), limit: b.getLatencyLimit(size)})
		}})
	for _, v := range []struct {
		name, doc string
		get, nbi  bool
	}{
		{"put-bw", "osu_oshm_put_bw: window of blocking Puts of size bytes to PE 1, then Quiet; bytes moved per second", false, false},
		{"put-nbi-bw", "osu_oshm_put_nb_bw: window of PutNBIs of size bytes to PE 1, then Quiet; bytes per second", false, true},
		{"get-bw", "osu_oshm_get_bw: window of blocking Gets of size bytes from PE 1, then Quiet; bytes per second", true, false},
		{"get-nbi-bw", "osu_oshm_get_nb_bw: window of GetNBIs of size bytes from PE 1, then Quiet; bytes per second", true, true},
	} {
		Register(&Suite{Name: v.name, Group: "rma", Sized: true, Pair: true, Default: true, Doc: v.doc,
			Run: func(b *B, size int) error {
				run := b.putLoop(size, b.cfg.Window, v.nbi)
				if v.get {
					run = b.getLoop(size, b.cfg.Window, v.nbi)
				}
				return b.figure(figure{suite: v.name, size: size, metric: report.Bandwidth,
					run: run, limit: b.dataLimit(size, report.Bandwidth, false)})
			}})
	}
	Register(&Suite{Name: "put-rate", Group: "rma", Pair: true, Default: true,
		Doc: "osu_oshm_put_mr, one pair: window of blocking 8-byte Puts to PE 1, then Quiet; Puts per second",
		Run: func(b *B, _ int) error {
			return b.figure(figure{suite: "put-rate", size: 8, metric: report.Rate,
				run: b.putLoop(8, b.cfg.Window, false), limit: b.dataLimit(8, report.Rate, false)})
		}})
	Register(&Suite{Name: "put-nbi-rate", Group: "rma", Pair: true, Default: true,
		Doc: "one pair: window of 8-byte PutNBIs to PE 1, then Quiet; Puts per second",
		Run: func(b *B, _ int) error {
			return b.figure(figure{suite: "put-nbi-rate", size: 8, metric: report.Rate,
				run: b.putLoop(8, b.cfg.Window, true), limit: b.dataLimit(8, report.Rate, false)})
		}})
	Register(&Suite{Name: "put-rate-all", Group: "rma", Default: true,
		Doc: "all pairs: every PE puts 8 bytes to every other PE in turn (window, then Quiet), all at once; " +
			"the job's Puts per second (sum over PEs, over the slowest PE's time)",
		Run: func(b *B, _ int) error {
			return b.figure(figure{suite: "put-rate-all", size: 8, metric: report.Rate, agg: true,
				run: b.putAllLoop(), limit: b.dataLimit(8, report.Rate, true)})
		}})
}

// putLoop is n windows of window Puts (PutNBIs when nbi) of size bytes
// from PE 0 to PE 1's buffer, each window followed by Quiet.
func (b *B) putLoop(size, window int, nbi bool) measureFn {
	put := shmem.Put[byte]
	if nbi {
		put = shmem.PutNBI[byte]
	}
	return func(n int) (sample, error) {
		if b.rank != 0 {
			return sample{}, nil
		}
		dst, src := b.buf.Slice(0, size), b.src[:size]
		start := time.Now()
		for range n {
			for range window {
				if err := put(dst, src, 1); err != nil {
					return sample{}, err
				}
			}
			if err := b.pe.Quiet(); err != nil {
				return sample{}, err
			}
		}
		return timed(start, n*window, n*window*size), nil
	}
}

// getLoop is n windows of window Gets (GetNBIs when nbi) of size bytes
// from PE 1's buffer into PE 0's Go buffer. A window of one blocking Get
// has no Quiet (osu_oshm_get); wider windows end with one.
func (b *B) getLoop(size, window int, nbi bool) measureFn {
	get := shmem.Get[byte]
	if nbi {
		get = shmem.GetNBI[byte]
	}
	quiet := window > 1 || nbi
	return func(n int) (sample, error) {
		if b.rank != 0 {
			return sample{}, nil
		}
		dst, src := b.dst[:size], b.buf.Slice(0, size)
		start := time.Now()
		for range n {
			for range window {
				if err := get(dst, src, 1); err != nil {
					return sample{}, err
				}
			}
			if quiet {
				if err := b.pe.Quiet(); err != nil {
					return sample{}, err
				}
			}
		}
		return timed(start, n*window, n*window*size), nil
	}
}

// putAllLoop is every PE putting 8 bytes to every other PE in turn, n
// windows each followed by Quiet. Each sender writes its own slot (a
// 128-byte stretch past the payload) at the target, so senders never
// share a cache line.
func (b *B) putAllLoop() measureFn {
	window := b.cfg.Window
	return func(n int) (sample, error) {
		dst := b.buf.Slice(b.cfg.MaxSize()+b.rank*slotBytes, b.cfg.MaxSize()+b.rank*slotBytes+8)
		src := b.src[:8]
		peers := b.npes - 1
		t := 0
		start := time.Now()
		for range n {
			for range window {
				target := (b.rank + 1 + t) % b.npes
				if t++; t == peers {
					t = 0
				}
				if err := shmem.Put(dst, src, target); err != nil {
					return sample{}, err
				}
			}
			if err := b.pe.Quiet(); err != nil {
				return sample{}, err
			}
		}
		return timed(start, n*window, n*window*8), nil
	}
}
