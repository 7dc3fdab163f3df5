package shmem

import (
	"fmt"
	"slices"
	"sync"

	"github.com/goshmem/goshmem/heap"
)

// Team allocation: symmetric memory over a team's members only.
//
// World blocks (Malloc) come from the bottom of the heap, by the
// allocator every PE runs alike; team blocks (TeamMalloc) from the top,
// downward. A PE's floor is the lowest offset its team blocks reach (the
// heap's end when it has none). Two rules keep the two kinds apart on
// every PE:
//
//   - a world block ends at or below the lowest floor of any PE: the PEs
//     exchange their floors inside the world call (worldLimit), so every
//     PE uses the same limit and gets the same offset, or the same
//     ErrHeapExhausted;
//   - a team block lies in space free of team blocks on every member
//     and at or above every member's world top (the end of its highest
//     world block): the members exchange their floors, world tops and
//     the gaps between their team blocks through the team's scratch
//     words, and every member picks the same place from the same data.
//
// A PE's floor and world top change only inside allocation calls, and a
// PE makes one allocation call at a time (teamHeap.order), so every
// value one PE reads of another inside a call stays put until that
// call's last meeting.

// teamHeap is a PE's state of team allocation.
type teamHeap struct {
	// order is held through every allocation call of the PE (Malloc,
	// Align, Realloc, Free, TeamMalloc, TeamAlign, and Destroy, which
	// frees its team's blocks), so its floor and world top stay put
	// while other PEs read them. It is taken before any team's mutex.
	order sync.Mutex
	// blocks are the live team blocks by offset, guarded by PE.allocMu.
	blocks map[uint64]*block
	// exchanges counts worldLimit's exchanges (guarded by order).
	exchanges uint64
}

// The words a member publishes in its team's scratch area for a team
// allocation (after the descriptor, words 0..descWords-1):
//
//	word  meaning
//	8     world top: the end of this member's highest world block
//	9     floor: the lowest offset of its team blocks (its heap's end if none)
//	10    its heap's end
//	11    g: how many gaps follow (at most allocGapMax)
//	12    the gaps between its team blocks, free on it, highest first:
//	      g pairs of words (start, end), end > start, all in [floor, heap end)
//
// A member with more gaps publishes its highest allocGapMax only: space
// it leaves out is never chosen, which is safe.
const (
	allocTopWord  = 8
	allocGapsWord = 12
	allocWords    = heap.TeamScratchLen / 8
	allocGapMax   = (allocWords - allocGapsWord) / 2
	kindAlloc     = 3
	kindFree      = 4
)

// freeSpan is the half-open byte range [lo, hi).
type freeSpan struct{ lo, hi uint64 }

// floorLocked is this PE's floor. Holding allocMu.
func (pe *PE) floorLocked() uint64 {
	floor := pe.alloc.End()
	for off := range pe.th.blocks {
		floor = min(floor, off)
	}
	return floor
}

// gapsLocked are the free spans between this PE's team blocks, above
// its floor, highest first, at most max of them. Holding allocMu.
func (pe *PE) gapsLocked(max int) []freeSpan {
	offs := make([]uint64, 0, len(pe.th.blocks))
	for off := range pe.th.blocks {
		offs = append(offs, off)
	}
	slices.Sort(offs)
	var gaps []freeSpan
	hi := pe.alloc.End()
	for i := len(offs) - 1; i >= 0 && len(gaps) < max; i-- {
		b := pe.th.blocks[offs[i]]
		if end := b.off + pe.roundBlock(b.size); end < hi {
			gaps = append(gaps, freeSpan{end, hi})
		}
		hi = b.off
	}
	return gaps
}

// roundBlock is the space a block of size bytes takes: whole cache lines
// (the allocator's minimum alignment).
func (pe *PE) roundBlock(size uint64) uint64 {
	line := uint64(pe.cacheLine)
	return (size + line - 1) &^ (line - 1)
}

