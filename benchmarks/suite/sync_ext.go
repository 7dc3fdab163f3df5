package suite

import (
	"time"

	"github.com/goshmem/goshmem/benchmarks/report"
	"github.com/goshmem/goshmem/shmem"
)

// waituntil-vector (see atomics_ext.go for the objects it shares).

func init() {
	Register(&Suite{Name: "waituntil-vector", Group: "sync", Pair: true, Default: true,
		Doc: "ping-pong: PE 0 puts an 8-element vector of i into PE 1's and waits (WaitUntilAllVector) for PE 1 to put it back; " +
			"ns per round trip (compare with waituntil)",
		Run: func(b *B, _ int) error {
			e, err := b.extObjects()
			if err != nil {
				return err
			}
			return b.figure(figure{suite: "waituntil-vector", size: 8 * vecLen, metric: report.Latency,
				run: b.vectorPingPongLoop(e), limit: b.syncLimit(limCacheline, 2)})
		}})
}

// vectorPingPongLoop is n round trips between PEs 0 and 1: a Put of an
// 8-element vector of the round's number into the partner's words, then
// WaitUntilAllVector on one's own until every element reached it. The
// numbers continue across repetitions (vecSeq), so no reset is needed.
func (b *B) vectorPingPongLoop(e *extSyms) measureFn {
	v := e.vec.Slice(0, vecLen)
	out, want := make([]uint64, vecLen), make([]uint64, vecLen)
	return func(n int) (sample, error) {
		if b.rank > 1 {
			return sample{}, nil
		}
		peer := 1 - b.rank
		base := b.vecSeq
		b.vecSeq += uint64(n)
		start := time.Now()
		for i := base + 1; i <= base+uint64(n); i++ {
			for j := range out {
				out[j], want[j] = i, i
			}
			if b.rank == 0 {
				if err := shmem.Put(v, out, peer); err != nil {
					return sample{}, err
				}
			}
			if err := shmem.WaitUntilAllVector(v, nil, shmem.CmpGE, want); err != nil {
				return sample{}, err
			}
			if b.rank == 1 {
				if err := shmem.Put(v, out, peer); err != nil {
					return sample{}, err
				}
			}
		}
		return timed(start, n, 8*vecLen*n), nil
	}
}
