// Tests for the symmetric-heap allocator: hand-checked sequences, error
// cases, a seeded randomized run against a byte-owner reference model, a
// fuzz target over the same model, and a benchmark.

package heap

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/errs"
)

// ---------------------------------------------------------------------------
// Helpers

func newAlloc(t testing.TB, base, size, minAlign uint64) *Allocator {
	t.Helper()
	a, err := NewAllocator(base, size, minAlign)
	if err != nil {
		t.Fatalf("NewAllocator(%d, %d, %d): %v", base, size, minAlign, err)
	}
	return a
}

func mustAlloc(t testing.TB, a *Allocator, size, align, want uint64) {
	t.Helper()
	off, err := a.Alloc(size, align)
	if err != nil {
		t.Fatalf("Alloc(%d, %d): %v", size, align, err)
	}
	if off != want {
		t.Fatalf("Alloc(%d, %d) = %d, want %d", size, align, off, want)
	}
}

func mustFree(t testing.TB, a *Allocator, off uint64) {
	t.Helper()
	if err := a.Free(off); err != nil {
		t.Fatalf("Free(%d): %v", off, err)
	}
}

func wantFree(t testing.TB, a *Allocator, want ...span) {
	t.Helper()
	if !slices.Equal(a.free, want) {
		t.Fatalf("free list = %v, want %v", a.free, want)
	}
}

// snapshot is a deep copy of an allocator's state, to show a failed call
// changed nothing.
type snapshot struct {
	free            []span
	live            map[uint64]uint64
	used, freeBytes uint64
}

func snap(a *Allocator) snapshot {
	return snapshot{slices.Clone(a.free), maps.Clone(a.live), a.used, a.freeBytes}
}

func (s snapshot) equal(o snapshot) bool {
	return slices.Equal(s.free, o.free) && maps.Equal(s.live, o.live) &&
		s.used == o.used && s.freeBytes == o.freeBytes
}

// sameState reports whether two allocators are in identical states.
func sameState(a, b *Allocator) bool {
	return a.base == b.base && a.end == b.end && a.minAlign == b.minAlign &&
		slices.Equal(a.free, b.free) && maps.Equal(a.live, b.live) &&
		a.used == b.used && a.freeBytes == b.freeBytes
}

// checkStructure verifies the Allocator invariants that need no model: free
// list sorted, non-empty, in range, aligned, coalesced, disjoint from live
// blocks, and the byte counters consistent.
func checkStructure(t testing.TB, a *Allocator) {
	t.Helper()
	checkFreeList(t, a)
	var usedSum uint64
	for off, size := range a.live {
		if size == 0 || off < a.base || size > a.end-off || off%a.minAlign != 0 || size%a.minAlign != 0 {
			t.Fatalf("live block [%d, +%d) bad for heap [%d, %d) minAlign %d", off, size, a.base, a.end, a.minAlign)
		}
		i := a.firstFreeAtOrAfter(off)
		if i > 0 && a.free[i-1].end > off || i < len(a.free) && a.free[i].start < off+size {
			t.Fatalf("live block [%d, +%d) overlaps a free span", off, size)
		}
		usedSum += size
	}
	if used, _, _ := a.Stats(); used != usedSum {
		t.Fatalf("Stats used=%d, live blocks sum to %d", used, usedSum)
	}
}

// checkFreeList verifies the free list alone: sorted, non-empty spans, in
// range, aligned, coalesced (no two spans touch), its length sum equal to
// the free counter, and used+free == Size.
func checkFreeList(t testing.TB, a *Allocator) {
	var freeSum uint64
	for i, s := range a.free {
		if s.start >= s.end || s.start < a.base || s.end > a.end {
			t.Fatalf("free span %d %v empty or outside [%d, %d)", i, s, a.base, a.end)
		}
		if s.start%a.minAlign != 0 || s.end%a.minAlign != 0 {
			t.Fatalf("free span %d %v not aligned to %d", i, s, a.minAlign)
		}
		if i > 0 && a.free[i-1].end >= s.start {
			t.Fatalf("free spans %v and %v overlap or touch (not coalesced)", a.free[i-1], s)
		}
		freeSum += s.end - s.start
	}
	used, free, _ := a.Stats()
	if free != freeSum || used+free != a.Size() {
		t.Fatalf("Stats used=%d free=%d, free spans sum to %d, Size=%d", used, free, freeSum, a.Size())
	}
}

// ---------------------------------------------------------------------------
// Hand-checked behaviour

