package collective

import (
	"fmt"
	"sync"
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// 100 collectives back to back with no barrier between: each member reads
// its result and refills src (and dst) as soon as a call returns, as the
// ownership rule allows. Sizes alternate between the recursive-doubling
// and the direct paths, and roots move, so a member that is ahead pushes
// into the scratch or reads the buffers of one that is behind whenever
// the rule is broken.
var _ = register("back-to-back", func(pe *shmem.PE) error {
	b, err := newBufs[int64](pe, 3*500*pe.NPEs()+2)
	if err != nil {
		return err
	}
	t := pe.World()
	for i := range 100 {
		n := []int{3, 500, 1, 97}[i%4]
		s := 5000 + i
		root := i % t.NPEs()
		var err error
		switch i % 5 {
		case 0:
			err = checkReduce(t, b, n, Sum, -1, i%2 == 0, s)
		case 1:
			err = checkBroadcast(t, b, n, root, false, s)
		case 2:
			err = checkFCollect(t, b, n, s)
		case 3:
			err = checkAllToAll(t, b, n, 1, 1, s)
		case 4:
			err = checkReduce(t, b, n, Max, root, false, s)
		}
		if err != nil {
			return fmt.Errorf("call %d: %w", i, err)
		}
	}
	return nil
})

func TestBackToBack(t *testing.T) {
	each(t, "back-to-back", []route{goroutines}, nil, 2, 4, 7, 11)
	each(t, "back-to-back", []route{tcp, mixed, processes}, nil, 3)
	each(t, "back-to-back", []route{goroutines}, []string{envAlgo + "=ring"}, 5)
}

// Collectives on several teams at once: the rows and the columns of a
// Split2D grid, each driven by its own goroutine on every PE (so one PE
// is inside two collectives at the same time, on different teams), and
// two disjoint teams (even and odd world ranks) running concurrently.
var _ = register("teams", func(pe *shmem.PE) error {
	w := pe.World()
	x, y, err := w.Split2D(2)
	if err != nil {
		return err
	}
	even, err := w.Split(0, 2, (pe.NPEs()+1)/2)
	if err != nil {
		return err
	}
	odd, err := w.Split(1, 2, pe.NPEs()/2)
	if err != nil {
		return err
	}
	// Every goroutine has buffers of its own.
	var bs [3]bufs[float64]
	for i := range bs {
		if bs[i], err = newBufs[float64](pe, 3*200*pe.NPEs()+2); err != nil {
			return err
		}
	}
	mine := even
	if mine == nil {
		mine = odd
	}
	teams := []*shmem.Team{x, y, mine}
	errs := make([]error, len(teams))
	var wg sync.WaitGroup
	for ti, t := range teams {
		if t == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				s := 100*ti + i
				n := []int{2, 200, 9}[i%3]
				var err error
				switch i % 3 {
				case 0:
					err = checkReduce(t, bs[ti], n, Sum, -1, false, s)
				case 1:
					err = checkFCollect(t, bs[ti], n, s)
				case 2:
					err = checkBroadcast(t, bs[ti], n, i%t.NPEs(), false, s)
				}
				if err != nil {
					errs[ti] = fmt.Errorf("team %d, call %d: %w", ti, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
})

func TestConcurrentTeams(t *testing.T) {
	each(t, "teams", []route{goroutines}, nil, 4, 6)
	each(t, "teams", []route{tcp, mixed, processes, processesMixed}, nil, 4)
}
