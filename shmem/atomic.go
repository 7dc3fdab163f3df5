package shmem

import (
	"fmt"

	"github.com/goshmem/goshmem/heap"
)

// AtomicElem is the set of element types the atomic operations take.
type AtomicElem interface {
	~int32 | ~int64 | ~int | ~uint32 | ~uint64 | ~uint
}

// ExtendedElem is the set of element types of OpenSHMEM's extended
// atomics: AtomicFetch, AtomicSet, AtomicSwap and their NBI forms take
// float32 and float64 as well. They move bit patterns only, so a float
// atomic is the integer atomic of its width on the same bits: a hardware
// atomic on the mapped word over shared memory, and the same ATOMIC frame
// over TCP, which the peer applies with the same hardware atomic, so the
// two routes are coherent on one word. No bit is changed (NaN payloads
// and -0 survive). The arithmetic and bitwise atomics stay AtomicElem.
type ExtendedElem interface {
	AtomicElem | ~float32 | ~float64
}

// amo applies op to element i of s on target and returns the old value.
// Over shared memory it is a hardware atomic on the mapped word; the
// netmesh reader applies remote requests with the same helpers, so both
// paths are coherent on one word.
func amo[T ExtendedElem](s Sym[T], i int, op heap.AtomicOp, v, cond T, target int) (T, error) {
	if p, off := s.local(i, 1, target); p != nil {
		old := heap.AtomicAt(p.mem, off, sizeOf[T](), op, toBits(v), toBits(cond))
		if op != heap.OpFetch {
			notifyAtomic(p, off, uint64(sizeOf[T]()))
		}
		s.b.pe.leaveFast()
		return fromBits[T](old), nil
	}
	pe, p, lk, off, err := s.span(i, 1, target)
	if err != nil {
		var z T
		return z, err
	}
	defer pe.leave()
	if p.mem == nil {
		old, err := lk.Atomic(sizeOf[T](), op, off, toBits(v), toBits(cond))
		return fromBits[T](old), err
	}
	old := heap.AtomicAt(p.mem, off, sizeOf[T](), op, toBits(v), toBits(cond))
	if op != heap.OpFetch {
		notifyAtomic(p, off, uint64(sizeOf[T]()))
	}
	return fromBits[T](old), nil
}

// amoSet applies a non-fetching op (set, add, and, or, xor). Over shared
// memory it is amo; over TCP it does not wait for the peer: the request
// travels in order in the link's stream and is complete at the next
// Quiet, as OpenSHMEM's non-fetching atomics are.
func amoSet[T ExtendedElem](s Sym[T], i int, op heap.AtomicOp, v T, target int) error {
	if p, off := s.local(i, 1, target); p != nil {
		heap.AtomicAt(p.mem, off, sizeOf[T](), op, toBits(v), 0)
		notifyAtomic(p, off, uint64(sizeOf[T]()))
		s.b.pe.leaveFast()
		return nil
	}
	pe, p, lk, off, err := s.span(i, 1, target)
	if err != nil {
		return err
	}
	defer pe.leave()
	if p.mem == nil {
		return lk.AtomicNBI(sizeOf[T](), op, off, toBits(v), 0, nil)
	}
	heap.AtomicAt(p.mem, off, sizeOf[T](), op, toBits(v), 0)
	notifyAtomic(p, off, uint64(sizeOf[T]()))
	return nil
}

// AtomicFetch atomically reads element i of s on target (any
// ExtendedElem, floats included).
func AtomicFetch[T ExtendedElem](s Sym[T], i, target int) (T, error) {
	return amo(s, i, heap.OpFetch, 0, 0, target)
}

// AtomicSet atomically stores v into element i of s on target (any
// ExtendedElem).
func AtomicSet[T ExtendedElem](s Sym[T], i int, v T, target int) error {
	return amoSet(s, i, heap.OpSet, v, target)
}

// AtomicSwap atomically stores v and returns the old value (any
// ExtendedElem).
func AtomicSwap[T ExtendedElem](s Sym[T], i int, v T, target int) (T, error) {
	return amo(s, i, heap.OpSwap, v, 0, target)
}

// AtomicCompareSwap stores v if the element equals cond, and returns the
// old value either way (the swap happened iff it equals cond).
func AtomicCompareSwap[T AtomicElem](s Sym[T], i int, cond, v T, target int) (T, error) {
	return amo(s, i, heap.OpCSwap, v, cond, target)
}

// AtomicFetchAdd adds v and returns the old value.
func AtomicFetchAdd[T AtomicElem](s Sym[T], i int, v T, target int) (T, error) {
	return amo(s, i, heap.OpFetchAdd, v, 0, target)
}