func TestNewAllocator(t *testing.T) {
	for _, c := range []struct {
		base, size, minAlign uint64
		wantBase, wantSize   uint64
	}{
		{0, 4096, 8, 0, 4096},
		{5, 100, 8, 8, 96},          // base up to 8, end 105 down to 104
		{4096, 1000, 64, 4096, 960}, // end 5096 down to 5056
		{1, 6, 8, 0, 0},             // no aligned unit: empty heap at the rounded-down end
		{^uint64(0) - 3, 3, 8, ^uint64(0) &^ 7, 0},
	} {
		a := newAlloc(t, c.base, c.size, c.minAlign)
		if a.Base() != c.wantBase || a.Size() != c.wantSize {
			t.Errorf("NewAllocator(%d, %d, %d): base %d size %d, want %d %d",
				c.base, c.size, c.minAlign, a.Base(), a.Size(), c.wantBase, c.wantSize)
		}
		checkStructure(t, a)
	}
	for _, c := range []struct{ base, size, minAlign uint64 }{
		{0, 4096, 0}, {0, 4096, 4}, {0, 4096, 12}, {0, 4096, 24}, {0, 4096, 1},
		{^uint64(0) - 10, 100, 8}, // wraps
	} {
		if _, err := NewAllocator(c.base, c.size, c.minAlign); !errors.Is(err, errs.Invalid) {
			t.Errorf("NewAllocator(%d, %d, %d) err = %v, want errs.Invalid", c.base, c.size, c.minAlign, err)
		}
	}
	// An empty heap allocates nothing.
	a := newAlloc(t, 1, 6, 8)
	if _, err := a.Alloc(1, 0); !errors.Is(err, errs.HeapExhausted) {
		t.Errorf("Alloc on empty heap: err = %v, want HeapExhausted", err)
	}
}

// TestKnownOffsets walks a short sequence whose offsets were worked out by
// hand from the policy (best fit, lowest address on ties, lowest aligned
// start within the span, padding stays free).
func TestKnownOffsets(t *testing.T) {
	a := newAlloc(t, 1024, 1024, 16) // [1024, 2048)
	mustAlloc(t, a, 10, 0, 1024)     // rounded to 16
	mustAlloc(t, a, 100, 0, 1040)    // rounded to 112 -> [1040, 1152)
	mustAlloc(t, a, 16, 64, 1152)    // 1152 is 64-aligned
	mustAlloc(t, a, 1, 128, 1280)    // first 128-aligned start >= 1168
	wantFree(t, a, span{1168, 1280}, span{1296, 2048})
	checkStructure(t, a)

	mustFree(t, a, 1040) // neighbours 1024 and 1152 are live: no merge
	wantFree(t, a, span{1040, 1152}, span{1168, 1280}, span{1296, 2048})

	// [1040,1152) and [1168,1280) both leave 16 over: the lower one wins.
	mustAlloc(t, a, 96, 0, 1040)
	// [1168,1280) is an exact fit for 112: best fit takes it over the big tail.
	mustAlloc(t, a, 112, 0, 1168)
	// The 16-byte hole left at 1136 is an exact fit.
	mustAlloc(t, a, 16, 0, 1136)
	wantFree(t, a, span{1296, 2048})
	checkStructure(t, a)

	used, free, largest := a.Stats()
	if used != 272 || free != 752 || largest != 752 {
		t.Fatalf("Stats = %d, %d, %d, want 272, 752, 752", used, free, largest)
	}
	for off, want := range map[uint64]uint64{1024: 16, 1040: 96, 1136: 16, 1152: 16, 1168: 112, 1280: 16} {
		if got, ok := a.BlockSize(off); !ok || got != want {
			t.Errorf("BlockSize(%d) = %d, %v, want %d, true", off, got, ok, want)
		}
	}
	if _, ok := a.BlockSize(1032); ok {
		t.Errorf("BlockSize(1032) inside a block reported a block")
	}
}

// TestBestFit checks that the smallest hole that fits wins over a lower one.
func TestBestFit(t *testing.T) {
	a := newAlloc(t, 0, 1024, 8)
	mustAlloc(t, a, 64, 0, 0)
	mustAlloc(t, a, 32, 0, 64)
	mustAlloc(t, a, 32, 0, 96)
	mustAlloc(t, a, 32, 0, 128)
	mustFree(t, a, 0)
	mustFree(t, a, 96)
	wantFree(t, a, span{0, 64}, span{96, 128}, span{160, 1024})
	mustAlloc(t, a, 32, 0, 96) // exact fit, though [0, 64) is lower
	mustAlloc(t, a, 40, 0, 0)  // [0, 64) leaves less over than the tail
	mustAlloc(t, a, 24, 0, 40) // exact fit of what is left
	wantFree(t, a, span{160, 1024})
	checkStructure(t, a)
}

