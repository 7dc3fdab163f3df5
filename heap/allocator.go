// Deterministic allocator for the byte range of a PE's symmetric heap.
//
// Every PE runs the same allocator over the same range with the same
// sequence of calls, so every PE gets the same offsets: that is what makes
// an allocation "symmetric". Nothing here may depend on anything but the
// call sequence (no map iteration order, no time, no randomness).
//
// Policy: best fit over an address-ordered, fully coalesced free list. A
// request goes into the free span that leaves the fewest bytes over (span
// length minus rounded request); ties go to the lowest address. Inside the
// chosen span the block starts at the lowest suitably aligned address, and
// any alignment padding in front of it stays on the free list.

package heap

import (
	"fmt"
	"slices"
	"sort"

	"github.com/goshmem/goshmem/internal/errs"
)

// span is the half-open byte range [start, end).
type span struct{ start, end uint64 }

// Allocator manages the byte range [base, base+size) of a PE's symmetric heap.
// It is deterministic: the same sequence of calls gives the same offsets on every PE.
// It is NOT safe for concurrent use (the caller holds a lock).
//
// Invariants (checked by the tests after every operation):
//   - base, end, and every block and free-span boundary are multiples of minAlign;
//   - free is sorted by address; its spans are non-empty, lie in [base, end),
//     and never touch each other (a span's end is strictly below the next
//     span's start), i.e. free space is always fully coalesced;
//   - live blocks and free spans do not overlap, and together they cover
//     [base, end) exactly;
//   - used is the sum of live block sizes, freeBytes the sum of free span
//     lengths, and used+freeBytes == end-base.
type Allocator struct {
	base, end uint64            // managed range [base, end)
	minAlign  uint64            // power of two >= 8
	free      []span            // free spans, address order, coalesced
	live      map[uint64]uint64 // start offset -> size of every allocated block
	used      uint64            // bytes in live blocks
	freeBytes uint64            // bytes in free spans
}

// NewAllocator returns an allocator for [base, base+size). minAlign must be
// a power of two >= 8; base is rounded up and base+size rounded down to a
// multiple of minAlign. A range too small to hold one aligned unit gives an
// empty allocator on which every Alloc fails with errs.HeapExhausted.
func NewAllocator(base, size, minAlign uint64) (*Allocator, error) {
	if minAlign < 8 || !isPow2(minAlign) {
		return nil, fmt.Errorf("heap: minimum alignment %d is not a power of two >= 8: %w", minAlign, errs.Invalid)
	}
	end := base + size
	if end < base {
		return nil, fmt.Errorf("heap: range of %d bytes at base %#x wraps past 2^64: %w", size, base, errs.Invalid)
	}
	hi := end &^ (minAlign - 1)
	lo, ok := alignUp(base, minAlign)
	if !ok || lo > hi {
		lo = hi // empty heap
	}
	a := &Allocator{
		base:     lo,
		end:      hi,
		minAlign: minAlign,
		live:     make(map[uint64]uint64),
	}
	if hi > lo {
		a.free = []span{{lo, hi}}
		a.freeBytes = hi - lo
	}
	return a, nil
}

// Size returns the number of managed bytes (after rounding in NewAllocator).
func (a *Allocator) Size() uint64 { return a.end - a.base }

// Base returns the first managed offset (after rounding in NewAllocator).
func (a *Allocator) Base() uint64 { return a.base }

// End returns the offset just past the managed range (after rounding in
// NewAllocator).
func (a *Allocator) End() uint64 { return a.end }

// Top returns the offset just past the highest live block (Base when
// none is live): every block lies in [Base, Top).
func (a *Allocator) Top() uint64 {
	if len(a.free) == 0 {
		return a.end
	}
	if last := a.free[len(a.free)-1]; last.end == a.end {
		return last.start
	}
	return a.end
}

// Alloc reserves size bytes aligned to max(align, minAlign) and returns the
// block's start offset. align 0 means minAlign; otherwise align must be a
// power of two. size must be > 0 and is rounded up to a multiple of minAlign.
// When no free span can hold the block the error wraps errs.HeapExhausted
// and the allocator is unchanged.
func (a *Allocator) Alloc(size, align uint64) (uint64, error) {
	return a.AllocBelow(size, align, a.end)
}

