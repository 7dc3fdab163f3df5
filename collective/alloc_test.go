package collective

import (
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// The small-vector path of a flat team builds its messages in the
// team's scratch: a one-PE and a two-PE AllReduce of 8 bytes allocate
// at most one object per call and PE (the handle on the team's
// collective area).
func TestSmallAllocs(t *testing.T) {
	if raceOn {
		t.Skip("the race detector allocates")
	}
	for _, n := range []int{1, 2} {
		const runs = 200
		var got float64
		err := shmem.Run(n, func(pe *shmem.PE) error {
			b, err := newBufs[float64](pe, 1)
			if err != nil {
				return err
			}
			call := func() {
				if err := AllReduce(pe.World(), b.dst, b.src, Sum); err != nil {
					panic(err)
				}
			}
			call()
			if pe.MyPE() != 0 {
				for range runs + 1 { // AllocsPerRun makes one warm-up call
					call()
				}
				return nil
			}
			got = testing.AllocsPerRun(runs, call)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// Both PEs' allocations count: AllocsPerRun reads the process's.
		if got > float64(n) {
			t.Errorf("%d PEs: %.1f allocations per call, want at most %d (one per PE)", n, got, n)
		}
	}
}