// TestAlignmentPadding checks that align > minAlign is honoured and that the
// gap in front of an aligned block stays free and is reused later.
func TestAlignmentPadding(t *testing.T) {
	a := newAlloc(t, 0, 4096, 8)
	mustAlloc(t, a, 8, 0, 0)
	mustAlloc(t, a, 64, 256, 256) // padding [8, 256) stays free
	wantFree(t, a, span{8, 256}, span{320, 4096})
	mustAlloc(t, a, 200, 0, 8) // the padding gap is the best fit
	wantFree(t, a, span{208, 256}, span{320, 4096})
	mustAlloc(t, a, 1, 1024, 1024)
	mustAlloc(t, a, 48, 16, 208) // 208 is 16-aligned; exact fit of the rest of the gap
	wantFree(t, a, span{320, 1024}, span{1032, 4096})
	checkStructure(t, a)

	// A base that is only 8-aligned: a 4096-aligned block must still land on
	// an absolute multiple of 4096.
	b := newAlloc(t, 8, 3*4096, 8) // [8, 12296)
	mustAlloc(t, b, 1, 4096, 4096)
	mustAlloc(t, b, 1, 4096, 8192)
	wantFree(t, b, span{8, 4096}, span{4104, 8192}, span{8200, 12296})
	// Nothing 16384-aligned lies in range.
	if _, err := b.Alloc(8, 16384); !errors.Is(err, errs.HeapExhausted) {
		t.Fatalf("Alloc(8, 16384) err = %v, want HeapExhausted", err)
	}
	// Huge alignments must not overflow.
	c := newAlloc(t, 1<<63, 1<<20, 8)
	mustAlloc(t, c, 8, 8, 1<<63)
	if _, err := c.Alloc(8, 1<<63); !errors.Is(err, errs.HeapExhausted) {
		t.Fatalf("Alloc(8, 1<<63) err = %v, want HeapExhausted", err)
	}
}

func TestAllocInvalid(t *testing.T) {
	a := newAlloc(t, 0, 4096, 8)
	mustAlloc(t, a, 8, 0, 0)
	before := snap(a)
	for _, c := range []struct{ size, align uint64 }{{0, 0}, {0, 8}, {8, 3}, {8, 24}, {8, 1<<63 + 1}} {
		if _, err := a.Alloc(c.size, c.align); !errors.Is(err, errs.Invalid) {
			t.Errorf("Alloc(%d, %d) err = %v, want errs.Invalid", c.size, c.align, err)
		}
	}
	// Alignments below minAlign are fine (effective alignment is minAlign).
	mustAlloc(t, a, 3, 1, 8)
	mustAlloc(t, a, 3, 2, 16)
	mustFree(t, a, 8)
	mustFree(t, a, 16)
	if !before.equal(snap(a)) {
		t.Fatalf("state changed: %+v -> %+v", before, snap(a))
	}
}

