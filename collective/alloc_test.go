package collective

import (
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// The small-vector path of a flat team builds its messages in the
// team's scratch: a one-PE and a two-PE AllReduce and Broadcast of 8
// bytes allocate nothing (the handles on the team's collective area
// share a block made with the team). An allocation per call is a GC
// cycle every few thousand calls, whose workers take turns on the CPUs
// with the PEs when PEs outnumber cores.
func TestSmallAllocs(t *testing.T) {
	if raceOn {
		t.Skip("the race detector allocates")
	}
	for _, n := range []int{1, 2} {
		for _, name := range []string{"AllReduce", "Broadcast"} {
			const runs = 200
			var got float64
			err := shmem.Run(n, func(pe *shmem.PE) error {
				b, err := newBufs[float64](pe, 1)
				if err != nil {
					return err
				}
				call := func() {
					err := AllReduce(pe.World(), b.dst, b.src, Sum)
					if name == "Broadcast" {
						err = Broadcast(pe.World(), b.dst, b.src, 0)
					}
					if err != nil {
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
			if got != 0 {
				t.Errorf("%d PEs: %s: %.1f allocations per call, want none", n, name, got)
			}
		}
	}
}
