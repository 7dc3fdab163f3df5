package shmem

import (
	"fmt"
	"sync/atomic"

	"github.com/goshmem/goshmem/heap"
)

// Elem is the set of element types of symmetric objects.
type Elem interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~int | ~uint8 | ~uint16 | ~uint32 |
		~uint64 | ~uint | ~uintptr | ~float32 | ~float64 | ~complex64 | ~complex128
}

// block is one collective allocation. Handles (Sym values, including
// slices of them) point at it, so a handle to a freed block is refused.
type block struct {
	pe    *PE
	off   uint64 // byte offset of the block in the segment
	size  uint64 // bytes
	align uint64 // the alignment asked for (0: the default)
	freed atomic.Bool
	// A team block (TeamMalloc): its team, and member[w] set for each
	// member's world PE. nil for a world block.
	team   *Team
	member []bool
}

// Sym is a handle on a symmetric object: n elements of T at the same
// heap offset on every PE. It is a small value; copy it freely. The zero
// Sym is not usable.
type Sym[T Elem] struct {
	b   *block
	off uint64 // byte offset of element 0 in the segment
	n   int
	ctx *Context // nil: the PE's default context
}

// Len is the number of elements (0 for a handle from an out-of-range
// Slice).
func (s Sym[T]) Len() int { return max(s.n, 0) }

// Offset is the object's byte offset in the symmetric heap, the same on
// every PE.
func (s Sym[T]) Offset() uint64 { return s.off }

// PE is the handle the object was allocated through.
func (s Sym[T]) PE() *PE {
	if s.b == nil {
		return nil
	}
	return s.b.pe
}

// Slice is the sub-object of elements lo..hi-1, like s[lo:hi]. Bounds out
// of range give a zero-length handle (Len 0) whose every use fails with
// ErrOutOfBounds (Slice itself cannot return an error), and so do slices
// of it.
func (s Sym[T]) Slice(lo, hi int) Sym[T] {
	if lo < 0 || hi < lo || hi > s.n {
		// n -1 marks the handle bad: check refuses it, Len reports 0.
		return Sym[T]{b: s.b, off: s.off, n: -1, ctx: s.ctx}
	}
	return Sym[T]{b: s.b, off: s.off + uint64(lo*sizeOf[T]()), n: hi - lo, ctx: s.ctx}
}

// Via returns the handle with its operations ordered and completed by
// context c (nil: the PE's default context).
func (s Sym[T]) Via(c *Context) Sym[T] {
	s.ctx = c
	return s
}

// Local is this PE's copy of the object, read and written directly. The
// slice aliases the symmetric heap: it is valid until the object is freed
// or the PE finalized, and other PEs may write it at any time (use the
// atomic and wait calls to synchronise). It is nil for an invalid handle
// and once Finalize has begun.
func (s Sym[T]) Local() []T {
	if s.check() != nil || !s.b.pe.running() {
		return nil
	}
	return viewAs[T](s.b.pe.mem, s.off, s.n)
}

// Ptr is shmem_ptr: target's copy of the object, read and written
// directly, when target's heap is mapped here; nil when target is remote,
// out of range, outside a team object's team or the handle invalid, and
// once Finalize has begun.
func Ptr[T Elem](s Sym[T], target int) []T {
	if s.check() != nil || uint(target) >= uint(s.b.pe.npes) || (s.b.member != nil && !s.b.member[target]) || !s.b.pe.running() {
		return nil
	}
	mem := s.b.pe.peers[target].mem
	if mem == nil {
		return nil
	}
	return viewAs[T](mem, s.off, s.n)
}

// check validates the handle itself.
func (s Sym[T]) check() error {
	if s.b == nil {
		return fmt.Errorf("shmem: zero Sym (not from Malloc): %w", ErrInvalid)
	}
	if s.n < 0 {
		return fmt.Errorf("shmem: Slice out of range: %w", ErrOutOfBounds)
	}
	if s.b.freed.Load() {
		return fmt.Errorf("shmem: object at offset %d was freed: %w", s.b.off, ErrOutOfBounds)
	}
	return nil
}

// local is span's fast path, small enough to inline: the route and byte
// offset of elements [i, i+cnt) when target's heap is mapped here and
// every check passes; nil when any check fails or the target is remote,
// and the caller then takes span for the full check and its error. A
// non-nil route has entered the PE: the caller calls leave when done.
func (s Sym[T]) local(i, cnt, target int) (*peer, uint64) {
	b := s.b
	if b == nil || s.ctx != nil || i < 0 || cnt < 0 || i > s.n-cnt || uint(target) >= uint(b.pe.npes) ||
		(b.member != nil && !b.member[target]) || b.freed.Load() || b.pe.peers[target].mem == nil || !b.pe.tryEnter() {
		return nil, 0
	}
	return &b.pe.peers[target], s.off + uint64(i*sizeOf[T]())
}