func TestExhaustion(t *testing.T) {
	a := newAlloc(t, 0, 1024, 8)
	for i := range uint64(4) {
		mustAlloc(t, a, 256, 0, i*256)
	}
	mustFree(t, a, 256)
	mustFree(t, a, 768)
	before := snap(a)

	// 512 bytes free but no 300-byte hole.
	_, err := a.Alloc(300, 0)
	if !errors.Is(err, errs.HeapExhausted) {
		t.Fatalf("Alloc(300) err = %v, want HeapExhausted", err)
	}
	msg := err.Error()
	for _, want := range []string{"300 bytes", "align 8", "512 bytes free", "largest free block 256", "heap size 1024"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	// Larger than the whole heap, and an alignment no free span satisfies
	// (the holes [256, 512) and [768, 1024) hold no 512-aligned 256 bytes).
	for _, c := range []struct{ size, align uint64 }{{1 << 40, 0}, {^uint64(0), 0}, {256, 512}} {
		_, err := a.Alloc(c.size, c.align)
		if !errors.Is(err, errs.HeapExhausted) {
			t.Fatalf("Alloc(%d, %d) err = %v, want HeapExhausted", c.size, c.align, err)
		}
		if !strings.Contains(err.Error(), fmt.Sprint(c.size)) {
			t.Errorf("error %q does not name size %d", err, c.size)
		}
	}
	if !before.equal(snap(a)) {
		t.Fatalf("failed Alloc changed state: %+v -> %+v", before, snap(a))
	}
	checkStructure(t, a)
	// The holes are still usable.
	mustAlloc(t, a, 256, 0, 256)
	mustAlloc(t, a, 256, 0, 768)
}

func TestFreeErrors(t *testing.T) {
	a := newAlloc(t, 4096, 4096, 8)
	mustAlloc(t, a, 64, 0, 4096)
	mustAlloc(t, a, 64, 0, 4160)
	mustFree(t, a, 4160)
	before := snap(a)
	for _, off := range []uint64{
		4160,          // double free
		4104,          // inside the live block at 4096
		4097,          // misaligned, inside a block
		4224,          // in a free span
		0,             // below base
		8192,          // at end
		1 << 62,       // far out of range
		^uint64(0),    // max
		4096 + 4096*2, // past end
	} {
		err := a.Free(off)
		if !errors.Is(err, errs.OutOfBounds) {
			t.Errorf("Free(%d) err = %v, want OutOfBounds", off, err)
			continue
		}
		if want := fmt.Sprintf("no block allocated at offset %d", off); !strings.Contains(err.Error(), want) {
			t.Errorf("Free(%d) error %q does not contain %q", off, err, want)
		}
	}
	if !before.equal(snap(a)) {
		t.Fatalf("failed Free changed state: %+v -> %+v", before, snap(a))
	}
	mustFree(t, a, 4096)
	if err := a.Free(4096); !errors.Is(err, errs.OutOfBounds) {
		t.Fatalf("double Free(4096) err = %v, want OutOfBounds", err)
	}
}

func TestCoalescing(t *testing.T) {
	a := newAlloc(t, 0, 3*128, 8)
	mustAlloc(t, a, 128, 0, 0)   // A
	mustAlloc(t, a, 128, 0, 128) // B
	mustAlloc(t, a, 128, 0, 256) // C
	wantFree(t, a)
	mustFree(t, a, 0)
	mustFree(t, a, 256)
	wantFree(t, a, span{0, 128}, span{256, 384})
	mustFree(t, a, 128) // merges with both neighbours
	wantFree(t, a, span{0, 384})
	used, free, largest := a.Stats()
	if used != 0 || free != a.Size() || largest != a.Size() {
		t.Fatalf("Stats = %d, %d, %d, want 0, %d, %d", used, free, largest, a.Size(), a.Size())
	}

	// Merge with only the previous, then only the next neighbour.
	mustAlloc(t, a, 128, 0, 0)
	mustAlloc(t, a, 128, 0, 128)
	mustAlloc(t, a, 128, 0, 256)
	mustFree(t, a, 0)
	mustFree(t, a, 128) // prev only
	wantFree(t, a, span{0, 256})
	mustAlloc(t, a, 256, 0, 0)
	mustFree(t, a, 256)
	mustFree(t, a, 0) // next only
	wantFree(t, a, span{0, 384})
	checkStructure(t, a)
}

func TestGrow(t *testing.T) {
	a := newAlloc(t, 0, 256, 8)
	mustAlloc(t, a, 64, 0, 0)   // A
	mustAlloc(t, a, 64, 0, 64)  // B
	mustAlloc(t, a, 64, 0, 128) // C, free [192, 256)
	before := snap(a)

	// A cannot grow: B is live right behind it.
	if ok, err := a.Grow(0, 72); ok || err != nil {
		t.Fatalf("Grow(A, 72) = %v, %v, want false, nil", ok, err)
	}
	// Past the end of the heap.
	if ok, err := a.Grow(128, 1<<40); ok || err != nil {
		t.Fatalf("Grow(C, 1<<40) = %v, %v, want false, nil", ok, err)
	}
	if ok, err := a.Grow(128, ^uint64(0)); ok || err != nil {
		t.Fatalf("Grow(C, max) = %v, %v, want false, nil", ok, err)
	}
	// Same size after rounding: success, no change.
	if ok, err := a.Grow(0, 57); !ok || err != nil {
		t.Fatalf("Grow(A, 57) = %v, %v, want true, nil", ok, err)
	}
	if !before.equal(snap(a)) {
		t.Fatalf("refused Grow changed state: %+v -> %+v", before, snap(a))
	}

	// Shrink B: its tail becomes free.
	if ok, err := a.Grow(64, 16); !ok || err != nil {
		t.Fatalf("Grow(B, 16) = %v, %v", ok, err)
	}
	wantFree(t, a, span{80, 128}, span{192, 256})
	// Grow B back into its old tail, but not beyond (C is live).
	if ok, err := a.Grow(64, 72); ok || err != nil {
		t.Fatalf("Grow(B, 72) = %v, %v, want false, nil", ok, err)
	}
	if ok, err := a.Grow(64, 60); !ok || err != nil {
		t.Fatalf("Grow(B, 60) = %v, %v", ok, err)
	}
	if n, _ := a.BlockSize(64); n != 64 {
		t.Fatalf("BlockSize(B) = %d, want 64", n)
	}
	wantFree(t, a, span{192, 256})

	// Grow C into the following free span: partly, then all of it.
	if ok, err := a.Grow(128, 100); !ok || err != nil {
		t.Fatalf("Grow(C, 100) = %v, %v", ok, err)
	}
	wantFree(t, a, span{232, 256})
	if ok, err := a.Grow(128, 128); !ok || err != nil {
		t.Fatalf("Grow(C, 128) = %v, %v", ok, err)
	}
	wantFree(t, a)
	if ok, err := a.Grow(128, 136); ok || err != nil {
		t.Fatalf("Grow(C, 136) = %v, %v, want false, nil", ok, err)
	}
	// Shrinking C coalesces its tail with free space behind it.
	mustFree(t, a, 64)
	if ok, err := a.Grow(128, 8); !ok || err != nil {
		t.Fatalf("Grow(C, 8) = %v, %v", ok, err)
	}
	wantFree(t, a, span{64, 128}, span{136, 256})
	// Shrink with free space on the tail side merges into one span.
	if ok, err := a.Grow(0, 8); !ok || err != nil {
		t.Fatalf("Grow(A, 8) = %v, %v", ok, err)
	}
	wantFree(t, a, span{8, 128}, span{136, 256})
	// Grow A into the whole span behind it.
	if ok, err := a.Grow(0, 128); !ok || err != nil {
		t.Fatalf("Grow(A, 128) = %v, %v", ok, err)
	}
	wantFree(t, a, span{136, 256})
	checkStructure(t, a)

	// Errors.
	before = snap(a)
	if _, err := a.Grow(64, 8); !errors.Is(err, errs.OutOfBounds) {
		t.Errorf("Grow(freed) err = %v, want OutOfBounds", err)
	}
	if _, err := a.Grow(8, 8); !errors.Is(err, errs.OutOfBounds) {
		t.Errorf("Grow(inside) err = %v, want OutOfBounds", err)
	}
	if _, err := a.Grow(0, 0); !errors.Is(err, errs.Invalid) {
		t.Errorf("Grow(A, 0) err = %v, want Invalid", err)
	}
	if !before.equal(snap(a)) {
		t.Fatalf("failed Grow changed state: %+v -> %+v", before, snap(a))
	}
}

// ---------------------------------------------------------------------------
// Reference model: randomized and fuzz tests

// model tracks ownership of every minAlign-sized unit of the heap and
// predicts every result of the allocator under test, including the exact
// offset (best fit over maximal free runs, lowest address on ties). A twin
// allocator receives the same calls and must give identical results.
type model struct {
	tb       testing.TB
	a, twin  *Allocator
	base     uint64
	minAlign uint64
	owner    []uint64          // per unit: 0 free, else start offset+1 of the owning block
	blocks   map[uint64]uint64 // start -> size of every live block
	starts   []uint64          // live block starts, in a deterministic order for picking
	runs     []span            // scratch: maximal free runs of owner
	ops      int
	// Outcome counts, logged so a run shows it exercised every path.
	nAlloc, nExhausted, nInvalid, nFree, nBadFree, nGrew, nRefused int
}

func (m *model) String() string {
	return fmt.Sprintf("%d ops: %d allocs, %d exhausted, %d invalid, %d frees, %d bad frees, %d resized, %d grows refused",
		m.ops, m.nAlloc, m.nExhausted, m.nInvalid, m.nFree, m.nBadFree, m.nGrew, m.nRefused)
}

func newModel(tb testing.TB, base, size, minAlign uint64) *model {
	tb.Helper()
	a := newAlloc(tb, base, size, minAlign)
	twin := newAlloc(tb, base, size, minAlign)
	return &model{
		tb: tb, a: a, twin: twin,
		base: a.Base(), minAlign: minAlign,
		owner:  make([]uint64, a.Size()/minAlign),
		blocks: make(map[uint64]uint64),
	}
}

func (m *model) unit(off uint64) int { return int((off - m.base) / m.minAlign) }

func (m *model) fail(format string, args ...any) {
	m.tb.Helper()
	m.tb.Fatalf("op %d: %s", m.ops, fmt.Sprintf(format, args...))
}

// same compares the main and twin results of one call (op names it).
func (m *model) same(op string, x, y uint64, v1, v2 any, e1, e2 error) {
	if v1 != v2 || (e1 == nil) != (e2 == nil) || e1 != nil && e1.Error() != e2.Error() {
		m.fail("%s(%d, %d): twin allocators differ: %v, %v vs %v, %v", op, x, y, v1, e1, v2, e2)
	}
}

// predictAlloc returns the offset the policy must choose, or ok=false if no
// aligned hole is big enough.
func (m *model) predictAlloc(need, align uint64) (off uint64, ok bool) {
	needUnits := int(need / m.minAlign)
	bestLeft := -1
	for i := 0; i < len(m.owner); {
		if m.owner[i] != 0 {
			i++
			continue
		}
		j := i
		for j < len(m.owner) && m.owner[j] == 0 {
			j++
		}
		// Maximal free run [i, j).
		start := m.base + uint64(i)*m.minAlign
		end := m.base + uint64(j)*m.minAlign
		at, aok := alignUp(start, align)
		if aok && at <= end && (end-at)/m.minAlign >= uint64(needUnits) {
			if left := (j - i) - needUnits; bestLeft < 0 || left < bestLeft {
				bestLeft, off = left, at
			}
		}
		i = j
	}
	return off, bestLeft >= 0
}

func (m *model) alloc(size, align uint64) {
	m.ops++
	off, err := m.a.Alloc(size, align)
	off2, err2 := m.twin.Alloc(size, align)
	m.same("Alloc", size, align, off, off2, err, err2)
	if size == 0 || (align != 0 && !isPow2(align)) {
		if !errors.Is(err, errs.Invalid) {
			m.fail("Alloc(%d, %d) = %d, %v, want errs.Invalid", size, align, off, err)
		}
		m.nInvalid++
		m.check()
		return
	}
	eff := max(align, m.minAlign)
	var need uint64
	want, ok := uint64(0), false
	if size <= m.a.Size() {
		need = roundUp(size, m.minAlign)
		want, ok = m.predictAlloc(need, eff)
	}
	if !ok {
		if !errors.Is(err, errs.HeapExhausted) {
			m.fail("Alloc(%d, %d) = %d, %v, want HeapExhausted", size, align, off, err)
		}
		m.nExhausted++
		m.check()
		return
	}
	if err != nil || off != want {
		m.fail("Alloc(%d, %d) = %d, %v, want %d", size, align, off, err, want)
	}
	// Independent of the prediction: in range, aligned, not overlapping.
	if off < m.a.Base() || need > m.a.Base()+m.a.Size()-off || off%eff != 0 {
		m.fail("Alloc(%d, %d) = %d: out of range or misaligned", size, align, off)
	}
	if got, bok := m.a.BlockSize(off); !bok || got != need {
		m.fail("BlockSize(%d) = %d, %v, want %d", off, got, bok, need)
	}
	for u := m.unit(off); u < m.unit(off+need); u++ {
		if m.owner[u] != 0 {
			m.fail("Alloc(%d, %d) = %d overlaps block at %d", size, align, off, m.owner[u]-1)
		}
		m.owner[u] = off + 1
	}
	m.blocks[off] = need
	m.starts = append(m.starts, off)
	m.nAlloc++
	m.check()
}

func (m *model) free(off uint64) {
	m.ops++
	err := m.a.Free(off)
	err2 := m.twin.Free(off)
	m.same("Free", off, 0, 0, 0, err, err2)
	size, live := m.blocks[off]
	if !live {
		if !errors.Is(err, errs.OutOfBounds) {
			m.fail("Free(%d) of non-block = %v, want OutOfBounds", off, err)
		}
		m.nBadFree++
		m.check()
		return
	}
	if err != nil {
		m.fail("Free(%d): %v", off, err)
	}
	for u := m.unit(off); u < m.unit(off+size); u++ {
		m.owner[u] = 0
	}
	delete(m.blocks, off)
	i := slices.Index(m.starts, off)
	m.starts = slices.Delete(m.starts, i, i+1)
	m.nFree++
	m.check()
}

func (m *model) grow(off, newSize uint64) {
	m.ops++
	ok, err := m.a.Grow(off, newSize)
	ok2, err2 := m.twin.Grow(off, newSize)
	m.same("Grow", off, newSize, ok, ok2, err, err2)
	cur, live := m.blocks[off]
	switch {
	case !live:
		if !errors.Is(err, errs.OutOfBounds) {
			m.fail("Grow(%d, %d) of non-block = %v, %v, want OutOfBounds", off, newSize, ok, err)
		}
		m.check()
		return
	case newSize == 0:
		if !errors.Is(err, errs.Invalid) {
			m.fail("Grow(%d, 0) = %v, %v, want errs.Invalid", off, ok, err)
		}
		m.check()
		return
	}
	end := m.a.Base() + m.a.Size()
	// Predict: fits iff the new size stays in the heap and every unit past
	// the current end of the block up to the new end is free.
	want := newSize <= end-off
	var newEnd uint64
	if want {
		newEnd = off + roundUp(newSize, m.minAlign)
		for u := m.unit(off + cur); u < m.unit(newEnd); u++ {
			if m.owner[u] != 0 {
				want = false
				break
			}
		}
	}
	if err != nil || ok != want {
		m.fail("Grow(%d, %d) [size %d] = %v, %v, want %v", off, newSize, cur, ok, err, want)
	}
	if ok {
		for u := m.unit(off); u < len(m.owner); u++ {
			if u < m.unit(newEnd) {
				m.owner[u] = off + 1
			} else if m.owner[u] == off+1 {
				m.owner[u] = 0
			} else {
				break
			}
		}
		m.blocks[off] = newEnd - off
		m.nGrew++
	} else {
		m.nRefused++
	}
	m.check()
}

// check verifies the allocator against the model after every operation: the
// free list is well formed and is exactly the model's maximal free runs (so
// coalescing is complete and free space never overlaps a block); the live
// block count matches; Stats agree with the model; and the twin's free list
// and counters are identical. Every 64 ops (and in checkFull) it also
// compares the live maps entry by entry, which costs a map walk.
func (m *model) check() {
	checkFreeList(m.tb, m.a)
	if len(m.a.live) != len(m.blocks) {
		m.fail("%d live blocks, model has %d", len(m.a.live), len(m.blocks))
	}
	if m.ops%64 == 0 {
		m.checkFull()
	}
	runs := m.runs[:0]
	var usedUnits uint64
	for i := 0; i < len(m.owner); {
		if m.owner[i] != 0 {
			usedUnits++
			i++
			continue
		}
		j := i
		for j < len(m.owner) && m.owner[j] == 0 {
			j++
		}
		runs = append(runs, span{m.base + uint64(i)*m.minAlign, m.base + uint64(j)*m.minAlign})
		i = j
	}
	m.runs = runs
	if !slices.Equal(m.a.free, runs) {
		m.fail("free list %v, model free runs %v", m.a.free, runs)
	}
	used, free, largest := m.a.Stats()
	var wantLargest uint64
	for _, r := range runs {
		wantLargest = max(wantLargest, r.end-r.start)
	}
	if used != usedUnits*m.minAlign || used+free != m.a.Size() || largest != wantLargest {
		m.fail("Stats = %d, %d, %d; model used %d, largest %d, size %d",
			used, free, largest, usedUnits*m.minAlign, wantLargest, m.a.Size())
	}
	t := m.twin
	if !slices.Equal(m.a.free, t.free) || m.a.used != t.used || m.a.freeBytes != t.freeBytes || len(m.a.live) != len(t.live) {
		m.fail("twin allocators diverged")
	}
}

// checkFull compares every live block of the allocator and its twin with
// the model's, on top of the structural checks.
func (m *model) checkFull() {
	checkStructure(m.tb, m.a)
	if !maps.Equal(m.a.live, m.blocks) {
		m.fail("live blocks %v, model %v", m.a.live, m.blocks)
	}
	if !sameState(m.a, m.twin) {
		m.fail("twin allocators diverged")
	}
}

// pick returns a live block start chosen by r, or a junk offset if none.
func (m *model) pick(r uint64) (uint64, bool) {
	if len(m.starts) == 0 {
		return 0, false
	}
	return m.starts[r%uint64(len(m.starts))], true
}

// seedEnv names the environment variable that replays TestRandomized.
const seedEnv = "GOSHMEM_HEAP_SEED"

func TestRandomized(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(seedEnv); s != "" {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", seedEnv, s, err)
		}
		seed = v
	}
	t.Logf("seed %d (replay with %s=%d)", seed, seedEnv, seed)
	ops := 5000
	if testing.Short() {
		ops = 1000
	}
	configs := []struct{ base, size, minAlign uint64 }{
		{0, 16 << 10, 8},
		{40, 16<<10 + 5, 8}, // base only 8-aligned, ragged end
		{3*4096 + 16, 32 << 10, 16},
		{1 << 40, 64 << 10, 64},
		{8, 4 << 10, 8}, // small: exhaustion is common
	}
	for ci, c := range configs {
		t.Run(fmt.Sprintf("cfg%d", ci), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(seed, uint64(ci)))
			m := newModel(t, c.base, c.size, c.minAlign)
			aligns := []uint64{0, 0, 0, 0, 1, 8, 16, 32, 64, 128, 512, 4096, 1 << 20, 24}
			for range ops {
				switch k := r.IntN(100); {
				case k < 50: // alloc
					var size uint64
					switch s := r.IntN(100); {
					case s < 70:
						size = 1 + r.Uint64N(128)
					case s < 95:
						size = 1 + r.Uint64N(1024)
					case s < 99:
						size = 1 + r.Uint64N(c.size)
					default:
						size = 0
					}
					m.alloc(size, aligns[r.IntN(len(aligns))])
				case k < 85: // free
					if off, ok := m.pick(r.Uint64()); ok && r.IntN(20) != 0 {
						m.free(off)
					} else {
						m.free(c.base + r.Uint64N(c.size+64))
					}
				default: // grow or shrink
					off, ok := m.pick(r.Uint64())
					if !ok || r.IntN(30) == 0 {
						off = c.base + r.Uint64N(c.size)
					}
					newSize := r.Uint64N(1024)
					if r.IntN(50) == 0 {
						newSize = r.Uint64N(2 * c.size)
					}
					m.grow(off, newSize)
				}
			}
			m.checkFull()
			// Free everything: the heap must be one free span again.
			for len(m.starts) > 0 {
				m.free(m.starts[r.IntN(len(m.starts))])
			}
			if _, _, largest := m.a.Stats(); largest != m.a.Size() {
				t.Fatalf("after freeing all, largest free %d != size %d", largest, m.a.Size())
			}
			t.Log(m)
		})
	}
}