// AllocBelow is Alloc with the block kept below limit: it only uses
// free space under limit (the block ends at or below it), and fails
// with errs.HeapExhausted, changing nothing, when none of that fits.
// Span choice is as in Alloc, among the spans where the block fits
// below limit, so the same calls with the same limits give the same
// offsets on every PE.
func (a *Allocator) AllocBelow(size, align, limit uint64) (uint64, error) {
	if size == 0 {
		return 0, fmt.Errorf("heap: alloc of 0 bytes: %w", errs.Invalid)
	}
	if align == 0 {
		align = a.minAlign
	}
	if !isPow2(align) {
		return 0, fmt.Errorf("heap: alloc of %d bytes: alignment %d is not a power of two: %w", size, align, errs.Invalid)
	}
	eff := max(align, a.minAlign)
	if size > a.Size() {
		return 0, a.exhausted(size, eff)
	}
	// No overflow: size <= Size(), which is a multiple of minAlign below 2^64.
	need := roundUp(size, a.minAlign)

	// Best fit: the span with the fewest bytes left over, lowest address
	// on ties (the scan is in address order and only a strictly smaller
	// leftover replaces the current choice).
	best := -1
	var bestAt, bestLeft uint64
	for i, s := range a.free {
		at, ok := alignUp(s.start, eff)
		end := min(s.end, limit)
		if !ok || at > end || end-at < need {
			continue
		}
		left := (s.end - s.start) - need
		if best < 0 || left < bestLeft {
			best, bestAt, bestLeft = i, at, left
			if left == 0 {
				break // exact fit; nothing can beat it
			}
		}
	}
	if best < 0 {
		return 0, a.exhaustedBelow(size, eff, limit)
	}

	// Carve [bestAt, bestAt+need) out of the span; the padding in front
	// and the tail behind stay free (each is a multiple of minAlign, and
	// they cannot touch other free spans because the old span did not).
	s := a.free[best]
	pieces := make([]span, 0, 2)
	if bestAt > s.start {
		pieces = append(pieces, span{s.start, bestAt})
	}
	if bestAt+need < s.end {
		pieces = append(pieces, span{bestAt + need, s.end})
	}
	a.free = slices.Replace(a.free, best, best+1, pieces...)
	a.live[bestAt] = need
	a.used += need
	a.freeBytes -= need
	return bestAt, nil
}

// exhaustedBelow is exhausted for a request that had to stay below
// limit.
func (a *Allocator) exhaustedBelow(size, align, limit uint64) error {
	if limit >= a.end {
		return a.exhausted(size, align)
	}
	_, free, largest := a.Stats()
	return fmt.Errorf("heap: cannot allocate %d bytes (align %d) below offset %d: %d bytes free, largest free block %d bytes, heap size %d bytes: %w",
		size, align, limit, free, largest, a.Size(), errs.HeapExhausted)
}

// exhausted builds the HeapExhausted error for a request of size bytes at
// alignment align, with the numbers needed to see why it failed.
func (a *Allocator) exhausted(size, align uint64) error {
	_, free, largest := a.Stats()
	return fmt.Errorf("heap: cannot allocate %d bytes (align %d): %d bytes free, largest free block %d bytes, heap size %d bytes: %w",
		size, align, free, largest, a.Size(), errs.HeapExhausted)
}

// Free releases the live block that starts at off and merges it with any
// free neighbours. An off that is not the start of a live block (never
// allocated, already freed, inside a block, out of range) gives an error
// wrapping errs.OutOfBounds and changes nothing.
func (a *Allocator) Free(off uint64) error {
	size, ok := a.live[off]
	if !ok {
		return a.noBlock("free", off)
	}
	delete(a.live, off)
	a.used -= size
	a.release(off, off+size)
	return nil
}

// Grow resizes the live block at off to newSize bytes (rounded up to
// minAlign) without moving it. Shrinking always succeeds and returns the
// tail to the free list. Growing succeeds only when the free space right
// after the block is large enough; otherwise Grow returns false, nil and
// changes nothing. newSize 0 is an errs.Invalid error; an off that is not
// the start of a live block is an errs.OutOfBounds error.
func (a *Allocator) Grow(off, newSize uint64) (bool, error) {
	return a.GrowBelow(off, newSize, a.end)
}