// AtomicAdd adds v.
func AtomicAdd[T AtomicElem](s Sym[T], i int, v T, target int) error {
	return amoSet(s, i, heap.OpFetchAdd, v, target)
}

// AtomicFetchInc adds one and returns the old value.
func AtomicFetchInc[T AtomicElem](s Sym[T], i, target int) (T, error) {
	return amo(s, i, heap.OpFetchAdd, 1, 0, target)
}

// AtomicInc adds one.
func AtomicInc[T AtomicElem](s Sym[T], i, target int) error {
	return amoSet(s, i, heap.OpFetchAdd, 1, target)
}

// AtomicFetchAnd ands v in and returns the old value.
func AtomicFetchAnd[T AtomicElem](s Sym[T], i int, v T, target int) (T, error) {
	return amo(s, i, heap.OpFetchAnd, v, 0, target)
}

// AtomicAnd ands v in.
func AtomicAnd[T AtomicElem](s Sym[T], i int, v T, target int) error {
	return amoSet(s, i, heap.OpFetchAnd, v, target)
}

// AtomicFetchOr ors v in and returns the old value.
func AtomicFetchOr[T AtomicElem](s Sym[T], i int, v T, target int) (T, error) {
	return amo(s, i, heap.OpFetchOr, v, 0, target)
}

// AtomicOr ors v in.
func AtomicOr[T AtomicElem](s Sym[T], i int, v T, target int) error {
	return amoSet(s, i, heap.OpFetchOr, v, target)
}

// AtomicFetchXor xors v in and returns the old value.
func AtomicFetchXor[T AtomicElem](s Sym[T], i int, v T, target int) (T, error) {
	return amo(s, i, heap.OpFetchXor, v, 0, target)
}

// AtomicXor xors v in.
func AtomicXor[T AtomicElem](s Sym[T], i int, v T, target int) error {
	return amoSet(s, i, heap.OpFetchXor, v, target)
}

// The non-blocking fetching atomics: *dst holds the old value after the
// next Quiet of s's context (over shared memory, already on return).

func amoNBI[T ExtendedElem](dst *T, s Sym[T], i int, op heap.AtomicOp, v, cond T, target int) error {
	if dst == nil {
		return fmt.Errorf("shmem: non-blocking atomic with a nil destination: %w", ErrInvalid)
	}
	if sizeOf[T]() == 8 && (s.b == nil || s.ctx != nil || uint(target) >= uint(s.b.pe.npes) || s.b.pe.peers[target].mem == nil) {
		// Over TCP an 8-byte result can land in *dst when the reply
		// arrives: many such atomics are in flight at once, and all
		// are complete at the next Quiet.
		pe, p, lk, off, err := s.span(i, 1, target)
		if err != nil {
			return err
		}
		defer pe.leave()
		if p.mem == nil {
			return lk.AtomicNBI(8, op, off, toBits(v), toBits(cond), word64(dst))
		}
	}
	// Over shared memory, and for 4-byte elements over TCP, the result is
	// fetched at once (allowed: it is then complete early).
	old, err := amo(s, i, op, v, cond, target)
	if err != nil {
		return err
	}
	*dst = old
	return nil
}

func AtomicFetchNBI[T ExtendedElem](dst *T, s Sym[T], i, target int) error {
	return amoNBI(dst, s, i, heap.OpFetch, 0, 0, target)
}

func AtomicSwapNBI[T ExtendedElem](dst *T, s Sym[T], i int, v T, target int) error {
	return amoNBI(dst, s, i, heap.OpSwap, v, 0, target)
}

func AtomicCompareSwapNBI[T AtomicElem](dst *T, s Sym[T], i int, cond, v T, target int) error {
	return amoNBI(dst, s, i, heap.OpCSwap, v, cond, target)
}

func AtomicFetchAddNBI[T AtomicElem](dst *T, s Sym[T], i int, v T, target int) error {
	return amoNBI(dst, s, i, heap.OpFetchAdd, v, 0, target)
}

func AtomicFetchIncNBI[T AtomicElem](dst *T, s Sym[T], i, target int) error {
	return amoNBI(dst, s, i, heap.OpFetchAdd, 1, 0, target)
}

func AtomicFetchAndNBI[T AtomicElem](dst *T, s Sym[T], i int, v T, target int) error {
	return amoNBI(dst, s, i, heap.OpFetchAnd, v, 0, target)
}

func AtomicFetchOrNBI[T AtomicElem](dst *T, s Sym[T], i int, v T, target int) error {
	return amoNBI(dst, s, i, heap.OpFetchOr, v, 0, target)
}

func AtomicFetchXorNBI[T AtomicElem](dst *T, s Sym[T], i int, v T, target int) error {
	return amoNBI(dst, s, i, heap.OpFetchXor, v, 0, target)
}
