package shmem_test

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

var _ = register("teams", func(pe *shmem.PE) error {
	me, np := pe.MyPE(), pe.NPEs()
	w := pe.World()
	if w.MyPE() != me || w.NPEs() != np {
		return fmt.Errorf("world team: %d of %d", w.MyPE(), w.NPEs())
	}
	if pe.Shared().NPEs() < 1 || pe.Shared().Translate(pe.Shared().MyPE(), w) != me {
		return fmt.Errorf("shared team: %d of %d", pe.Shared().MyPE(), pe.Shared().NPEs())
	}
	// Odd members, counted downwards (negative stride).
	odd := np - 1 // the largest odd index
	if odd%2 == 0 {
		odd--
	}
	var team *shmem.Team
	var err error
	if odd >= 1 {
		team, err = w.Split(odd, -2, (odd+1)/2)
		if err != nil {
			return err
		}
		if (me%2 == 1) != (team != nil) {
			return fmt.Errorf("PE %d: membership of the odd team is %v", me, team != nil)
		}
		if team != nil {
			if want := (odd - me) / 2; team.MyPE() != want {
				return fmt.Errorf("PE %d is %d in the odd team, want %d", me, team.MyPE(), want)
			}
			if got := team.Translate(team.MyPE(), w); got != me {
				return fmt.Errorf("Translate to world: %d, want %d", got, me)
			}
			if got := w.Translate(me, team); got != team.MyPE() {
				return fmt.Errorf("Translate from world: %d", got)
			}
			if got := w.Translate(0, team); got != -1 {
				return fmt.Errorf("PE 0 is not odd, Translate gave %d", got)
			}
			for i := 0; i < 20; i++ {
				if err := team.Sync(); err != nil {
					return err
				}
			}
		}
	}
	// Bad splits fail on every PE, and the world still works.
	if _, err := w.Split(0, 1, np+1); !errors.Is(err, shmem.ErrBadPE) {
		return fmt.Errorf("split past the team: %v", err)
	}
	if _, err := w.Split(0, 0, 2); np >= 2 && !errors.Is(err, shmem.ErrInvalid) {
		return fmt.Errorf("split with stride 0: %v", err)
	}
	// Disagreeing arguments: every PE gets ErrAsymmetric.
	if np >= 2 {
		if _, err := w.Split(0, 1, 1+me%2); !errors.Is(err, shmem.ErrAsymmetric) {
			return fmt.Errorf("disagreeing split: %v", err)
		}
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	// 2D: rows of 2.
	x, y, err := w.Split2D(2)
	if err != nil {
		return err
	}
	if x.MyPE() != me%2 || y.MyPE() != me/2 {
		return fmt.Errorf("Split2D: PE %d is x %d y %d", me, x.MyPE(), y.MyPE())
	}
	if x.NPEs() != min(2, np-me/2*2) || y.NPEs() != (np-me%2+1)/2 {
		return fmt.Errorf("Split2D sizes: x %d y %d", x.NPEs(), y.NPEs())
	}
	if err := x.Sync(); err != nil {
		return err
	}
	if err := y.Sync(); err != nil {
		return err
	}
	// Many teams alive at once (more than 64), each usable, then destroyed.
	var many []*shmem.Team
	for i := 0; i < 100; i++ {
		t, err := w.Split(0, 1, np)
		if err != nil {
			return fmt.Errorf("team %d: %w", i, err)
		}
		many = append(many, t)
	}
	for _, t := range many {
		if err := t.Sync(); err != nil {
			return err
		}
	}
	for _, t := range many {
		if err := t.Destroy(); err != nil {
			return err
		}
	}
	if err := many[0].Sync(); !errors.Is(err, shmem.ErrFinalized) {
		return fmt.Errorf("Sync of a destroyed team: %v", err)
	}
	if err := w.Destroy(); !errors.Is(err, shmem.ErrInvalid) {
		return fmt.Errorf("destroying the world: %v", err)
	}
	for _, t := range []*shmem.Team{x, y, team} {
		if t != nil {
			if err := t.Destroy(); err != nil {
				return err
			}
		}
	}
	// Slots are reused: split again after destroying.
	again, err := w.Split(0, 1, np)
	if err != nil {
		return err
	}
	for i := 0; i < 10; i++ {
		if err := again.Sync(); err != nil {
			return err
		}
	}
	return again.Destroy()
})

func TestTeams(t *testing.T) { each(t, "teams", 1, 2, 3, 4, 8) }

// Many goroutines on one PE, each with its own context, put to every PE.
var _ = register("contexts", func(pe *shmem.PE) error {
	const g, k = 8, 200
	me, np := pe.MyPE(), pe.NPEs()
	s, err := shmem.Malloc[int64](pe, np*g)
	if err != nil {
		return err
	}
	if err := inGoroutines(g, func(gi int) error {
		ctx, err := pe.NewContext()
		if err != nil {
			return err
		}
		mine := s.Via(ctx).Slice(me*g+gi, me*g+gi+1)
		for i := 1; i <= k; i++ {
			for t := 0; t < np; t++ {
				if err := shmem.Put(mine, []int64{int64(i)}, t); err != nil {
					return err
				}
			}
			if err := ctx.Quiet(); err != nil {
				return err
			}
		}
		if err := ctx.Close(); err != nil {
			return err
		}
		if err := shmem.Put(mine, []int64{1}, 0); !errors.Is(err, shmem.ErrFinalized) {
			return fmt.Errorf("put through a closed context: %v", err)
		}
		return nil
	}); err != nil {
		return err
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	for i, v := range s.Local() {
		if v != k {
			return fmt.Errorf("slot %d = %d, want %d", i, v, k)
		}
	}
	return pe.BarrierAll()
})

func TestContexts(t *testing.T) { each(t, "contexts", 1, 2, 4) }

// 300 barriers with every PE counting: no PE leaves barrier i before
// every PE entered it.
var _ = register("barriers", func(pe *shmem.PE) error {
	me, np := pe.MyPE(), pe.NPEs()
	c, err := shmem.Malloc[int64](pe, 1)
	if err != nil {
		return err
	}
	for i := 1; i <= 300; i++ {
		if err := shmem.AtomicInc(c, 0, (me+i)%np); err != nil {
			return err
		}
		if err := pe.BarrierAll(); err != nil {
			return err
		}
		// After barrier i, every PE's counter holds exactly the
		// increments of rounds 1..i that targeted it.
		want := int64(0)
		for j := 1; j <= i; j++ {
			for r := 0; r < np; r++ {
				if (r+j)%np == me {
					want++
				}
			}
		}
		if got := c.Local()[0]; got != want {
			return fmt.Errorf("barrier %d: counter %d, want %d", i, got, want)
		}
		if err := pe.SyncAll(); err != nil {
			return err
		}
	}
	return nil
})

func TestBarriers(t *testing.T) { each(t, "barriers", 1, 2, 3, 5, 8) }

// Same-host teams of up to 16 members sync flat, larger ones by
// dissemination (Team.syncLocked): the largest flat team and the
// smallest disseminating one, as goroutine PEs of one host.
func TestBarriersBothAlgorithms(t *testing.T) {
	barriers := scenarios.Get("barriers")
	for _, n := range []int{16, 17} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			err := shmem.Run(n, func(pe *shmem.PE) error {
				if shmem.SyncsFlat(pe.World()) != (n <= 16) {
					return fmt.Errorf("%d-PE world team: flat barrier %v", n, shmem.SyncsFlat(pe.World()))
				}
				return barriers(pe)
			}, shmem.WithTimeout(60*time.Second), shmem.WithHeapSize(16<<20))
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Teams with a member reached over TCP sync by gather and release from 3
// to 8 members, by dissemination with 2 and from 9 (syncAlgorithm), and
// the barrier each runs holds: the largest and smallest of each, on
// pretend hosts of one PE each and of two PEs each (mixed: a team with
// mapped and TCP members), and a split team of 3 on them.
func TestBarriersOverTCPByTeamSize(t *testing.T) {
	barriers := scenarios.Get("barriers")
	cases := []struct {
		kind string
		n    int
		want string
	}{
		{"remote", 2, "dissemination"}, {"remote", 3, "gather"}, {"remote", 8, "gather"},
		{"remote", 9, "dissemination"}, {"mixed", 4, "gather"}, {"mixed", 2, "flat"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%d", c.kind, c.n), func(t *testing.T) {
			err := shmem.Run(c.n, func(pe *shmem.PE) error {
				if got := shmem.SyncAlgorithm(pe.World()); got != c.want {
					return fmt.Errorf("%d-PE world team on %s hosts: %s barrier, want %s", c.n, c.kind, got, c.want)
				}
				if err := barriers(pe); err != nil {
					return err
				}
				if c.n < 4 {
					return nil
				}
				sub, err := pe.World().Split(1, 1, 3)
				if err != nil {
					return err
				}
				if sub == nil {
					return nil
				}
				if got := shmem.SyncAlgorithm(sub); got != "gather" {
					return fmt.Errorf("team of PEs 1-3: %s barrier, want gather", got)
				}
				for range 50 {
					if err := sub.Sync(); err != nil {
						return err
					}
				}
				return sub.Destroy()
			}, shmem.WithTimeout(60*time.Second), shmem.WithHeapSize(1<<20), shmem.WithHosts(pretendHosts(c.kind, c.n)))
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestEightPEsOnTwoCoresFinishPromptly(t *testing.T) {
	start := time.Now()
	err := shmem.Run(8, func(pe *shmem.PE) error {
		for i := 0; i < 300; i++ {
			if err := pe.BarrierAll(); err != nil {
				return err
			}
		}
		return nil
	}, shmem.WithTimeout(30*time.Second), shmem.WithHeapSize(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	// Not a performance assertion: a bound a livelocked or sleeping
	// barrier would blow through by orders of magnitude.
	if el := time.Since(start); el > 20*time.Second {
		t.Fatalf("300 barriers of 8 PEs took %v", el)
	}
}