// span validates elements [i, i+cnt) of s on target, enters the PE, and
// returns the PE, the route and the byte offset of element i. On success
// the caller calls pe.leave when done with the memory. The remote route
// is the PE's link to target, or the channel of s's context to it.
func (s Sym[T]) span(i, cnt, target int) (*PE, *peer, remoteLink, uint64, error) {
	if err := s.check(); err != nil {
		return nil, nil, nil, 0, err
	}
	if i < 0 || cnt < 0 || i > s.n-cnt {
		return nil, nil, nil, 0, fmt.Errorf("shmem: elements %d..%d of a %d-element object (%d-byte elements at offset %d): %w",
			i, i+cnt, s.n, sizeOf[T](), s.off, ErrOutOfBounds)
	}
	if s.ctx != nil && s.ctx.closed.Load() {
		return nil, nil, nil, 0, fmt.Errorf("shmem: context %d is closed: %w", s.ctx.id, ErrFinalized)
	}
	pe := s.b.pe
	if s.ctx != nil {
		if s.ctx.pe != pe {
			return nil, nil, nil, 0, fmt.Errorf("shmem: a handle of PE %d bound to a context of PE %d: %w", pe.rank, s.ctx.pe.rank, ErrInvalid)
		}
		// A team context's PE numbers are its team's.
		var err error
		if target, err = s.ctx.rank(target); err != nil {
			return nil, nil, nil, 0, err
		}
	}
	if m := s.b.member; m != nil && (uint(target) >= uint(len(m)) || !m[target]) {
		return nil, nil, nil, 0, fmt.Errorf("shmem: PE %d is not a member of the %d-PE team the object at offset %d was allocated over: %w",
			target, len(s.b.team.members), s.b.off, ErrBadPE)
	}
	if err := pe.enter(); err != nil {
		return nil, nil, nil, 0, err
	}
	p, err := pe.peer(target)
	if err != nil {
		pe.leave()
		return nil, nil, nil, 0, err
	}
	lk := p.link
	if s.ctx != nil && lk != nil {
		// The context's own stream to target (opened on first use).
		if lk, err = s.ctx.route(target); err != nil {
			pe.leave()
			return nil, nil, nil, 0, err
		}
	}
	return pe, p, lk, s.off + uint64(i*sizeOf[T]()), nil
}

// Malloc allocates n zeroed elements on every PE (collective: every PE
// calls it with the same n, and it returns once every PE has the block).
func Malloc[T Elem](pe *PE, n int) (Sym[T], error) {
	return Align[T](pe, 0, n)
}

// Align is Malloc with the object aligned to align bytes (a power of
// two; 0 means the default, the cache line).
func Align[T Elem](pe *PE, align, n int) (Sym[T], error) {
	if pe == nil {
		return Sym[T]{}, fmt.Errorf("shmem: Malloc on a nil PE: %w", ErrInvalid)
	}
	if n < 0 || align < 0 || align&(align-1) != 0 {
		return Sym[T]{}, fmt.Errorf("shmem: Malloc of %d elements aligned to %d: %w", n, align, ErrInvalid)
	}
	if uint64(n) > pe.cfg.HeapSize/uint64(sizeOf[T]()) {
		return Sym[T]{}, fmt.Errorf("shmem: Malloc of %d %d-byte elements is larger than the %d-byte heap (SHMEM_SYMMETRIC_SIZE): %w",
			n, sizeOf[T](), pe.cfg.HeapSize, ErrHeapExhausted)
	}
	if err := pe.enter(); err != nil {
		return Sym[T]{}, err
	}
	defer pe.leave()
	pe.th.order.Lock()
	defer pe.th.order.Unlock()
	b, err := pe.symAlloc(uint64(n*sizeOf[T]()), uint64(align), opMalloc)
	if err != nil {
		return Sym[T]{}, err
	}
	return Sym[T]{b: b, off: b.off, n: n}, nil
}

