package collective

import (
	"fmt"
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// Barrier completes and synchronises: in each of 50 rounds every member
// adds 1 to a counter on every member with a non-blocking atomic, then
// calls Barrier; after it each member's counter must be exactly the
// team size times the rounds so far (the Quiet completes the adds, the
// barrier waits for everyone's). On the world, a reversed split and a
// one-PE team, back to back with no reset.
var _ = register("barrier", func(pe *shmem.PE) error {
	ctr, err := shmem.Malloc[int64](pe, 3)
	if err != nil {
		return err
	}
	np := pe.NPEs()
	rev, err := pe.World().Split(np-1, -1, np)
	if err != nil {
		return err
	}
	lone, err := pe.World().Split(0, 1, 1)
	if err != nil {
		return err
	}
	teams := []*shmem.Team{pe.World(), rev}
	if lone != nil {
		teams = append(teams, lone)
	}
	for ti, t := range teams {
		for r := 1; r <= 50; r++ {
			for j := range t.NPEs() {
				if err := shmem.AtomicAdd(ctr, ti, 1, t.WorldPE(j)); err != nil {
					return err
				}
			}
			if err := Barrier(t); err != nil {
				return fmt.Errorf("team %d, round %d: %w", ti, r, err)
			}
			got, err := shmem.AtomicFetch(ctr, ti, pe.MyPE())
			if err != nil {
				return err
			}
			if want := int64(r * t.NPEs()); got != want {
				return fmt.Errorf("team %d (%d PEs), after barrier %d: counter %d, want %d", ti, t.NPEs(), r, got, want)
			}
			// Nobody adds for the next round before everyone has read.
			if err := Barrier(t); err != nil {
				return err
			}
		}
	}
	if err := Barrier(nil); err == nil {
		return fmt.Errorf("Barrier(nil) succeeded")
	}
	return nil
})

func TestBarrier(t *testing.T) {
	each(t, "barrier", []route{goroutines}, nil, 1, 2, 5)
	// Over TCP with 5 PEs the dissemination rounds (distances 1, 2 and 4)
	// do not follow an add to the member at distance 3 on its link: only
	// the Quiet completes it.
	each(t, "barrier", []route{tcp}, nil, 5)
	each(t, "barrier", []route{mixed, processes}, nil, 3)
}
