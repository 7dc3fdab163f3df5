package shmem_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// Team allocation (TeamMalloc) scenarios, each run over every route.

// sameOnAll checks that every PE passed the same v: each stores v on
// every PE, all meet, each compares what it holds.
func sameOnAll(pe *shmem.PE, what string, v int64) error {
	obj, err := shmem.Malloc[int64](pe, pe.NPEs())
	if err != nil {
		return fmt.Errorf("%s: Malloc: %w", what, err)
	}
	for r := range pe.NPEs() {
		if err := shmem.P(obj, pe.MyPE(), v, r); err != nil {
			return err
		}
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	var bad error
	for r, got := range obj.Local() {
		if got != v && bad == nil {
			bad = fmt.Errorf("%s: PE %d has %d, PE %d has %d", what, pe.MyPE(), v, r, got)
		}
	}
	if err := shmem.Free(obj); err != nil {
		return err
	}
	return bad
}

// outcome is the kind of an allocation's error, as a number every PE
// can compare: 0 none, 1 ErrInvalid, 2 ErrHeapExhausted, 3 ErrAsymmetric,
// 4 another.
func outcome(err error) int64 {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, shmem.ErrInvalid):
		return 1
	case errors.Is(err, shmem.ErrHeapExhausted):
		return 2
	case errors.Is(err, shmem.ErrAsymmetric):
		return 3
	}
	return 4
}

// teamSame is sameOnAll over a team's members, through a team object.
func teamSame(t *shmem.Team, what string, v int64) error {
	obj, err := shmem.TeamMalloc[int64](t, t.NPEs())
	if err != nil {
		return fmt.Errorf("%s: TeamMalloc: %w", what, err)
	}
	for i := range t.NPEs() {
		if err := shmem.P(obj, t.MyPE(), v, t.WorldPE(i)); err != nil {
			return err
		}
	}
	if err := t.PE().Quiet(); err != nil {
		return err
	}
	if err := t.Sync(); err != nil {
		return err
	}
	var bad error
	for i, got := range obj.Local() {
		if got != v && bad == nil {
			bad = fmt.Errorf("%s: member %d has %d, member %d has %d", what, t.MyPE(), v, i, got)
		}
	}
	if err := shmem.Free(obj); err != nil {
		return err
	}
	return bad
}

// overlaps reports whether [a, a+an) and [b, b+bn) share a byte.
func overlaps(a, an, b, bn uint64) bool { return an > 0 && bn > 0 && a < b+bn && b < a+an }