// worldLimit is the offset world blocks must stay below: the lowest
// floor of every PE. It is also the meeting of every PE that makes it
// safe: a dissemination exchange over the world (the world barrier's
// rounds, syncRound) on the words at heap.FloorMaxOff, where in round r
// each PE stores, tagged with the exchange's number, the largest reserve
// (heap end minus floor) it knows of, into the PE 2^r above it, and waits
// for the one 2^r below it to store into its own. Max is idempotent, so
// after ceil(log2 NPEs) rounds every PE has every PE's reserve, and
// every PE has entered the exchange: its floor stays put (the caller
// holds order) until the call's last meeting. A word is stored again
// only in the next exchange, which its writer enters after that meeting,
// so after its owner read it; exchanges are numbered alike on every PE
// (the world allocation calls that need space), and the tag tells this
// exchange's store from the previous one's.
func (pe *PE) worldLimit() (uint64, error) {
	end := pe.alloc.End()
	size := end - pe.alloc.Base()
	pe.allocMu.Lock()
	v := end - pe.floorLocked()
	pe.allocMu.Unlock()
	pe.th.exchanges++
	tag := (pe.th.exchanges & 0xFFFF) << 48
	const valMask = 1<<48 - 1
	n := pe.npes
	for r := range syncRounds(n) {
		to, from := syncRound(n, pe.rank, r)
		off := heap.FloorMaxOff + uint64(8*r)
		if err := pe.storeWord(to, off, tag|v); err != nil {
			return 0, pe.goneErr(err)
		}
		var got uint64
		what := func() string {
			return fmt.Sprintf("the floor exchange of a world allocation (round %d: PE %d)", r, from)
		}
		if err := pe.awaitFrom(from, off, 8, func() bool {
			got = heap.Load64(pe.mem, off)
			return got&^valMask == tag || pe.finalizing(from)
		}, what); err != nil {
			return 0, err
		}
		if got = heap.Load64(pe.mem, off); got&^valMask != tag {
			return 0, pe.missedErr(from, what())
		}
		if got &= valMask; got > size {
			return 0, fmt.Errorf("shmem: PE %d reports team blocks reaching %d bytes below the end of the %d-byte heap: %w", from, got, size, ErrProtocol)
		}
		v = max(v, got)
	}
	return end - v, nil
}

// TeamMalloc allocates n zeroed elements at the same offset on every
// member of team t (collective over t's members; the other PEs take no
// part). It returns once every member has the block. PE numbers given
// to operations on the object are world numbers, as for every Sym (or
// its context's team's, through Via); a PE outside t is ErrBadPE. Free
// of the object is collective over t, and Destroy of t frees the
// objects still allocated over it. Over the world team it is Malloc.
//
// Every member gets the same result: bad arguments fail alike (n < 0
// ErrInvalid, more than the heap ErrHeapExhausted), members passing
// different arguments all get ErrAsymmetric, and when no space is free
// on every member all get ErrHeapExhausted; after an error nothing is
// allocated and t stays usable. A PE makes one allocation call at a
// time: its allocation calls (world and team) wait for each other.
func TeamMalloc[T Elem](t *Team, n int) (Sym[T], error) {
	return TeamAlign[T](t, 0, n)
}

// TeamAlign is TeamMalloc with the object aligned to align bytes (a
// power of two; 0 means the default, the cache line).
func TeamAlign[T Elem](t *Team, align, n int) (Sym[T], error) {
	if t == nil {
		return Sym[T]{}, fmt.Errorf("shmem: TeamMalloc on a nil team: %w", ErrInvalid)
	}
	pe := t.pe
	if t == pe.world {
		return Align[T](pe, align, n)
	}
	var argErr error
	switch {
	case n < 0 || align < 0 || align&(align-1) != 0:
		argErr = fmt.Errorf("shmem: TeamMalloc of %d elements aligned to %d: %w", n, align, ErrInvalid)
	case uint64(n) > pe.cfg.HeapSize/uint64(sizeOf[T]()):
		argErr = fmt.Errorf("shmem: TeamMalloc of %d %d-byte elements is larger than the %d-byte heap (SHMEM_SYMMETRIC_SIZE): %w",
			n, sizeOf[T](), pe.cfg.HeapSize, ErrHeapExhausted)
	}
	if err := pe.enter(); err != nil {
		return Sym[T]{}, err
	}
	defer pe.leave()
	if err := pe.alive(); err != nil {
		return Sym[T]{}, err
	}
	var bytes uint64
	if argErr == nil {
		bytes = uint64(n * sizeOf[T]())
	}
	b, err := t.alloc([descWords]uint64{0, kindAlloc, uint64(n), uint64(align), uint64(sizeOf[T]()), boolWord(argErr == nil)}, bytes, uint64(align), argErr)
	if err != nil {
		return Sym[T]{}, err
	}
	return Sym[T]{b: b, off: b.off, n: n}, nil
}