// GrowBelow is Grow with the grown block kept below limit: growing
// past limit returns false, nil and changes nothing (shrinking always
// succeeds).
func (a *Allocator) GrowBelow(off, newSize, limit uint64) (bool, error) {
	cur, ok := a.live[off]
	if !ok {
		return false, a.noBlock("grow", off)
	}
	if newSize == 0 {
		return false, fmt.Errorf("heap: grow of block at offset %d to 0 bytes: %w", off, errs.Invalid)
	}
	if newSize > a.end-off {
		return false, nil // would run past the end of the heap
	}
	if want := roundUp(newSize, a.minAlign); want > cur && (limit < off || want > limit-off) {
		return false, nil // would grow past limit
	}
	// No overflow: newSize <= end-off, a multiple of minAlign, so the
	// rounded size also stays <= end-off.
	want := roundUp(newSize, a.minAlign)
	switch {
	case want == cur:
		return true, nil
	case want < cur:
		a.live[off] = want
		a.used -= cur - want
		a.release(off+want, off+cur)
		return true, nil
	}
	// Growing: the free span must start right at the block's end.
	extra := want - cur
	next := off + cur
	i := a.firstFreeAtOrAfter(next)
	if i == len(a.free) || a.free[i].start != next || a.free[i].end-next < extra {
		return false, nil
	}
	a.free[i].start += extra
	if a.free[i].start == a.free[i].end {
		a.free = slices.Delete(a.free, i, i+1)
	}
	a.live[off] = want
	a.used += extra
	a.freeBytes -= extra
	return true, nil
}

// BlockSize returns the size of the live block starting at off (after
// rounding to minAlign), and whether there is one.
func (a *Allocator) BlockSize(off uint64) (uint64, bool) {
	size, ok := a.live[off]
	return size, ok
}

// Stats returns the bytes in live blocks, the bytes free, and the length of
// the largest free span. used+free == Size() always.
func (a *Allocator) Stats() (used, free, largestFree uint64) {
	for _, s := range a.free {
		largestFree = max(largestFree, s.end-s.start)
	}
	return a.used, a.freeBytes, largestFree
}

// release puts [start, end) back on the free list, merging it with a free
// span that ends at start and/or one that begins at end so the list stays
// coalesced. The range must not overlap any free span.
func (a *Allocator) release(start, end uint64) {
	a.freeBytes += end - start
	i := a.firstFreeAtOrAfter(start)
	mergePrev := i > 0 && a.free[i-1].end == start
	mergeNext := i < len(a.free) && a.free[i].start == end
	switch {
	case mergePrev && mergeNext:
		a.free[i-1].end = a.free[i].end
		a.free = slices.Delete(a.free, i, i+1)
	case mergePrev:
		a.free[i-1].end = end
	case mergeNext:
		a.free[i].start = start
	default:
		a.free = slices.Insert(a.free, i, span{start, end})
	}
}

// firstFreeAtOrAfter returns the index of the first free span whose start
// is >= off (len(a.free) if none), by binary search.
func (a *Allocator) firstFreeAtOrAfter(off uint64) int {
	return sort.Search(len(a.free), func(i int) bool { return a.free[i].start >= off })
}

// noBlock is the error for an offset that is not the start of a live block.
func (a *Allocator) noBlock(op string, off uint64) error {
	return fmt.Errorf("heap: %s: no block allocated at offset %d (heap is [%d, %d)): %w",
		op, off, a.base, a.end, errs.OutOfBounds)
}

// isPow2 reports whether x is a power of two (0 is not).
func isPow2(x uint64) bool { return x != 0 && x&(x-1) == 0 }

// alignUp rounds x up to a multiple of the power of two align; ok is false
// if the result would not fit in a uint64.
func alignUp(x, align uint64) (uint64, bool) {
	r := (x + align - 1) &^ (align - 1)
	return r, r >= x
}

// roundUp rounds x up to a multiple of the power of two align; the caller
// guarantees it does not overflow.
func roundUp(x, align uint64) uint64 { return (x + align - 1) &^ (align - 1) }
