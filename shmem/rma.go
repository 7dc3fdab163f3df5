package shmem

import (
	"fmt"

	"github.com/goshmem/goshmem/heap"
)

// Put copies src into dst[0:len(src)] on target. src may be reused when
// Put returns; the data is complete at target after the next Quiet (over
// shared memory it already is).
func Put[T Elem](dst Sym[T], src []T, target int) error {
	pe, p, off, err := dst.span(0, len(src), target)
	if err != nil {
		return err
	}
	if len(src) == 0 {
		return nil
	}
	copy(p.mem[off:], asBytes(src))
	pe.notify(p, off, uint64(len(src)*sizeOf[T]()))
	return nil
}

// Get copies len(dst) elements of src on target into dst.
func Get[T Elem](dst []T, src Sym[T], target int) error {
	_, p, off, err := src.span(0, len(dst), target)
	if err != nil {
		return err
	}
	copy(asBytes(dst), p.mem[off:])
	return nil
}

// P stores v into element i of dst on target.
func P[T Elem](dst Sym[T], i int, v T, target int) error {
	pe, p, off, err := dst.span(i, 1, target)
	if err != nil {
		return err
	}
	viewAs[T](p.mem, off, 1)[0] = v
	pe.notify(p, off, uint64(sizeOf[T]()))
	return nil
}

// G loads element i of src on target.
func G[T Elem](src Sym[T], i int, target int) (T, error) {
	_, p, off, err := src.span(i, 1, target)
	if err != nil {
		var z T
		return z, err
	}
	return viewAs[T](p.mem, off, 1)[0], nil
}

// PutNBI is Put that may return before src has been read: src must not
// change until the next Quiet of dst's context.
func PutNBI[T Elem](dst Sym[T], src []T, target int) error { return Put(dst, src, target) }

// GetNBI is Get that may return before dst is filled: dst is valid after
// the next Quiet of src's context.
func GetNBI[T Elem](dst []T, src Sym[T], target int) error { return Get(dst, src, target) }

// IPut is the strided put: element k*srcStride of src goes to element
// k*dstStride of dst on target, for k in 0..n-1. Strides are at least 1.
func IPut[T Elem](dst Sym[T], dstStride int, src []T, srcStride, n, target int) error {
	if err := strideCheck(dstStride, srcStride, n, len(src)); err != nil {
		return err
	}
	if n == 0 {
		_, _, _, err := dst.span(0, 0, target)
		return err
	}
	pe, p, off, err := dst.span(0, (n-1)*dstStride+1, target)
	if err != nil {
		return err
	}
	d := viewAs[T](p.mem, off, (n-1)*dstStride+1)
	for k := 0; k < n; k++ {
		d[k*dstStride] = src[k*srcStride]
	}
	pe.notify(p, off, uint64(((n-1)*dstStride+1)*sizeOf[T]()))
	return nil
}

// IGet is the strided get: element k*srcStride of src on target goes to
// element k*dstStride of dst, for k in 0..n-1.
func IGet[T Elem](dst []T, dstStride int, src Sym[T], srcStride, n, target int) error {
	if err := strideCheck(srcStride, dstStride, n, len(dst)); err != nil {
		return err
	}
	if n == 0 {
		_, _, _, err := src.span(0, 0, target)
		return err
	}
	_, p, off, err := src.span(0, (n-1)*srcStride+1, target)
	if err != nil {
		return err
	}
	s := viewAs[T](p.mem, off, (n-1)*srcStride+1)
	for k := 0; k < n; k++ {
		dst[k*dstStride] = s[k*srcStride]
	}
	return nil
}

// strideCheck validates a strided transfer whose symmetric side has
// stride symStride and whose local slice (length localLen) has stride
// localStride.
func strideCheck(symStride, localStride, n, localLen int) error {
	if symStride < 1 || localStride < 1 || n < 0 {
		return fmt.Errorf("shmem: strided transfer of %d elements with strides %d and %d: %w", n, symStride, localStride, ErrInvalid)
	}
	if n > 0 && (n-1) > (localLen-1)/localStride {
		return fmt.Errorf("shmem: strided transfer of %d elements with stride %d reaches past the %d-element local slice: %w",
			n, localStride, localLen, ErrOutOfBounds)
	}
	return nil
}

// SignalOp says how PutSignal updates the signal word.
type SignalOp int

const (
	SignalSet SignalOp = iota + 1 // store the value
	SignalAdd                     // add the value
)

// PutSignal puts src into dst on target and then updates sig[0] on
// target with v (SignalSet or SignalAdd). A PE that sees the signal sees
// the data.
func PutSignal[T Elem](dst Sym[T], src []T, sig Sym[uint64], v uint64, op SignalOp, target int) error {
	if op != SignalSet && op != SignalAdd {
		return fmt.Errorf("shmem: signal op %d: %w", op, ErrInvalid)
	}
	_, sp, soff, err := sig.span(0, 1, target)
	if err != nil {
		return err
	}
	_, p, off, err := dst.span(0, len(src), target)
	if err != nil {
		return err
	}
	copy(p.mem[off:], asBytes(src))
	// The signal is an atomic read-modify-write or store: it orders the
	// data before it and is a full fence for the sleeper check.
	if op == SignalSet {
		heap.AtomicAt(sp.mem, soff, 8, heap.OpSet, v, 0)
	} else {
		heap.AtomicAt(sp.mem, soff, 8, heap.OpFetchAdd, v, 0)
	}
	notifyAtomic(p, off, uint64(len(src)*sizeOf[T]()))
	notifyAtomic(sp, soff, 8)
	return nil
}

// SignalWaitUntil waits until this PE's sig[0] satisfies cmp v and
// returns its value.
func SignalWaitUntil(sig Sym[uint64], cmp Cmp, v uint64) (uint64, error) {
	if err := WaitUntil(sig, 0, cmp, v); err != nil {
		return 0, err
	}
	return loadLocal(sig, 0), nil
}

// SignalFetch reads this PE's sig[0].
func SignalFetch(sig Sym[uint64]) (uint64, error) {
	if _, err := localCheck(sig, CmpEQ); err != nil {
		return 0, err
	}
	if err := indexCheck(0, sig.n); err != nil {
		return 0, err
	}
	return loadLocal(sig, 0), nil
}

// Fence orders this PE's puts, atomics and signals to each target on the
// default context: those issued before it are delivered before those
// issued after it.
//
// Over shared memory every put already ends with a full fence (see
// notify) and every atomic is one, so Fence and Quiet only check the PE.
func (pe *PE) Fence() error {
	return pe.alive()
}

// Quiet completes every put, non-blocking operation and signal this PE
// issued on the default context: each is visible at its target.
func (pe *PE) Quiet() error {
	return pe.alive()
}

// PEQuiet is Quiet for operations to the given targets only.
func (pe *PE) PEQuiet(targets ...int) error {
	if err := pe.alive(); err != nil {
		return err
	}
	for _, t := range targets {
		if _, err := pe.peer(t); err != nil {
			return err
		}
	}
	return nil
}

// BarrierAll completes this PE's operations (Quiet), then waits until
// every PE has reached the barrier.
func (pe *PE) BarrierAll() error {
	if err := pe.Quiet(); err != nil {
		return err
	}
	return pe.world.sync()
}

// SyncAll waits until every PE has reached it, without completing
// outstanding operations.
func (pe *PE) SyncAll() error {
	if err := pe.alive(); err != nil {
		return err
	}
	return pe.world.sync()
}