// Realloc resizes s to n elements on every PE (collective), keeping the
// contents up to the smaller length. It first completes this PE's
// outstanding operations and meets all PEs. s must be the whole object
// as Malloc returned it; afterwards only the returned handle is valid.
func Realloc[T Elem](s Sym[T], n int) (Sym[T], error) {
	if err := s.check(); err != nil {
		return Sym[T]{}, err
	}
	pe := s.b.pe
	if n < 0 {
		return Sym[T]{}, fmt.Errorf("shmem: Realloc to %d elements: %w", n, ErrInvalid)
	}
	if s.off != s.b.off {
		return Sym[T]{}, fmt.Errorf("shmem: Realloc of a slice (offset %d inside the object at %d): %w", s.off, s.b.off, ErrInvalid)
	}
	if s.b.team != nil {
		return Sym[T]{}, fmt.Errorf("shmem: Realloc of an object allocated over a %d-PE team (TeamMalloc): only world objects are resized: %w", len(s.b.team.members), ErrInvalid)
	}
	if uint64(n) > pe.cfg.HeapSize/uint64(sizeOf[T]()) {
		return Sym[T]{}, fmt.Errorf("shmem: Realloc to %d %d-byte elements is larger than the %d-byte heap (SHMEM_SYMMETRIC_SIZE): %w",
			n, sizeOf[T](), pe.cfg.HeapSize, ErrHeapExhausted)
	}
	if err := pe.enter(); err != nil {
		return Sym[T]{}, err
	}
	defer pe.leave()
	pe.th.order.Lock()
	defer pe.th.order.Unlock()
	b, err := pe.symRealloc(s.b, uint64(n*sizeOf[T]()))
	if err != nil {
		return Sym[T]{}, err
	}
	return Sym[T]{b: b, off: b.off, n: n, ctx: s.ctx}, nil
}

// Free releases s on every PE (collective). It first completes this PE's
// outstanding operations and meets all PEs. Any handle on the object,
// including slices of it, is invalid afterwards. An object of TeamMalloc
// is freed on its team's members (collective over them).
func Free[T Elem](s Sym[T]) error {
	if err := s.check(); err != nil {
		return err
	}
	pe := s.b.pe
	if err := pe.enter(); err != nil {
		return err
	}
	defer pe.leave()
	if s.b.team != nil {
		return pe.teamFree(s.b)
	}
	pe.th.order.Lock()
	defer pe.th.order.Unlock()
	return pe.symFree(s.b)
}

// Collective allocation kinds, as recorded in the SHMEM_DEBUG agreement
// descriptor.
const (
	opMalloc  = 1
	opRealloc = 2
	opFree    = 3
	// The world-wide synchronising calls are checked the same way, so
	// that a PE in Malloc and a PE in BarrierAll both fail.
	opBarrier  = 4
	opSync     = 5
	opFinalize = 6
)

func (pe *PE) symAlloc(bytes, align uint64, op uint64) (*block, error) {
	if err := pe.alive(); err != nil {
		return nil, err
	}
	if err := pe.agree(op, bytes, align); err != nil {
		return nil, err
	}
	if bytes == 0 {
		// No memory, no meeting: a zero-length object has no offset to
		// agree on.
		return pe.symAllocNoAgree(0, align, 0)
	}
	// The floor exchange is the meeting: every PE is inside this call,
	// and every PE gets the same limit (teamheap.go).
	limit, err := pe.worldLimit()
	if err != nil {
		return nil, err
	}
	b, err := pe.symAllocNoAgree(bytes, align, limit)
	if err != nil {
		// Every PE had the same limit: a failed allocation fails alike
		// on every PE. They meet even so: no PE may store into the floor
		// exchange's words again (the next call) before every PE has
		// read this exchange's.
		if serr := pe.world.sync(); serr != nil {
			return nil, serr
		}
		return nil, err
	}
	if err := pe.world.sync(); err != nil {
		return nil, err
	}
	return b, nil
}

func (pe *PE) symRealloc(old *block, bytes uint64) (*block, error) {
	if err := pe.agree(opRealloc, bytes, old.off); err != nil {
		return nil, err
	}
	if err := pe.barrierAll(); err != nil {
		return nil, err
	}
	// The floor exchange (teamheap.go): every PE gets the same limit.
	limit, err := pe.worldLimit()
	if err != nil {
		return nil, err
	}
	if old.size == 0 || bytes == 0 {
		nb, err := pe.symAllocNoAgree(bytes, old.align, limit)
		if err != nil {
			if serr := pe.world.sync(); serr != nil { // as in symAlloc
				return nil, serr
			}
			return nil, err
		}
		if old.size != 0 {
			if err := pe.freeBlock(old); err != nil {
				return nil, err
			}
		}
		old.freed.Store(true)
		return nb, pe.world.sync()
	}
	pe.allocMu.Lock()
	grown, err := pe.alloc.GrowBelow(old.off, bytes, limit)
	var off uint64
	if err == nil && !grown {
		off, err = pe.alloc.AllocBelow(bytes, old.align, limit)
		if err == nil {
			copy(pe.mem[off:off+min(bytes, old.size)], pe.mem[old.off:old.off+min(bytes, old.size)])
			err = pe.alloc.Free(old.off)
		}
	} else if err == nil {
		off = old.off
	}
	pe.allocMu.Unlock()
	if err != nil {
		if serr := pe.world.sync(); serr != nil { // as in symAlloc
			return nil, serr
		}
		return nil, fmt.Errorf("shmem: PE %d: Realloc to %d bytes: %w (SHMEM_SYMMETRIC_SIZE is %d bytes)", pe.rank, bytes, err, pe.cfg.HeapSize)
	}
	if bytes > old.size {
		clear(pe.mem[off+old.size : off+bytes])
	}
	old.freed.Store(true)
	if off != old.off {
		pe.dropLocks(old.off, old.size)
	}
	nb := &block{pe: pe, off: off, size: bytes, align: old.align}
	if err := pe.world.sync(); err != nil {
		return nil, err
	}
	return nb, nil
}