// FuzzAllocator interprets the input as a heap configuration followed by
// 3-byte operations, and checks every result against the model. Heaps and
// op counts are kept small so each execution is cheap (the fuzzer runs and
// minimizes inputs many thousands of times).
func FuzzAllocator(f *testing.F) {
	f.Add([]byte{0, 16, 0, 10, 0, 0, 20, 0x30, 2, 0, 0})
	f.Add([]byte{1, 255, 0, 200, 1, 1, 100, 0x52, 3, 0, 40, 2, 1, 0, 0, 200, 0})
	f.Add([]byte{7, 3, 0, 0, 0, 0, 255, 0xff, 3, 0, 0, 2, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		minAlign := uint64(8) << (data[0] & 3) // 8..64
		base := uint64(data[0]>>2) * 8         // 0..504, not always minAlign-aligned
		units := 4 + uint64(data[1])           // 4..259 units of minAlign
		ragged := uint64(data[0] & 7)          // extra bytes rounded off the end
		m := newModel(t, base, units*minAlign+ragged, minAlign)
		data = data[2:]
		for n := 0; len(data) >= 3 && n < 64; n++ {
			op, p1, p2 := data[0], data[1], data[2]
			data = data[3:]
			switch op & 3 {
			case 0, 1: // alloc: size p1<<(0..3), align from the high nibble of p2
				sz := uint64(p1) << (p2 & 3)
				var align uint64
				switch k := p2 >> 4; {
				case k == 15:
					align = 24 // not a power of two
				case k > 0:
					align = 1 << (k - 1) // 1..8192
				}
				m.alloc(sz, align)
			case 2: // free a live block, or an arbitrary offset
				if off, ok := m.pick(uint64(p1)); ok && p2&1 == 0 {
					m.free(off)
				} else {
					m.free(base + uint64(p1)*8 + uint64(p2>>1))
				}
			case 3: // grow or shrink a live block, or an arbitrary offset
				off, ok := m.pick(uint64(p1))
				if !ok || op&4 != 0 {
					off = base + uint64(p1)*16
				}
				m.grow(off, uint64(p2)*uint64(op>>3))
			}
		}
		m.checkFull()
	})
}