func boolWord(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

// alloc is TeamAlign's collective part: one exchange over the team,
// then every member places the block alike, zeroes its copy and meets
// the others. desc[0] is filled in with the team's call number.
func (t *Team) alloc(desc [descWords]uint64, bytes, align uint64, argErr error) (*block, error) {
	pe := t.pe
	pe.th.order.Lock()
	defer pe.th.order.Unlock()
	desc[0] = t.nextSeq()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.destroyed.Load() {
		return nil, fmt.Errorf("shmem: TeamMalloc on a destroyed team (slot %d): %w", t.slot, ErrFinalized)
	}
	sc := heap.ScratchOff(t.slot)
	var mine [allocWords]uint64
	copy(mine[:], desc[:])
	pe.allocMu.Lock()
	mine[allocTopWord] = pe.alloc.Top()
	mine[allocTopWord+1] = pe.floorLocked()
	mine[allocTopWord+2] = pe.alloc.End()
	gaps := pe.gapsLocked(allocGapMax)
	pe.allocMu.Unlock()
	mine[allocTopWord+3] = uint64(len(gaps))
	for i, g := range gaps {
		mine[allocGapsWord+2*i], mine[allocGapsWord+2*i+1] = g.lo, g.hi
	}
	for i, w := range mine {
		heap.Store64(pe.mem, sc+uint64(8*i), w)
	}
	if err := t.syncLocked(); err != nil {
		return nil, err
	}
	var bad error
	var free []freeSpan // free on every member read so far; nil before the first
	for idx, w := range t.members {
		var got [allocWords]uint64
		if err := pe.getWords(w, sc, got[:]); err != nil {
			return nil, err
		}
		if [descWords]uint64(got[:descWords]) != desc {
			bad = fmt.Errorf("shmem: TeamMalloc (call %d on the team): member %d (PE %d) asked for %d %d-byte elements aligned to %d, member %d (PE %d) for %d %d-byte elements aligned to %d: %w",
				desc[0], t.me, pe.rank, int64(desc[2]), desc[4], int64(desc[3]), idx, w, int64(got[2]), got[4], int64(got[3]), ErrAsymmetric)
			break
		}
		spans, err := memberFree(got[:], w)
		if err != nil {
			bad = err
			break
		}
		if free == nil {
			free = spans
		} else {
			free = intersect(free, spans)
		}
	}
	var b *block
	switch {
	case bad != nil:
	case argErr != nil:
		bad = argErr
	case bytes == 0:
		// No memory: a zero-length object has no offset to agree on.
		b = &block{pe: pe, off: heap.HeapBase, align: align, team: t}
	default:
		b, bad = t.place(free, bytes, align)
	}
	// The second meeting: nobody overwrites its scratch while others
	// read it, and nobody uses the block before every member zeroed it.
	if err := t.syncLocked(); err != nil {
		if b != nil && b.size > 0 {
			pe.releaseTeamBlock(b)
		}
		return nil, err
	}
	return b, bad
}

// memberFree checks the words a member published (w is its world PE)
// and returns the space free for a team block on it, in address order.
// The words come from another PE's memory: every bound is checked.
func memberFree(got []uint64, w int) ([]freeSpan, error) {
	top, floor, end, g := got[allocTopWord], got[allocTopWord+1], got[allocTopWord+2], got[allocTopWord+3]
	if top > floor || floor > end || g > allocGapMax {
		return nil, fmt.Errorf("shmem: TeamMalloc: PE %d published world top %d, floor %d, heap end %d and %d gaps: %w", w, top, floor, end, g, ErrProtocol)
	}
	spans := make([]freeSpan, 0, 1+g)
	if top < floor {
		spans = append(spans, freeSpan{top, floor})
	}
	for i := int(g) - 1; i >= 0; i-- { // published highest first
		s := freeSpan{got[allocGapsWord+2*i], got[allocGapsWord+2*i+1]}
		last := floor
		if len(spans) > 0 {
			last = max(last, spans[len(spans)-1].hi)
		}
		if s.lo < last || s.hi <= s.lo || s.hi > end {
			return nil, fmt.Errorf("shmem: TeamMalloc: PE %d published gap %d..%d (floor %d, heap end %d): %w", w, s.lo, s.hi, floor, end, ErrProtocol)
		}
		spans = append(spans, s)
	}
	return spans, nil
}

// intersect is the space in both a and b (each in address order,
// disjoint), in address order.
func intersect(a, b []freeSpan) []freeSpan {
	var out []freeSpan
	for i, j := 0, 0; i < len(a) && j < len(b); {
		lo, hi := max(a[i].lo, b[j].lo), min(a[i].hi, b[j].hi)
		if lo < hi {
			out = append(out, freeSpan{lo, hi})
		}
		if a[i].hi < b[j].hi {
			i++
		} else {
			j++
		}
	}
	if out == nil {
		out = []freeSpan{}
	}
	return out
}

// place puts the block in the highest span of free (free on every
// member) that holds it, at the highest suitably aligned offset there,
// then records and zeroes it on this PE. Every member runs it on the
// same free space, so every member gets the same offset.
func (t *Team) place(free []freeSpan, bytes, align uint64) (*block, error) {
	pe := t.pe
	need := pe.roundBlock(bytes)
	eff := max(align, uint64(pe.cacheLine))
	for i := len(free) - 1; i >= 0; i-- {
		s := free[i]
		if s.hi-s.lo < need {
			continue
		}
		at := (s.hi - need) &^ (eff - 1)
		if at < s.lo {
			continue
		}
		b := &block{pe: pe, off: at, size: bytes, align: align, team: t}
		b.member = make([]bool, pe.npes)
		for _, w := range t.members {
			b.member[w] = true
		}
		pe.allocMu.Lock()
		if pe.th.blocks == nil {
			pe.th.blocks = make(map[uint64]*block)
		}
		pe.th.blocks[at] = b
		pe.allocMu.Unlock()
		clear(pe.mem[at : at+bytes])
		return b, nil
	}
	var total, largest uint64
	for _, s := range free {
		total += s.hi - s.lo
		largest = max(largest, s.hi-s.lo)
	}
	return nil, fmt.Errorf("shmem: TeamMalloc of %d bytes (align %d) over a %d-PE team: %d bytes are free for team blocks on every member, the largest span %d bytes (SHMEM_SYMMETRIC_SIZE is %d bytes): %w",
		bytes, eff, len(t.members), total, largest, pe.cfg.HeapSize, ErrHeapExhausted)
}

// releaseTeamBlock forgets a team block on this PE: its handles become
// invalid and its space free. Holding order.
func (pe *PE) releaseTeamBlock(b *block) {
	b.freed.Store(true)
	pe.dropLocks(b.off, b.size)
	if b.size == 0 {
		return
	}
	pe.allocMu.Lock()
	if pe.th.blocks[b.off] == b {
		delete(pe.th.blocks, b.off)
	}
	pe.allocMu.Unlock()
}

// teamFree is Free of a team block: this PE's outstanding operations
// complete, every member of the block's team meets (and, under
// SHMEM_DEBUG, checks that all free the same block), then each forgets
// the block.
func (pe *PE) teamFree(b *block) error {
	t := b.team
	pe.th.order.Lock()
	defer pe.th.order.Unlock()
	if err := pe.alive(); err != nil {
		return err
	}
	if err := pe.flushAll(); err != nil {
		return err
	}
	if pe.cfg.Debug {
		desc := [descWords]uint64{t.nextSeq(), kindFree, b.off, b.size, 0, 1}
		if _, err := t.exchange(desc); err != nil {
			return err
		}
	} else if err := t.sync(); err != nil {
		return err
	}
	if b.freed.Load() {
		return fmt.Errorf("shmem: object at offset %d was already freed: %w", b.off, ErrOutOfBounds)
	}
	pe.releaseTeamBlock(b)
	return nil
}

// releaseTeamBlocks frees the blocks still allocated over t on this PE
// (Destroy, after the members met). Holding order.
func (pe *PE) releaseTeamBlocks(t *Team) {
	pe.allocMu.Lock()
	var bs []*block
	for _, b := range pe.th.blocks {
		if b.team == t {
			bs = append(bs, b)
		}
	}
	pe.allocMu.Unlock()
	for _, b := range bs {
		pe.releaseTeamBlock(b)
	}
}

// teamBytes is the bytes of this PE's live team blocks. Holding allocMu.
func (pe *PE) teamBytesLocked() uint64 {
	var n uint64
	for _, b := range pe.th.blocks {
		n += pe.roundBlock(b.size)
	}
	return n
}
