package shmem_test

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// Strided transfers whose last element falls outside the object are
// ErrOutOfBounds on every route, whatever the strides (including ones
// whose products overflow), and change nothing.
var _ = register("strided-bounds", func(pe *shmem.PE) error {
	me, np := pe.MyPE(), pe.NPEs()
	s, err := shmem.Malloc[int64](pe, 4)
	if err != nil {
		return err
	}
	for i := range s.Local() {
		s.Local()[i] = 7
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	src := []int64{1, 2, 3, 4, 5}
	for t := 0; t < np; t++ {
		bad := []struct {
			what string
			err  error
		}{
			{"IPut stride MaxInt/2", shmem.IPut(s, math.MaxInt/2, src, 1, 5, t)},
			{"IPut stride MaxInt", shmem.IPut(s, math.MaxInt, src, 1, 2, t)},
			{"IPut last element at 4", shmem.IPut(s, 2, src, 1, 3, t)},
			{"IPut local stride MaxInt/2", shmem.IPut(s, 1, src, math.MaxInt/2, 2, t)},
			{"IPut n MaxInt", shmem.IPut(s, 1, src, 1, math.MaxInt, t)},
			{"IPut from an empty slice", shmem.IPut(s, 1, nil, 1, 1, t)},
			{"IGet stride MaxInt/2", shmem.IGet(make([]int64, 5), 1, s, math.MaxInt/2, 5, t)},
			{"IGet local stride MaxInt", shmem.IGet(make([]int64, 5), math.MaxInt, s, 1, 2, t)},
			{"IGet into an empty slice", shmem.IGet(nil, 1, s, 1, 1, t)},
			{"IPut to a bad Slice", shmem.IPut(s.Slice(3, 1), 1, src, 1, 1, t)},
		}
		for _, b := range bad {
			if !errors.Is(b.err, shmem.ErrOutOfBounds) {
				return fmt.Errorf("%s on PE %d: %v, want ErrOutOfBounds", b.what, t, b.err)
			}
		}
		for _, b := range []error{
			shmem.IPut(s, 0, src, 1, 1, t),
			shmem.IGet(make([]int64, 1), 1, s, -1, 1, t),
			shmem.IPut(s, 1, src, 1, -1, t),
		} {
			if !errors.Is(b, shmem.ErrInvalid) {
				return fmt.Errorf("strided call with a bad stride or count on PE %d: %v, want ErrInvalid", t, b)
			}
		}
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	for i, v := range s.Local() {
		if v != 7 {
			return fmt.Errorf("element %d is %d after refused strided calls, want 7", i, v)
		}
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	// The largest transfers that fit still work: elements 0 and 3.
	to := (me + 1) % np
	if err := shmem.IPut(s, 3, src, 4, 2, to); err != nil {
		return err
	}
	got := make([]int64, 3)
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	if err := shmem.IGet(got, 2, s, 3, 2, to); err != nil {
		return err
	}
	if got[0] != 1 || got[2] != 5 || got[1] != 0 {
		return fmt.Errorf("strided round trip on PE %d: %v, want [1 0 5]", to, got)
	}
	return pe.BarrierAll()
})

func TestStridedBounds(t *testing.T) { each(t, "strided-bounds", 1, 3) }

// An out-of-range Slice is a zero-length handle whose every use fails
// with ErrOutOfBounds.
func TestSliceOutOfRange(t *testing.T) {
	err := shmem.Run(1, func(pe *shmem.PE) error {
		s, err := shmem.Malloc[int64](pe, 4)
		if err != nil {
			return err
		}
		for _, b := range []shmem.Sym[int64]{s.Slice(3, 2), s.Slice(-1, 2), s.Slice(0, 5), s.Slice(3, 2).Slice(0, 0)} {
			if b.Len() != 0 {
				return fmt.Errorf("out-of-range Slice has Len %d, want 0", b.Len())
			}
			if b.Local() != nil || shmem.Ptr(b, 0) != nil {
				return fmt.Errorf("out-of-range Slice gives a view")
			}
			if err := shmem.Put(b, nil, 0); !errors.Is(err, shmem.ErrOutOfBounds) {
				return fmt.Errorf("Put to an out-of-range Slice: %v", err)
			}
			if err := shmem.WaitUntilAll(b, nil, shmem.CmpEQ, 0); !errors.Is(err, shmem.ErrOutOfBounds) {
				return fmt.Errorf("WaitUntilAll on an out-of-range Slice: %v", err)
			}
			if err := shmem.SetLock(b); !errors.Is(err, shmem.ErrOutOfBounds) {
				return fmt.Errorf("SetLock on an out-of-range Slice: %v", err)
			}
		}
		if s.Slice(4, 4).Len() != 0 || s.Slice(1, 3).Len() != 2 {
			return fmt.Errorf("in-range Slice lengths wrong")
		}
		return nil
	}, shmem.WithHeapSize(1<<20))
	if err != nil {
		t.Fatal(err)
	}
}

// Free drops the PE's state for lock words inside the object.
var _ = register("lock-state-freed", func(pe *shmem.PE) error {
	for range 20 {
		l, err := shmem.Malloc[int64](pe, 4)
		if err != nil {
			return err
		}
		for i := range 4 {
			if err := shmem.SetLock(l.Slice(i, i+1)); err != nil {
				return err
			}
			if err := shmem.ClearLock(l.Slice(i, i+1)); err != nil {
				return err
			}
		}
		if err := shmem.Free(l); err != nil {
			return err
		}
	}
	if n := shmem.LockStates(pe); n != 0 {
		return fmt.Errorf("PE %d keeps state for %d lock words after freeing every object", pe.MyPE(), n)
	}
	return nil
})

func TestLockStateFreed(t *testing.T) { each(t, "lock-state-freed", 2) }

// Team.Split's bounds check cannot overflow.
func TestSplitFits(t *testing.T) {
	cases := []struct {
		start, stride, size, n int
		ok                     bool
	}{
		{0, 1, 4, 4, true}, {0, 1, 5, 4, false}, {3, -1, 4, 4, true}, {3, -1, 5, 4, false},
		{0, 2, 2, 4, true}, {0, 2, 3, 4, false}, {1, 2, 2, 4, true},
		{0, math.MaxInt, 2, 4, false}, {0, math.MaxInt / 2, 3, 4, false}, {3, math.MinInt, 2, 4, false},
		{3, -(math.MaxInt / 2), 3, 4, false}, {2, 5, 1, 4, true}, {0, 0, 1, 4, true},
	}
	for _, c := range cases {
		if got := shmem.SplitFits(c.start, c.stride, c.size, c.n); got != c.ok {
			t.Errorf("splitFits(%d, %d, %d, %d) = %v, want %v", c.start, c.stride, c.size, c.n, got, c.ok)
		}
	}
	err := shmem.Run(2, func(pe *shmem.PE) error {
		if _, err := pe.World().Split(0, math.MaxInt/2, 3); !errors.Is(err, shmem.ErrBadPE) {
			return fmt.Errorf("Split with an overflowing stride: %v, want ErrBadPE", err)
		}
		return nil
	}, shmem.WithHeapSize(1<<20))
	if err != nil {
		t.Fatal(err)
	}
}

// Under SHMEM_DEBUG, PEs that make different world-wide collective calls
// all fail with ErrAsymmetric, whichever calls they are, and stay in
// step: the same call everywhere works afterwards.
var _ = register("debug-mismatched-collectives", func(pe *shmem.PE) error {
	me := pe.MyPE()
	if !pe.Info().Debug {
		return fmt.Errorf("the scenario wants SHMEM_DEBUG")
	}
	mismatch := []struct {
		what string
		pe0  func() error
		rest func() error
	}{
		{"Malloc against BarrierAll",
			func() error { _, err := shmem.Malloc[int64](pe, 8); return err },
			pe.BarrierAll},
		{"BarrierAll against SyncAll", pe.BarrierAll, pe.SyncAll},
		{"Malloc against World().Sync",
			func() error { _, err := shmem.Malloc[int64](pe, 8); return err },
			pe.World().Sync},
	}
	for _, m := range mismatch {
		call := m.rest
		if me == 0 {
			call = m.pe0
		}
		if err := call(); !errors.Is(err, shmem.ErrAsymmetric) {
			return fmt.Errorf("%s: PE %d got %v, want ErrAsymmetric", m.what, me, err)
		}
	}
	s, err := shmem.Malloc[int64](pe, 8)
	if err != nil {
		return fmt.Errorf("Malloc everywhere after the mismatches: %w", err)
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	return shmem.Free(s)
})

func TestDebugMismatchedCollectives(t *testing.T) {
	eachWith(t, "debug-mismatched-collectives", 3, []shmem.Option{shmem.WithDebug(true)}, "SHMEM_DEBUG=1")
}

// Every method of a nil *PE (what a failed Init returns) is an error or
// a zero answer, never a panic.
func TestNilPE(t *testing.T) {
	var pe *shmem.PE
	for name, err := range map[string]error{
		"Finalize": pe.Finalize(), "Fence": pe.Fence(), "Quiet": pe.Quiet(), "PEQuiet": pe.PEQuiet(0),
		"BarrierAll": pe.BarrierAll(), "SyncAll": pe.SyncAll(), "World().Sync": pe.World().Sync(),
	} {
		if !errors.Is(err, shmem.ErrInvalid) {
			t.Errorf("%s on a nil PE: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := pe.NewContext(); !errors.Is(err, shmem.ErrInvalid) {
		t.Errorf("NewContext on a nil PE: %v", err)
	}
	if _, err := shmem.Malloc[int64](pe, 1); !errors.Is(err, shmem.ErrInvalid) {
		t.Errorf("Malloc on a nil PE: %v", err)
	}
	if pe.MyPE() != -1 || pe.NPEs() != 0 || pe.Accessible(0) || pe.SameHost(0) || pe.World() != nil || pe.Shared() != nil || pe.Info().PE != -1 {
		t.Error("the queries of a nil PE do not give zero answers")
	}
}

// Under SHMEM_DEBUG, two PEs that make their collective calls on two
// teams in different orders wait for each other; when the call times
// out (after 1 s here), each is told ErrAsymmetric, and a PE that only
// waits for a peer busy in a team it is not in keeps a plain ErrTimeout.
// First two teams of PEs 0 and 1 in swapped order, which the PEs then
// complete so the job stays in step; then the case, a world call
// (Malloc) against a smaller team's Sync: the world's barriers are out
// of step after it, so PE 0 ends the job with GlobalExit(0). Between the
// steps PEs meet through a counter they poll, not a barrier, which would
// time out too while the others wait out theirs.
var _ = register("debug-cross-team-order", func(pe *shmem.PE) error {
	me := pe.MyPE()
	if !pe.Info().Debug {
		return fmt.Errorf("the scenario wants SHMEM_DEBUG")
	}
	count, err := shmem.Malloc[int64](pe, 4)
	if err != nil {
		return err
	}
	// meet adds one to counter i on PE 0 and polls it until it reaches
	// want.
	meet := func(i int, want int64) error {
		if err := shmem.AtomicAdd(count, i, 1, 0); err != nil {
			return err
		}
		for deadline := time.Now().Add(time.Minute); ; runtime.Gosched() {
			v, err := shmem.AtomicFetch(count, i, 0)
			if err != nil || v >= want {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("PE %d: counter %d is %d after a minute, want %d", me, i, v, want)
			}
		}
	}
	t1, err := pe.World().Split(0, 1, 2)
	if err != nil {
		return err
	}
	t2, err := pe.World().Split(0, 1, 2)
	if err != nil {
		return err
	}
	if me < 2 {
		first, second := t1, t2
		if me == 1 {
			first, second = t2, t1
		}
		if err := first.Sync(); !errors.Is(err, shmem.ErrAsymmetric) || !errors.Is(err, shmem.ErrTimeout) {
			return fmt.Errorf("PE %d: the first of two teams' Syncs in swapped order: %v, want ErrTimeout and ErrAsymmetric", me, err)
		}
		if err := meet(0, 2); err != nil {
			return err
		}
		// Each now makes the call the other was stuck in: both pass.
		if err := second.Sync(); err != nil {
			return fmt.Errorf("PE %d: the second team's Sync: %w", me, err)
		}
		if err := t1.Sync(); err != nil {
			return fmt.Errorf("PE %d: t1 in step again: %w", me, err)
		}
		if err := t2.Sync(); err != nil {
			return fmt.Errorf("PE %d: t2 in step again: %w", me, err)
		}
	}
	if err := meet(1, 3); err != nil {
		return err
	}
	var got error
	if me == 1 {
		got = t1.Sync()
	} else {
		_, got = shmem.Malloc[int64](pe, 8)
	}
	switch {
	case me < 2 && !errors.Is(got, shmem.ErrAsymmetric):
		return fmt.Errorf("PE %d: Malloc against a 2-PE team's Sync: %v, want ErrAsymmetric", me, got)
	case me == 2 && (!errors.Is(got, shmem.ErrTimeout) || errors.Is(got, shmem.ErrAsymmetric)):
		return fmt.Errorf("PE 2: Malloc while PE 1 is in a team PE 2 is not in: %v, want a plain ErrTimeout", got)
	}
	if err := meet(2, 3); err != nil {
		return err
	}
	if me == 0 {
		pe.GlobalExit(0)
	}
	// Wait for the end PE 0 makes.
	for {
		if err := shmem.WaitUntil(count, 3, shmem.CmpEQ, -1); !errors.Is(err, shmem.ErrTimeout) {
			return fmt.Errorf("PE %d after the job's end: %w", me, err)
		}
	}
})

func TestDebugCrossTeamOrder(t *testing.T) {
	eachWith(t, "debug-cross-team-order", 3, []shmem.Option{shmem.WithDebug(true), shmem.WithTimeout(time.Second)}, "SHMEM_DEBUG=1", "GOSHMEM_TIMEOUT=1s")
}

// WaitCollective's misuse is an error and waits for nothing: a nil team,
// a writer outside the team, an index past the words; a word already at
// its value returns at once.
var _ = register("wait-collective-misuse", func(pe *shmem.PE) error {
	t := pe.World()
	words, _ := t.CollectiveArea()
	var nilTeam *shmem.Team
	bad := []struct {
		what string
		err  error
		want error
	}{
		{"nil team", nilTeam.WaitCollective(words, 0, 1, 0), shmem.ErrInvalid},
		{"writer -1", t.WaitCollective(words, 0, 1, -1), shmem.ErrBadPE},
		{"writer NPEs", t.WaitCollective(words, 0, 1, pe.NPEs()), shmem.ErrBadPE},
		{"index past the words", t.WaitCollective(words, words.Len(), 1, 0), shmem.ErrOutOfBounds},
		{"a zero handle", t.WaitCollective(shmem.Sym[uint64]{}, 0, 1, 0), shmem.ErrInvalid},
	}
	for _, b := range bad {
		if !errors.Is(b.err, b.want) {
			return fmt.Errorf("WaitCollective with %s: %v, want %v", b.what, b.err, b.want)
		}
	}
	// Word 0 is zero on a new team: >= 0 holds at once.
	if err := t.WaitCollective(words, 0, 0, pe.NPEs()-1); err != nil {
		return fmt.Errorf("WaitCollective of a word already there: %w", err)
	}
	return pe.BarrierAll()
})

func TestWaitCollectiveMisuse(t *testing.T) { each(t, "wait-collective-misuse", 1, 2) }

// wait-from-misuse: WaitUntilAnyVectorFrom's bad arguments are errors
// that change nothing; a from of -1 or this PE watches no departure, a
// word already there returns at once whatever from is; Departed is false
// for this PE, ranks outside the job and a PE that has not finalized.
var _ = register("wait-from-misuse", func(pe *shmem.PE) error {
	s, err := shmem.Malloc[uint64](pe, 2)
	if err != nil {
		return err
	}
	vs := []uint64{0, 0}
	bad := []struct {
		what string
		want error
		call func() (int, error)
	}{
		{"from NPEs", shmem.ErrBadPE, func() (int, error) { return shmem.WaitUntilAnyVectorFrom(s, nil, shmem.CmpNE, vs, pe.NPEs()) }},
		{"a short vector", shmem.ErrInvalid, func() (int, error) { return shmem.WaitUntilAnyVectorFrom(s, nil, shmem.CmpNE, vs[:1], 0) }},
		{"a short mask", shmem.ErrOutOfBounds, func() (int, error) { return shmem.WaitUntilAnyVectorFrom(s, []bool{true}, shmem.CmpNE, vs, 0) }},
		{"a zero handle", shmem.ErrInvalid, func() (int, error) {
			return shmem.WaitUntilAnyVectorFrom(shmem.Sym[uint64]{}, nil, shmem.CmpNE, nil, 0)
		}},
	}
	for _, b := range bad {
		if i, err := b.call(); i != -1 || !errors.Is(err, b.want) {
			return fmt.Errorf("WaitUntilAnyVectorFrom with %s: %d, %v, want -1, %v", b.what, i, err, b.want)
		}
	}
	// Element 1 is 0 == vs[1]: CmpEQ holds at once, for every from.
	for _, from := range []int{-1, pe.MyPE(), pe.NPEs() - 1} {
		if i, err := shmem.WaitUntilAnyVectorFrom(s, []bool{false, true}, shmem.CmpEQ, vs, from); i != 1 || err != nil {
			return fmt.Errorf("WaitUntilAnyVectorFrom of an element already there, from %d: %d, %v, want 1, nil", from, i, err)
		}
	}
	for _, r := range []int{-1, pe.MyPE(), pe.NPEs(), pe.NPEs() - 1 - pe.MyPE()} {
		if pe.Departed(r) {
			return fmt.Errorf("Departed(%d) on PE %d of %d, before any Finalize: true", r, pe.MyPE(), pe.NPEs())
		}
	}
	var nilPE *shmem.PE
	if nilPE.Departed(0) {
		return errors.New("Departed of a nil PE: true")
	}
	return pe.BarrierAll()
})

func TestWaitFromMisuse(t *testing.T) { each(t, "wait-from-misuse", 1, 2) }
