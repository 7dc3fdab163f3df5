package suite

import (
	"time"

	"github.com/goshmem/goshmem/benchmarks/report"
	"github.com/goshmem/goshmem/shmem"
)

// put-signal-nbi-rate (see atomics_ext.go for the objects it shares).

func init() {
	Register(&Suite{Name: "put-signal-nbi-rate", Group: "rma", Pair: true, Default: true,
		Doc: "one pair: window of 8-byte PutSignalNBIs (SignalAdd) to PE 1, then Quiet; operations per second (compare with put-nbi-rate)",
		Run: func(b *B, _ int) error {
			e, err := b.extObjects()
			if err != nil {
				return err
			}
			l := b.dataLimit(8, report.Rate, false)
			if b.remote() {
				l = b.tcpFrames(putSignalHeaderSize + 8)
			}
			return b.figure(figure{suite: "put-signal-nbi-rate", size: 8, metric: report.Rate,
				run: b.putSignalNBILoop(e), limit: l})
		}})
}

// putSignalNBILoop is n windows of 8-byte PutSignalNBIs from PE 0 into
// PE 1's payload, each adding one to PE 1's signal, then Quiet.
func (b *B) putSignalNBILoop(e *extSyms) measureFn {
	window := b.cfg.Window
	return func(n int) (sample, error) {
		if b.rank != 0 {
			return sample{}, nil
		}
		dst, src := e.data.Slice(0, 8), b.src[:8]
		start := time.Now()
		for range n {
			for range window {
				if err := shmem.PutSignalNBI(dst, src, e.sig, 1, shmem.SignalAdd, 1); err != nil {
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