// symAllocNoAgree allocates and zeroes this PE's copy below limit (the
// world limit: worldLimit), without the agreement step or the meeting.
func (pe *PE) symAllocNoAgree(bytes, align, limit uint64) (*block, error) {
	if bytes == 0 {
		return &block{pe: pe, off: heap.HeapBase, align: align}, nil
	}
	pe.allocMu.Lock()
	off, err := pe.alloc.AllocBelow(bytes, align, limit)
	pe.allocMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("shmem: PE %d: %w (SHMEM_SYMMETRIC_SIZE is %d bytes)", pe.rank, err, pe.cfg.HeapSize)
	}
	clear(pe.mem[off : off+bytes])
	return &block{pe: pe, off: off, size: bytes, align: align}, nil
}

func (pe *PE) symFree(b *block) error {
	if err := pe.agree(opFree, b.size, b.off); err != nil {
		return err
	}
	if err := pe.barrierAll(); err != nil {
		return err
	}
	if b.freed.Swap(true) {
		return fmt.Errorf("shmem: object at offset %d was already freed: %w", b.off, ErrOutOfBounds)
	}
	pe.dropLocks(b.off, b.size)
	if b.size == 0 {
		return nil
	}
	return pe.freeBlock(b)
}

func (pe *PE) freeBlock(b *block) error {
	pe.allocMu.Lock()
	defer pe.allocMu.Unlock()
	if err := pe.alloc.Free(b.off); err != nil {
		return fmt.Errorf("shmem: PE %d: %w", pe.rank, err)
	}
	return nil
}

// agree checks, under SHMEM_DEBUG, that every PE is making the same
// collective allocation or world-synchronising call: each PE publishes a descriptor (call
// number, kind, size, alignment or offset) in its reserved agreement
// words, all meet, each reads every other PE's descriptor, and all meet
// again before the words can be reused. Every PE sees the same set of
// descriptors, so every PE returns ErrAsymmetric together.
func (pe *PE) agree(op, a, b uint64) error {
	pe.allocMu.Lock()
	pe.allocs++
	seq := pe.allocs
	pe.allocMu.Unlock()
	if !pe.cfg.Debug || pe.npes == 1 {
		return nil
	}
	desc := [4]uint64{seq, op, a, b}
	for i, w := range desc {
		heap.Store64(pe.mem, heap.AgreeOff+uint64(8*i), w)
	}
	if err := pe.world.sync(); err != nil {
		return err
	}
	var bad error
	for r := 0; r < pe.npes; r++ {
		var got [4]uint64
		if err := pe.getWords(r, heap.AgreeOff, got[:]); err != nil {
			return err
		}
		if got != desc && bad == nil {
			bad = fmt.Errorf("shmem: collective call #%d: PE %d called %s(%d, %d) but PE %d called %s(%d, %d): %w",
				seq, pe.rank, opName(desc[1]), desc[2], desc[3], r, opName(got[1]), got[2], got[3], ErrAsymmetric)
		}
	}
	if err := pe.world.sync(); err != nil {
		return err
	}
	return bad
}

func opName(op uint64) string {
	switch op {
	case opMalloc:
		return "Malloc"
	case opRealloc:
		return "Realloc"
	case opFree:
		return "Free"
	case opBarrier:
		return "BarrierAll"
	case opSync:
		return "SyncAll"
	case opFinalize:
		return "Finalize"
	}
	return fmt.Sprintf("op%d", op)
}

// getWords reads len(dst) 8-byte runtime words at off of target's
// reserved region.
func (pe *PE) getWords(target int, off uint64, dst []uint64) error {
	p, err := pe.peer(target)
	if err != nil {
		return err
	}
	if p.mem == nil {
		return p.link.Get(asBytes(dst), off)
	}
	for i := range dst {
		dst[i] = heap.Load64(p.mem, off+uint64(8*i))
	}
	return nil
}
