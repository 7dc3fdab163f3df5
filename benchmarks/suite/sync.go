package suite

import (
	"math/bits"
	"time"

	"github.com/goshmem/goshmem/benchmarks/report"
	"github.com/goshmem/goshmem/shmem"
)

func init() {
	Register(&Suite{Name: "barrier", Group: "sync", Default: true,
		Doc: "osu_oshm_barrier: BarrierAll on every PE in a loop; ns per barrier on PE 0",
		Run: func(b *B, _ int) error {
			rounds := float64(bits.Len(uint(b.npes - 1)))
			return b.figure(figure{suite: "barrier", size: 0, metric: report.Latency,
				run: b.barrierLoop(), limit: b.barrierLimit(rounds)})
		}})
	Register(&Suite{Name: "waituntil", Group: "sync", Pair: true, Default: true,
		Doc: "ping-pong: PE 0 stores i into PE 1's word with P and waits (WaitUntil) for PE 1 to store it back; " +
			"ns per round trip",
		Run: func(b *B, _ int) error {
			return b.figure(figure{suite: "waituntil", size: 8, metric: report.Latency,
				run: b.pingPongLoop(), limit: b.syncLimit(limCacheline, 2)})
		}})
}

// barrierLoop is n barriers of all PEs.
func (b *B) barrierLoop() measureFn {
	return func(n int) (sample, error) {
		start := time.Now()
		for range n {
			if err := b.pe.BarrierAll(); err != nil {
				return sample{}, err
			}
		}
		return timed(start, n, 0), nil
	}
}

// pingPongLoop is n round trips between PEs 0 and 1 through goshmem: a
// P into the partner's flag, then WaitUntil on one's own. The sequence
// numbers continue across repetitions, so no reset is needed.
func (b *B) pingPongLoop() measureFn {
	return func(n int) (sample, error) {
		if b.rank > 1 {
			return sample{}, nil
		}
		peer := 1 - b.rank
		base := b.pingSeq
		b.pingSeq += uint64(n)
		start := time.Now()
		for i := base + 1; i <= base+uint64(n); i++ {
			if b.rank == 0 {
				if err := shmem.P(b.words, wFlag, i, peer); err != nil {
					return sample{}, err
				}
			}
			if err := shmem.WaitUntil(b.words, wFlag, shmem.CmpGE, i); err != nil {
				return sample{}, err
			}
			if b.rank == 1 {
				if err := shmem.P(b.words, wFlag, i, peer); err != nil {
					return sample{}, err
				}
			}
		}
		return timed(start, n, 8*n), nil
	}
}
