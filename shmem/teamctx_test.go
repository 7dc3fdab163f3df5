package shmem_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// Team contexts take PE numbers in their team, through Via handles of
// every kind of operation and in PEQuiet; a number outside the team is
// ErrBadPE; goroutines with contexts of their own put and quiet at once;
// a destroyed team's context refuses new operations but still completes
// its own.
var _ = register("team-contexts", func(pe *shmem.PE) error {
	me, np := pe.MyPE(), pe.NPEs()
	// The world backwards: team PE j is world PE np-1-j.
	rev, err := pe.World().Split(np-1, -1, np)
	if err != nil {
		return err
	}
	evens, err := pe.World().Split(0, 2, (np+1)/2)
	if err != nil {
		return err
	}
	c, err := rev.NewContext()
	if err != nil {
		return err
	}
	if c.Team() != rev {
		return errors.New("a team context's Team is not its team")
	}
	s, err := shmem.Malloc[int64](pe, np+8)
	if err != nil {
		return err
	}
	h := s.Via(c)
	// P to every team PE j: world PE np-1-j gets element me.
	for j := 0; j < np; j++ {
		if err := shmem.P(h, me, int64(1000*me+j), j); err != nil {
			return err
		}
	}
	if err := c.PEQuiet(0, np-1); err != nil {
		return err
	}
	if err := c.Quiet(); err != nil {
		return err
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	myTeamPE := np - 1 - me
	if rev.MyPE() != myTeamPE {
		return fmt.Errorf("reversed team: MyPE %d, want %d", rev.MyPE(), myTeamPE)
	}
	for src := 0; src < np; src++ {
		if got, want := s.Local()[src], int64(1000*src+myTeamPE); got != want {
			return fmt.Errorf("element %d is %d, want %d (a team PE number taken as a world rank?)", src, got, want)
		}
	}
	// G, an atomic, a strided put and a put-with-signal, by team number.
	to := 0 // world PE np-1
	if v, err := shmem.G(h, me, to); err != nil || v != int64(1000*me+to) {
		return fmt.Errorf("G through the team context from team PE %d: %d, %v", to, v, err)
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	if _, err := shmem.AtomicFetchAdd(h, np, 1, to); err != nil {
		return err
	}
	if err := shmem.IBPut(h.Slice(np+1, np+8), 3, []int64{int64(me), int64(me)}, 1, 1, 2, myTeamPE); err != nil { // to itself
		return err
	}
	sig, err := shmem.Malloc[uint64](pe, 1)
	if err != nil {
		return err
	}
	if err := shmem.PutSignalNBI(h.Slice(np+2, np+3), []int64{int64(me + 1)}, sig, 1, shmem.SignalAdd, to); err != nil {
		return err
	}
	if err := c.Quiet(); err != nil {
		return err
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	if me == np-1 {
		if got := s.Local()[np]; got != int64(np) {
			return fmt.Errorf("world PE %d (team PE 0) got %d adds, want %d", me, got, np)
		}
		if _, err := shmem.SignalWaitUntil(sig, shmem.CmpEQ, uint64(np)); err != nil {
			return err
		}
	}
	if got := s.Local()[np+1]; got != int64(me) {
		return fmt.Errorf("IBPut to its own team number: %d, want %d", got, me)
	}
	// Team numbers outside the team, then a call that works.
	for _, e := range []struct {
		what string
		err  error
	}{
		{"P to team PE npes", shmem.P(h, 0, 1, np)},
		{"G from team PE -1", second(shmem.G(h, 0, -1))},
		{"atomic on team PE npes", second(shmem.AtomicFetch(h, 0, np))},
		{"PEQuiet of team PE npes", c.PEQuiet(np)},
	} {
		if !errors.Is(e.err, shmem.ErrBadPE) {
			return fmt.Errorf("%s: %v, want ErrBadPE", e.what, e.err)
		}
		if _, err := shmem.G(h, 0, 0); err != nil {
			return fmt.Errorf("after %s: %v", e.what, err)
		}
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}

	// The evens team: team PE k is world PE 2k; odd PEs are outside it.
	if evens != nil {
		e, err := evens.NewContext()
		if err != nil {
			return err
		}
		k := (evens.MyPE() + 1) % evens.NPEs()
		if err := shmem.P(s.Via(e), np+3, int64(me), k); err != nil {
			return err
		}
		if err := e.PEQuiet(k); err != nil {
			return err
		}
		if err := shmem.P(s.Via(e), 0, 1, evens.NPEs()); !errors.Is(err, shmem.ErrBadPE) {
			return fmt.Errorf("P to evens-team PE %d: %v, want ErrBadPE", evens.NPEs(), err)
		}
		if err := e.Close(); err != nil {
			return err
		}
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	if me%2 == 0 {
		m := evens.NPEs()
		from := 2 * ((me/2 - 1 + m) % m)
		if got := s.Local()[np+3]; got != int64(from) {
			return fmt.Errorf("evens team: world PE %d got %d, want %d", me, got, from)
		}
	} else if evens != nil {
		return errors.New("an odd PE is in the evens team")
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}

	// Goroutines, each with its own context of the reversed team, put,
	// quiet and read back at once, each to its own element.
	const workers, rounds = 4, 50
	if err := inGoroutines(workers, func(g int) error {
		gc, err := rev.NewContext()
		if err != nil {
			return err
		}
		defer gc.Close()
		gh := s.Via(gc).Slice(np+4+g, np+5+g)
		for r := 1; r <= rounds; r++ {
			t := (myTeamPE + 1 + g) % np // a team number
			v := int64(me*1_000_000 + g*1000 + r)
			if err := shmem.AtomicSet(gh, 0, v, t); err != nil {
				return err
			}
			if err := gc.Quiet(); err != nil {
				return err
			}
			if got, err := shmem.AtomicFetch(gh, 0, t); err != nil || got != v {
				return fmt.Errorf("goroutine %d round %d on team PE %d: read %d, %v, want %d", g, r, t, got, err, v)
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}

	// A destroyed team's context.
	dup, err := pe.World().Split(0, 1, np)
	if err != nil {
		return err
	}
	dc, err := dup.NewContext()
	if err != nil {
		return err
	}
	if err := shmem.P(s.Via(dc), 0, 1, me); err != nil {
		return err
	}
	if err := pe.BarrierAll(); err != nil { // every PE's P is done before the restore below
		return err
	}
	if err := dup.Destroy(); err != nil {
		return err
	}
	if err := shmem.P(s.Via(dc), 0, 1, me); !errors.Is(err, shmem.ErrFinalized) {
		return fmt.Errorf("P through a destroyed team's context: %v, want ErrFinalized", err)
	}
	if err := dc.Quiet(); err != nil {
		return fmt.Errorf("Quiet of a destroyed team's context: %v", err)
	}
	if err := dc.Close(); err != nil {
		return err
	}
	if _, err := dup.NewContext(); !errors.Is(err, shmem.ErrFinalized) {
		return fmt.Errorf("NewContext of a destroyed team: %v", err)
	}
	var nilTeam *shmem.Team
	if _, err := nilTeam.NewContext(); !errors.Is(err, shmem.ErrInvalid) {
		return fmt.Errorf("NewContext of a nil team: %v", err)
	}
	if err := c.Close(); err != nil {
		return err
	}
	return pe.BarrierAll()
})

func TestTeamContexts(t *testing.T) { each(t, "team-contexts", 1, 2, 3, 4, 8) }

// A team context's Quiet and PEQuiet, in team numbers, flush only the
// links its own operations used.
func TestTeamContextQuietIsItsOwn(t *testing.T) {
	err := shmem.Run(3, func(pe *shmem.PE) error {
		rev, err := pe.World().Split(2, -1, 3) // team PE j is world PE 2-j
		if err != nil {
			return err
		}
		s, err := shmem.Malloc[int64](pe, 1)
		if err != nil {
			return err
		}
		if pe.MyPE() == 0 {
			c1, err := rev.NewContext()
			if err != nil {
				return err
			}
			c2, err := rev.NewContext()
			if err != nil {
				return err
			}
			if err := shmem.P(s.Via(c1), 0, 11, 1); err != nil { // world PE 1
				return err
			}
			if err := shmem.P(s.Via(c2), 0, 22, 0); err != nil { // world PE 2
				return err
			}
			if err := c1.Quiet(); err != nil {
				return err
			}
			if shmem.ContextOutstanding(c1, 1) || !shmem.ContextOutstanding(c2, 2) {
				return fmt.Errorf("after c1.Quiet: c1's stream to world PE 1 outstanding %v, c2's to 2 %v (want false, true)",
					shmem.ContextOutstanding(c1, 1), shmem.ContextOutstanding(c2, 2))
			}
			if err := c2.PEQuiet(2); err != nil { // world PE 0: c2 used no such link
				return err
			}
			if !shmem.ContextOutstanding(c2, 2) {
				return errors.New("c2.PEQuiet(team PE 2) flushed c2's stream to world PE 2")
			}
			if err := c2.PEQuiet(0); err != nil { // world PE 2
				return err
			}
			if shmem.ContextOutstanding(c2, 2) {
				return errors.New("c2.PEQuiet(team PE 0) left c2's stream to world PE 2 outstanding")
			}
		}
		if err := pe.BarrierAll(); err != nil {
			return err
		}
		if want := map[int]int64{0: 0, 1: 11, 2: 22}[pe.MyPE()]; s.Local()[0] != want {
			return fmt.Errorf("PE %d holds %d, want %d", pe.MyPE(), s.Local()[0], want)
		}
		return pe.BarrierAll()
	}, shmem.WithTimeout(30*time.Second), shmem.WithHeapSize(1<<20), shmem.WithHosts(pretendHosts("remote", 3)))
	if err != nil {
		t.Fatal(err)
	}
}

// Goroutines of every PE, each with its own context (world contexts and
// contexts of the reversed team in turn), run a pipeline to the right
// neighbour at once: a block-strided put of the round's data, a
// put-with-signal NBI of the round's stamp, their own context's Quiet,
// and a wait for the neighbour's acknowledgement (SignalUpdate) before
// the next round. Each receiver checks the whole block pattern of every
// round, so a context whose Quiet left another's data behind, or a team
// number taken as a world rank, shows.
var _ = register("context-pipelines", func(pe *shmem.PE) error {
	me, np := pe.MyPE(), pe.NPEs()
	right, left := (me+1)%np, (me-1+np)%np
	rev, err := pe.World().Split(np-1, -1, np) // team PE j is world PE np-1-j
	if err != nil {
		return err
	}
	const workers, rounds, block, nblocks, stride = 4, 30, 3, 5, 7
	const region = (nblocks-1)*stride + block + 1 // + the stamp
	data, err := shmem.Malloc[int64](pe, workers*region)
	if err != nil {
		return err
	}
	sigs, err := shmem.Malloc[uint64](pe, 2*workers) // [g]: stamp arrived; [workers+g]: acknowledged
	if err != nil {
		return err
	}
	val := func(from, g, r, k int) int64 { return int64(from*1_000_000 + g*10_000 + r*100 + k) }
	if err := inGoroutines(workers, func(g int) error {
		c, to, back := (*shmem.Context)(nil), right, left
		var err error
		if g%2 == 0 {
			c, err = pe.NewContext()
		} else {
			c, err = rev.NewContext()
			to, back = np-1-right, np-1-left // the neighbours' numbers in the reversed team
		}
		if err != nil {
			return err
		}
		defer c.Close()
		mine := data.Slice(g*region, (g+1)*region)
		h := mine.Via(c)
		stamp, ack := sigs.Slice(g, g+1), sigs.Slice(workers+g, workers+g+1)
		src := make([]int64, nblocks*block)
		for r := 1; r <= rounds; r++ {
			for k := range src {
				src[k] = val(me, g, r, k)
			}
			if err := shmem.IBPut(h, stride, src, block, block, nblocks, to); err != nil {
				return err
			}
			if err := shmem.PutSignalNBI(h.Slice(region-1, region), []int64{int64(r)}, stamp, uint64(r), shmem.SignalSet, to); err != nil {
				return err
			}
			if err := c.Quiet(); err != nil {
				return err
			}
			// Receive round r from the left neighbour's goroutine g.
			if _, err := shmem.SignalWaitUntil(stamp, shmem.CmpGE, uint64(r)); err != nil {
				return err
			}
			got := mine.Local()
			if got[region-1] != int64(r) {
				return fmt.Errorf("goroutine %d round %d: stamp %d", g, r, got[region-1])
			}
			for b := 0; b < nblocks; b++ {
				for j := 0; j < block; j++ {
					if w := val(left, g, r, b*block+j); got[b*stride+j] != w {
						return fmt.Errorf("goroutine %d round %d: block %d element %d is %d, want %d", g, r, b, j, got[b*stride+j], w)
					}
				}
			}
			// Acknowledge to the left, then wait for the right's.
			if err := shmem.SignalUpdate(ack.Via(c), uint64(r), shmem.SignalSet, back); err != nil {
				return err
			}
			if err := c.Quiet(); err != nil {
				return err
			}
			if _, err := shmem.SignalWaitUntil(ack, shmem.CmpGE, uint64(r)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	return pe.BarrierAll()
})

func TestContextPipelines(t *testing.T) { each(t, "context-pipelines", 1, 2, 3, 8) }