// team-malloc: the even PEs (stride 2) and the odd PEs counted down
// (stride -2) each allocate over their team at once. Offsets are equal
// on every member, a Put to each member lands in its copy, a Put to a
// PE outside the team is ErrBadPE, and a world Malloc afterwards lies
// below every team block on every PE while it fills its whole object.
var _ = register("team-malloc", func(pe *shmem.PE) error {
	me, n := pe.MyPE(), pe.NPEs()
	w := pe.World()
	used0 := pe.Info().HeapUsed
	evens, err := w.Split(0, 2, (n+1)/2)
	if err != nil {
		return err
	}
	odd := n - 1
	if odd%2 == 0 {
		odd--
	}
	var odds *shmem.Team
	if odd >= 1 {
		if odds, err = w.Split(odd, -2, (odd+1)/2); err != nil {
			return err
		}
	}
	mine := evens
	if me%2 == 1 {
		mine = odds
	}
	// Different sizes on the two teams, so their floors differ.
	elems := 1000 + 3000*(me%2)
	blk, err := shmem.TeamMalloc[int64](mine, elems)
	if err != nil {
		return err
	}
	if blk.Len() != elems {
		return fmt.Errorf("TeamMalloc of %d elements has %d", elems, blk.Len())
	}
	for i, v := range blk.Local() {
		if v != 0 {
			return fmt.Errorf("TeamMalloc: element %d is %d, not zeroed", i, v)
		}
	}
	if err := teamSame(mine, "team block offset", int64(blk.Offset())); err != nil {
		return err
	}
	// Each member writes its number into element (its team rank) of
	// every member's copy.
	for i := range mine.NPEs() {
		if err := shmem.P(blk, mine.MyPE(), int64(100+me), mine.WorldPE(i)); err != nil {
			return err
		}
	}
	if err := pe.Quiet(); err != nil {
		return err
	}
	if err := mine.Sync(); err != nil {
		return err
	}
	for i := range mine.NPEs() {
		if got, want := blk.Local()[i], int64(100+mine.WorldPE(i)); got != want {
			return fmt.Errorf("team block element %d is %d, want %d", i, got, want)
		}
	}
	if n > 1 {
		other := me ^ 1 // of the other parity
		if other >= n {
			other = me - 1
		}
		if err := shmem.P(blk, 0, 1, other); !errors.Is(err, shmem.ErrBadPE) {
			return fmt.Errorf("Put to PE %d outside the team: %v", other, err)
		}
		if shmem.Ptr(blk, other) != nil {
			return fmt.Errorf("Ptr to PE %d outside the team is not nil", other)
		}
	}
	// A world object of most of what is left lies below every team
	// block on every PE; filling it leaves the team blocks intact.
	if got, want := pe.Info().HeapUsed-used0, uint64(8*elems); got < want {
		return fmt.Errorf("HeapUsed grew by %d bytes with a %d-byte team block", got, want)
	}
	big := int(pe.Info().HeapSize / 8 / 2)
	wobj, err := shmem.Malloc[int64](pe, big)
	if err != nil {
		return fmt.Errorf("world Malloc of %d elements after team blocks: %w", big, err)
	}
	if overlaps(wobj.Offset(), uint64(8*wobj.Len()), blk.Offset(), uint64(8*blk.Len())) {
		return fmt.Errorf("world object at %d+%d overlaps the team block at %d+%d", wobj.Offset(), 8*wobj.Len(), blk.Offset(), 8*blk.Len())
	}
	for i := range wobj.Local() {
		wobj.Local()[i] = -1
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	for i := range mine.NPEs() {
		if got, want := blk.Local()[i], int64(100+mine.WorldPE(i)); got != want {
			return fmt.Errorf("after the world fill: team block element %d is %d, want %d", i, got, want)
		}
	}
	if err := shmem.Free(wobj); err != nil {
		return err
	}
	if err := shmem.Free(blk); err != nil {
		return err
	}
	if _, err := shmem.G(blk, 0, me); !errors.Is(err, shmem.ErrOutOfBounds) {
		return fmt.Errorf("G on a freed team block: %v", err)
	}
	for _, t := range []*shmem.Team{evens, odds} {
		if t != nil {
			if err := t.Destroy(); err != nil {
				return err
			}
		}
	}
	if used := pe.Info().HeapUsed; used != used0 {
		return fmt.Errorf("HeapUsed is %d after every object was freed, %d before", used, used0)
	}
	return nil
})

func TestTeamMalloc(t *testing.T) { each(t, "team-malloc", 1, 2, 3, 4) }

// team-malloc-errors: every error of TeamMalloc is the same on every
// member, leaves nothing allocated and the team usable: bad sizes,
// disagreeing members, no room on one member only, and a world Malloc
// that would cross one PE's team blocks only. Then free and reuse.
var _ = register("team-malloc-errors", func(pe *shmem.PE) error {
	me, n := pe.MyPE(), pe.NPEs()
	w := pe.World()
	heapSize := pe.Info().HeapSize
	if _, err := shmem.TeamMalloc[int64](nil, 1); !errors.Is(err, shmem.ErrInvalid) {
		return fmt.Errorf("TeamMalloc on a nil team: %v", err)
	}
	// The team of every PE but the last (all of them in a one-PE job),
	// and the last PE alone.
	size := max(n-1, 1)
	t, err := w.Split(0, 1, size)
	if err != nil {
		return err
	}
	last, err := w.Split(n-1, 1, 1)
	if err != nil {
		return err
	}
	used0 := pe.Info().HeapUsed
	if t != nil {
		if _, err := shmem.TeamMalloc[int64](t, -1); !errors.Is(err, shmem.ErrInvalid) {
			return fmt.Errorf("TeamMalloc of -1 elements: %v", err)
		}
		if _, err := shmem.TeamMalloc[int64](t, int(heapSize)); !errors.Is(err, shmem.ErrHeapExhausted) {
			return fmt.Errorf("TeamMalloc of more than the heap: %v", err)
		}
		if _, err := shmem.TeamAlign[int64](t, 3, 1); !errors.Is(err, shmem.ErrInvalid) {
			return fmt.Errorf("TeamAlign to 3 bytes: %v", err)
		}
		// Members disagree: member 0 asks for one element more.
		dis, err := shmem.TeamMalloc[int64](t, 10+boolInt(t.MyPE() == 0))
		if t.NPEs() > 1 && !errors.Is(err, shmem.ErrAsymmetric) {
			return fmt.Errorf("disagreeing TeamMalloc: %v", err)
		}
		if t.NPEs() == 1 { // nobody to disagree with
			if err := shmem.Free(dis); err != nil {
				return err
			}
		}
		if err := teamSame(t, "disagreeing TeamMalloc's outcome", outcome(err)); err != nil {
			return err
		}
		// A different element type is a disagreement too.
		if t.NPEs() > 1 {
			var err error
			if t.MyPE() == 0 {
				_, err = shmem.TeamMalloc[int32](t, 2)
			} else {
				_, err = shmem.TeamMalloc[int64](t, 1)
			}
			if !errors.Is(err, shmem.ErrAsymmetric) {
				return fmt.Errorf("TeamMalloc of different element types: %v", err)
			}
		}
		// A good one after the errors.
		ok, err := shmem.TeamMalloc[int64](t, 10)
		if err != nil {
			return fmt.Errorf("TeamMalloc after errors: %w", err)
		}
		if err := shmem.Free(ok); err != nil {
			return err
		}
		// Zero elements: a zero-length handle.
		z, err := shmem.TeamMalloc[int64](t, 0)
		if err != nil || z.Len() != 0 {
			return fmt.Errorf("TeamMalloc of 0 elements: %d, %v", z.Len(), err)
		}
		if err := shmem.Free(z); err != nil {
			return err
		}
	}
	if err := sameOnAll(pe, "HeapUsed after the errors", int64(pe.Info().HeapUsed-used0)); err != nil {
		return err
	}
	// The last PE alone takes half its heap; then a team of everyone
	// asks for more than the other half: free on every other PE, not on
	// the last one, so ErrHeapExhausted on every PE.
	half := int(heapSize / 2 / 8)
	var lone shmem.Sym[int64]
	if last != nil {
		if lone, err = shmem.TeamMalloc[int64](last, half); err != nil {
			return fmt.Errorf("TeamMalloc of half the heap on a one-PE team: %w", err)
		}
		lone.Local()[half-1] = 77
	}
	all, err := w.Split(0, 1, n) // a team of every PE, not the world itself
	if err != nil {
		return err
	}
	_, err = shmem.TeamMalloc[int64](all, half+half/2)
	if !errors.Is(err, shmem.ErrHeapExhausted) {
		return fmt.Errorf("TeamMalloc of 3/4 of the heap with half taken on PE %d: %v", n-1, err)
	}
	if err := sameOnAll(pe, "TeamMalloc outcome with one member full", outcome(err)); err != nil {
		return err
	}
	// A world Malloc that would cross the last PE's team block fails on
	// every PE alike, although every other PE has the room.
	_, err = shmem.Malloc[int64](pe, half+half/2)
	if !errors.Is(err, shmem.ErrHeapExhausted) {
		return fmt.Errorf("world Malloc of 3/4 of the heap with half taken by PE %d's team block: %v", n-1, err)
	}
	if err := sameOnAll(pe, "world Malloc outcome crossing one PE's team block", outcome(err)); err != nil {
		return err
	}
	// What fits below it works, and leaves the lone block intact.
	wobj, err := shmem.Malloc[int64](pe, half/2)
	if err != nil {
		return fmt.Errorf("world Malloc of a quarter of the heap: %w", err)
	}
	for i := range wobj.Local() {
		wobj.Local()[i] = -1
	}
	// Realloc past the team block fails alike; within room it works.
	if _, err := shmem.Realloc(wobj, half+half/4); !errors.Is(err, shmem.ErrHeapExhausted) {
		return fmt.Errorf("Realloc across PE %d's team block: %v", n-1, err)
	}
	if wobj, err = shmem.Realloc(wobj, half/2+100); err != nil {
		return fmt.Errorf("Realloc within the room: %w", err)
	}
	if last != nil {
		if got := lone.Local()[half-1]; got != 77 {
			return fmt.Errorf("the one-PE team's block holds %d after the world object's fill, want 77", got)
		}
		if _, err := shmem.Realloc(lone, 1); !errors.Is(err, shmem.ErrInvalid) {
			return fmt.Errorf("Realloc of a team block: %v", err)
		}
		// The team's destruction frees its block.
		if err := last.Destroy(); err != nil {
			return err
		}
		if lone.Local() != nil {
			return fmt.Errorf("a team block's Local after its team's Destroy is not nil")
		}
		if _, err := shmem.TeamMalloc[int64](last, 1); !errors.Is(err, shmem.ErrFinalized) {
			return fmt.Errorf("TeamMalloc on a destroyed team: %v", err)
		}
	}
	// Now the whole team has the room.
	ok, err := shmem.TeamMalloc[int64](all, half)
	if err != nil {
		return fmt.Errorf("TeamMalloc after the one-PE team's Destroy: %w", err)
	}
	// Free and reuse: a, b, c stacked downwards; freeing b leaves a gap
	// that a block of b's size fills again, at b's offset.
	a, err := shmem.TeamMalloc[byte](all, 4096)
	if err != nil {
		return err
	}
	b, err := shmem.TeamMalloc[byte](all, 8192)
	if err != nil {
		return err
	}
	c, err := shmem.TeamMalloc[byte](all, 4096)
	if err != nil {
		return err
	}
	if !(c.Offset() < b.Offset() && b.Offset() < a.Offset() && a.Offset() < ok.Offset()) {
		return fmt.Errorf("team blocks at %d, %d, %d, %d: not stacked downwards", ok.Offset(), a.Offset(), b.Offset(), c.Offset())
	}
	bOff := b.Offset()
	if err := shmem.Free(b); err != nil {
		return err
	}
	b2, err := shmem.TeamMalloc[byte](all, 8192)
	if err != nil {
		return err
	}
	if b2.Offset() != bOff {
		return fmt.Errorf("a block of the freed one's size went to %d, not into its gap at %d", b2.Offset(), bOff)
	}
	if err := teamSame(all, "reused offset", int64(b2.Offset())); err != nil {
		return err
	}
	for _, s := range []shmem.Sym[byte]{a, b2, c} {
		if err := shmem.Free(s); err != nil {
			return err
		}
	}
	if err := shmem.Free(ok); err != nil {
		return err
	}
	if err := shmem.Free(wobj); err != nil {
		return err
	}
	if err := all.Destroy(); err != nil {
		return err
	}
	if t != nil {
		if err := t.Destroy(); err != nil {
			return err
		}
	}
	if used := pe.Info().HeapUsed; used != used0 {
		return fmt.Errorf("PE %d: HeapUsed is %d after every object was freed, %d before", me, used, used0)
	}
	// With every team block gone, a world object of 3/4 of the heap fits.
	big, err := shmem.Malloc[int64](pe, half+half/2)
	if err != nil {
		return fmt.Errorf("world Malloc of 3/4 of the heap after every team block was freed: %w", err)
	}
	return shmem.Free(big)
})

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestTeamMallocErrors(t *testing.T) { each(t, "team-malloc-errors", 1, 2, 3) }

// team-free-debug (under SHMEM_DEBUG): members freeing different team
// blocks all get ErrAsymmetric and nothing is freed; freeing them in the
// same order then works.
var _ = register("team-free-debug", func(pe *shmem.PE) error {
	all, err := pe.World().Split(0, 1, pe.NPEs())
	if err != nil {
		return err
	}
	a, err := shmem.TeamMalloc[int64](all, 8)
	if err != nil {
		return err
	}
	b, err := shmem.TeamMalloc[int64](all, 8)
	if err != nil {
		return err
	}
	first := a
	if all.MyPE() == 0 {
		first = b
	}
	if err := shmem.Free(first); !errors.Is(err, shmem.ErrAsymmetric) {
		return fmt.Errorf("members freeing different team blocks: %v", err)
	}
	if a.Local() == nil || b.Local() == nil {
		return fmt.Errorf("a refused Free freed a block")
	}
	for _, s := range []shmem.Sym[int64]{a, b} {
		if err := shmem.Free(s); err != nil {
			return err
		}
	}
	return all.Destroy()
})

// TestTeamMallocDebug: the team allocation scenarios under SHMEM_DEBUG
// (the world calls' agreement beside the floors), and team-free-debug.
func TestTeamMallocDebug(t *testing.T) {
	debug := []shmem.Option{shmem.WithDebug(true)}
	eachWith(t, "team-malloc", 3, debug, "SHMEM_DEBUG=1")
	eachWith(t, "team-malloc-errors", 3, debug, "SHMEM_DEBUG=1")
	eachWith(t, "team-free-debug", 3, debug, "SHMEM_DEBUG=1")
}
