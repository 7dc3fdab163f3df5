package collective

import (
	"fmt"
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// Vectors of 100,003 elements (an odd length, not a multiple of any team
// size) through the large-vector algorithms: AllReduce and Reduce of a
// float, a signed, an unsigned and a complex type, Broadcast, the scans,
// FCollect and AllToAll, on the world and on a team with a negative
// stride.
const largeN = 100003

var _ = register("large", func(pe *shmem.PE) error {
	np := pe.NPEs()
	bf, err := newBufs[float64](pe, largeN+1)
	if err != nil {
		return err
	}
	bi, err := newBufs[int32](pe, largeN+1)
	if err != nil {
		return err
	}
	bu, err := newBufs[uint16](pe, largeN+1)
	if err != nil {
		return err
	}
	bc, err := newBufs[complex64](pe, largeN+1)
	if err != nil {
		return err
	}
	rev, err := pe.World().Split(np-1, -1, np)
	if err != nil {
		return err
	}
	for ti, t := range []*shmem.Team{pe.World(), rev} {
		s := 77 + ti
		if err := checkReduce(t, bf, largeN, Sum, -1, false, s); err != nil {
			return fmt.Errorf("team %d: AllReduce(Sum) float64: %w", ti, err)
		}
		if err := checkReduce(t, bi, largeN, Xor, -1, true, s); err != nil {
			return fmt.Errorf("team %d: AllReduce(Xor) int32 in place: %w", ti, err)
		}
		if small {
			continue
		}
		if err := checkReduce(t, bf, largeN, Max, np-1, true, s); err != nil {
			return fmt.Errorf("team %d: Reduce(Max) float64 in place: %w", ti, err)
		}
		if err := checkReduce(t, bi, largeN, Prod, 0, false, s); err != nil {
			return fmt.Errorf("team %d: Reduce(Prod) int32: %w", ti, err)
		}
		if err := checkReduce(t, bu, largeN, Min, -1, false, s); err != nil {
			return fmt.Errorf("team %d: AllReduce(Min) uint16: %w", ti, err)
		}
		if err := checkReduce(t, bc, largeN, Prod, -1, false, s); err != nil {
			return fmt.Errorf("team %d: AllReduce(Prod) complex64: %w", ti, err)
		}
		if err := checkScan(t, bf, largeN, Max, false, true, s); err != nil {
			return fmt.Errorf("team %d: ExScan(Max) float64 in place: %w", ti, err)
		}
		if err := checkBroadcast(t, bf, largeN, 1%np, false, s); err != nil {
			return fmt.Errorf("team %d: Broadcast: %w", ti, err)
		}
		if err := checkScan(t, bi, largeN, Sum, true, false, s); err != nil {
			return fmt.Errorf("team %d: InScan: %w", ti, err)
		}
		if err := checkFCollect(t, bi, largeN/np, s); err != nil {
			return fmt.Errorf("team %d: FCollect: %w", ti, err)
		}
		if err := checkAllToAll(t, bi, largeN/np, 1, 1, s); err != nil {
			return fmt.Errorf("team %d: AllToAll: %w", ti, err)
		}
	}
	return nil
})

func TestLarge(t *testing.T) {
	each(t, "large", []route{goroutines}, nil, 1, 4)
	each(t, "large", []route{goroutines}, []string{envAlgo + "=ring"}, 3)
	each(t, "large", []route{goroutines}, []string{envAlgo + "=halving"}, 4)
	each(t, "large", []route{goroutines}, []string{envAlgo + "=pushring"}, 3)
	if !small {
		each(t, "large", []route{tcp}, nil, 3)
		each(t, "large", []route{mixed}, []string{envAlgo + "=ring"}, 4)
		each(t, "large", []route{mixed}, nil, 4) // recursive halving across hosts
		each(t, "large", []route{processes}, nil, 2)
	}
}