// ---------------------------------------------------------------------------
// Benchmark

// BenchmarkAllocFree measures one Alloc plus one Free with a steady
// population of live blocks of mixed sizes and alignments (freed in random
// order, so the free list fragments).
func BenchmarkAllocFree(b *testing.B) {
	for _, live := range []int{16, 1024, 16384} {
		b.Run(fmt.Sprintf("live=%d", live), func(b *testing.B) {
			a := newAlloc(b, 0, 1<<32, 8)
			r := rand.New(rand.NewPCG(1, 2))
			const n = 1 << 12
			sizes := make([]uint64, n)
			aligns := make([]uint64, n)
			picks := make([]int, n)
			for i := range n {
				sizes[i] = 1 + r.Uint64N(4096)
				if r.IntN(8) == 0 {
					aligns[i] = 256
				}
				picks[i] = r.IntN(live)
			}
			offs := make([]uint64, live)
			for i := range offs {
				off, err := a.Alloc(sizes[i%n], aligns[i%n])
				if err != nil {
					b.Fatal(err)
				}
				offs[i] = off
			}
			for i := 0; b.Loop(); i++ {
				j := picks[i%n]
				if err := a.Free(offs[j]); err != nil {
					b.Fatal(err)
				}
				off, err := a.Alloc(sizes[i%n], aligns[i%n])
				if err != nil {
					b.Fatal(err)
				}
				offs[j] = off
			}
		})
	}
}

// TestBelow: AllocBelow and GrowBelow keep blocks under the limit (the
// team blocks' floor in shmem), choosing among the spans that fit below
// it as Alloc chooses, and a refused call changes nothing; Top is the
// end of the highest live block.
func TestBelow(t *testing.T) {
	a := newAlloc(t, 0, 1024, 8)
	if a.Top() != 0 || a.End() != 1024 {
		t.Fatalf("empty: Top %d End %d, want 0 and 1024", a.Top(), a.End())
	}
	mustAlloc(t, a, 256, 0, 0)
	mustAlloc(t, a, 128, 0, 256)
	mustAlloc(t, a, 128, 0, 384)
	mustFree(t, a, 256) // free: [256, 384) and [512, 1024)
	if a.Top() != 512 {
		t.Fatalf("Top = %d, want 512", a.Top())
	}
	before := snap(a)
	// 200 bytes fit only in [512, 1024): below 700 they do not.
	if _, err := a.AllocBelow(200, 0, 700); !errors.Is(err, errs.HeapExhausted) || !strings.Contains(err.Error(), "below offset 700") {
		t.Fatalf("AllocBelow(200, limit 700) err = %v, want HeapExhausted naming the limit", err)
	}
	if !before.equal(snap(a)) {
		t.Fatalf("failed AllocBelow changed state")
	}
	// Best fit would take the hole at 256 for 120 bytes either way; with
	// the limit at 300 the hole holds only 40 bytes below it, so 120
	// bytes fail and 40 go there.
	if _, err := a.AllocBelow(120, 0, 300); !errors.Is(err, errs.HeapExhausted) {
		t.Fatalf("AllocBelow(120, limit 300) err = %v", err)
	}
	off, err := a.AllocBelow(40, 0, 300)
	if err != nil || off != 256 {
		t.Fatalf("AllocBelow(40, limit 300) = %d, %v; want 256", off, err)
	}
	off, err = a.AllocBelow(200, 0, 712)
	if err != nil || off != 512 {
		t.Fatalf("AllocBelow(200, limit 712) = %d, %v; want 512", off, err)
	}
	checkStructure(t, a)
	// GrowBelow: the block at 512 (200 bytes) may grow to 712, not past.
	before = snap(a)
	if ok, err := a.GrowBelow(512, 208, 712); err != nil || ok {
		t.Fatalf("GrowBelow(512, 208, limit 712) = %v, %v; want false", ok, err)
	}
	if !before.equal(snap(a)) {
		t.Fatalf("refused GrowBelow changed state")
	}
	if ok, err := a.GrowBelow(512, 200, 712); err != nil || !ok {
		t.Fatalf("GrowBelow(512, 200, limit 712) = %v, %v; want true", ok, err)
	}
	if ok, err := a.GrowBelow(512, 100, 600); err != nil || !ok {
		t.Fatalf("shrinking GrowBelow = %v, %v; want true", ok, err)
	}
	if a.Top() != 616 {
		t.Fatalf("Top = %d, want 616", a.Top())
	}
	checkStructure(t, a)
}
