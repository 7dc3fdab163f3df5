package shmem

import (
	"fmt"

	"github.com/goshmem/goshmem/heap"
)

// copyData is copy for RMA payloads. From about 1 MiB Go's copy switches
// to stores that bypass the cache; measured on this project's machines,
// a copy of up to a few MiB in 64 KiB pieces that stay in the cache runs
// 1.5x faster, and leaves the data where a same-host reader finds it.
// Above 8 MiB the bypassing copy wins again and is used whole.
func copyData(dst, src []byte) {
	n := min(len(dst), len(src))
	if n <= 512<<10 || n > 8<<20 {
		copy(dst, src)
		return
	}
	const piece = 64 << 10
	for o := 0; o < n; o += piece {
		e := min(o+piece, n)
		copy(dst[o:e], src[o:e])
	}
}

// Put copies src into dst[0:len(src)] on target. src may be reused when
// Put returns; the data is complete at target after the next Quiet (over
// shared memory it already is).
func Put[T Elem](dst Sym[T], src []T, target int) error {
	if p, off := dst.local(0, len(src), target); p != nil {
		copyData(p.mem[off:], asBytes(src))
		dst.b.pe.notify(p, off, uint64(len(src)*sizeOf[T]()))
		dst.b.pe.leaveFast()
		return nil
	}
	pe, p, off, err := dst.span(0, len(src), target)
	if err != nil {
		return err
	}
	defer pe.leave()
	if len(src) == 0 {
		return nil
	}
	if p.mem == nil {
		return p.link.Put(off, asBytes(src))
	}
	copy(p.mem[off:], asBytes(src))
	pe.notify(p, off, uint64(len(src)*sizeOf[T]()))
	return nil
}

// Get copies len(dst) elements of src on target into dst.
func Get[T Elem](dst []T, src Sym[T], target int) error {
	if p, off := src.local(0, len(dst), target); p != nil {
		copyData(asBytes(dst), p.mem[off:])
		src.b.pe.leaveFast()
		return nil
	}
	pe, p, off, err := src.span(0, len(dst), target)
	if err != nil {
		return err
	}
	defer pe.leave()
	if p.mem == nil {
		if len(dst) == 0 {
			return nil
		}
		return p.link.Get(asBytes(dst), off)
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
	defer pe.leave()
	if p.mem == nil {
		return p.link.Put(off, asBytes([]T{v}))
	}
	viewAs[T](p.mem, off, 1)[0] = v
	pe.notify(p, off, uint64(sizeOf[T]()))
	return nil
}

// G loads element i of src on target.
func G[T Elem](src Sym[T], i int, target int) (T, error) {
	pe, p, off, err := src.span(i, 1, target)
	if err != nil {
		var z T
		return z, err
	}
	defer pe.leave()
	if p.mem == nil {
		var v [1]T
		err := p.link.Get(asBytes(v[:]), off)
		return v[0], err
	}
	return viewAs[T](p.mem, off, 1)[0], nil
}

// PutNBI is Put that may return before src has been read: src must not
// change until the next Quiet of dst's context.
func PutNBI[T Elem](dst Sym[T], src []T, target int) error {
	if p, off := dst.local(0, len(src), target); p != nil {
		copyData(p.mem[off:], asBytes(src))
		dst.b.pe.notify(p, off, uint64(len(src)*sizeOf[T]()))
		dst.b.pe.leaveFast()
		return nil
	}
	pe, p, off, err := dst.span(0, len(src), target)
	if err != nil {
		return err
	}
	defer pe.leave()
	if len(src) == 0 {
		return nil
	}
	if p.mem == nil {
		return p.link.PutNBI(off, asBytes(src))
	}
	copy(p.mem[off:], asBytes(src))
	pe.notify(p, off, uint64(len(src)*sizeOf[T]()))
	return nil
}

// GetNBI is Get that may return before dst is filled: dst is valid after
// the next Quiet of src's context.
func GetNBI[T Elem](dst []T, src Sym[T], target int) error {
	if p, off := src.local(0, len(dst), target); p != nil {
		copyData(asBytes(dst), p.mem[off:])
		src.b.pe.leaveFast()
		return nil
	}
	pe, p, off, err := src.span(0, len(dst), target)
	if err != nil {
		return err
	}
	defer pe.leave()
	if len(dst) == 0 {
		return nil
	}
	if p.mem == nil {
		return p.link.GetNBI(asBytes(dst), off)
	}
	copy(asBytes(dst), p.mem[off:])
	return nil
}

// IPut is the strided put: element k*srcStride of src goes to element
// k*dstStride of dst on target, for k in 0..n-1. Strides are at least 1.
// A transfer whose last element would fall outside dst or src is
// ErrOutOfBounds, whatever the strides, and changes nothing.
func IPut[T Elem](dst Sym[T], dstStride int, src []T, srcStride, n, target int) error {
	if err := strideCheck(dstStride, srcStride, n, len(src)); err != nil {
		return err
	}
	pe, p, off, ext, err := dst.strided(n, dstStride, target)
	if err != nil {
		return err
	}
	defer pe.leave()
	if n == 0 {
		return nil
	}
	if p.mem == nil {
		// One PUT frame per element, copied and written together (a few
		// writes per 64 KiB of frames), so src may be reused at once.
		return p.link.PutStrided(off, dstStride, asBytes(src), srcStride, sizeOf[T](), n)
	}
	d := viewAs[T](p.mem, off, ext)
	for k := 0; k < n; k++ {
		d[k*dstStride] = src[k*srcStride]
	}
	pe.notify(p, off, uint64(ext*sizeOf[T]()))
	return nil
}

// IGet is the strided get: element k*srcStride of src on target goes to
// element k*dstStride of dst, for k in 0..n-1. Bounds are checked as for
// IPut.
func IGet[T Elem](dst []T, dstStride int, src Sym[T], srcStride, n, target int) error {
	if err := strideCheck(srcStride, dstStride, n, len(dst)); err != nil {
		return err
	}
	pe, p, off, ext, err := src.strided(n, srcStride, target)
	if err != nil {
		return err
	}
	defer pe.leave()
	if n == 0 {
		return nil
	}
	if p.mem == nil {
		// Every element in flight at once, then one flush for all.
		sz := uint64(sizeOf[T]())
		for k := 0; k < n; k++ {
			if err := p.link.GetNBI(asBytes(dst[k*dstStride:k*dstStride+1]), off+uint64(k*srcStride)*sz); err != nil {
				return err
			}
		}
		return p.link.Flush()
	}
	s := viewAs[T](p.mem, off, ext)
	for k := 0; k < n; k++ {
		dst[k*dstStride] = s[k*srcStride]
	}
	return nil
}

// strideCheck validates a strided transfer's arguments and its local
// side: symStride is the symmetric side's stride, and the local slice
// (length localLen) has stride localStride. The bound is checked as
// n-1 <= (localLen-1)/localStride, which cannot overflow.
func strideCheck(symStride, localStride, n, localLen int) error {
	if symStride < 1 || localStride < 1 || n < 0 {
		return fmt.Errorf("shmem: strided transfer of %d elements with strides %d and %d: %w", n, symStride, localStride, ErrInvalid)
	}
	if n > 0 && (localLen < 1 || n-1 > (localLen-1)/localStride) {
		return fmt.Errorf("shmem: strided transfer of %d elements with stride %d reaches past the %d-element local slice: %w",
			n, localStride, localLen, ErrOutOfBounds)
	}
	return nil
}

// strided is span for n elements at stride (>= 1) from element 0 of s:
// it checks, without overflow, that the last one is inside s, and
// returns the extent (n-1)*stride+1 in elements (0 when n is 0).
func (s Sym[T]) strided(n, stride, target int) (*PE, *peer, uint64, int, error) {
	if err := s.check(); err != nil {
		return nil, nil, 0, 0, err
	}
	ext := 0
	if n > 0 {
		if s.n < 1 || n-1 > (s.n-1)/stride {
			return nil, nil, 0, 0, fmt.Errorf("shmem: strided transfer of %d elements with stride %d reaches past the %d-element object at offset %d: %w",
				n, stride, s.n, s.off, ErrOutOfBounds)
		}
		ext = (n-1)*stride + 1
	}
	pe, p, off, err := s.span(0, ext, target)
	return pe, p, off, ext, err
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
	// The same-host fast path, as Put's: both handles valid and mapped.
	if p, off := dst.local(0, len(src), target); p != nil {
		if sp, soff := sig.local(0, 1, target); sp != nil {
			putSignalLocal(p, off, asBytes(src), sp, soff, v, op)
			sig.b.pe.leaveFast()
			dst.b.pe.leaveFast()
			return nil
		}
		dst.b.pe.leaveFast()
	}
	spe, sp, soff, err := sig.span(0, 1, target)
	if err != nil {
		return err
	}
	defer spe.leave()
	pe, p, off, err := dst.span(0, len(src), target)
	if err != nil {
		return err
	}
	defer pe.leave()
	if p.mem == nil {
		return p.link.PutSignal(off, asBytes(src), soff, op == SignalAdd, v)
	}
	putSignalLocal(p, off, asBytes(src), sp, soff, v, op)
	return nil
}

// putSignalLocal is PutSignal into a mapped heap: the data, then the
// signal. The signal is an atomic read-modify-write or store: it orders
// the data before it and is a full fence for the sleeper check.
func putSignalLocal(p *peer, off uint64, src []byte, sp *peer, soff, v uint64, op SignalOp) {
	copy(p.mem[off:], src)
	if op == SignalSet {
		heap.AtomicAt(sp.mem, soff, 8, heap.OpSet, v, 0)
	} else {
		heap.AtomicAt(sp.mem, soff, 8, heap.OpFetchAdd, v, 0)
	}
	notifyAtomic(p, off, uint64(len(src)))
	notifyAtomic(sp, soff, 8)
}

// SignalWaitUntil waits until this PE's sig[0] satisfies cmp v and
// returns its value.
func SignalWaitUntil(sig Sym[uint64], cmp Cmp, v uint64) (uint64, error) {
	pe, err := localCheck(sig, cmp)
	if err != nil {
		return 0, err
	}
	defer pe.leave()
	if err := waitUntil(pe, sig, 0, cmp, v); err != nil {
		return 0, err
	}
	return loadLocal(sig, 0), nil
}

// SignalFetch reads this PE's sig[0].
func SignalFetch(sig Sym[uint64]) (uint64, error) {
	pe, err := localCheck(sig, CmpEQ)
	if err != nil {
		return 0, err
	}
	defer pe.leave()
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
// notify) and every atomic is one. Over TCP a link is one ordered stream
// whose frames are applied in order, so Fence costs nothing; only a link
// that stripes large transfers over several connections (GOSHMEM_STREAMS)
// must flush to keep the order.
func (pe *PE) Fence() error {
	if pe == nil {
		return errNilPE("Fence")
	}
	if !pe.hasRemote {
		// Nothing to order and no memory touched: no need to enter.
		if !pe.running() {
			return pe.finalizedErr()
		}
		return pe.alive()
	}
	if err := pe.enter(); err != nil {
		return err
	}
	defer pe.leave()
	if err := pe.alive(); err != nil {
		return err
	}
	for r := range pe.peers {
		if l := pe.peers[r].link; l != nil && l.Outstanding() {
			if err := l.Fence(); err != nil {
				return err
			}
		}
	}
	return nil
}

// Quiet completes every put, non-blocking operation and signal this PE
// issued on the default context: each is visible at its target. Over
// shared memory they already are; over TCP, Quiet flushes every link with
// operations outstanding and waits for the peers' replies.
func (pe *PE) Quiet() error {
	if pe == nil {
		return errNilPE("Quiet")
	}
	if !pe.hasRemote {
		// Nothing to complete and no memory touched: no need to enter.
		if !pe.running() {
			return pe.finalizedErr()
		}
		return pe.alive()
	}
	if err := pe.enter(); err != nil {
		return err
	}
	defer pe.leave()
	if err := pe.alive(); err != nil {
		return err
	}
	return pe.flushAll()
}

// flushAll flushes every remote link with outstanding operations.
func (pe *PE) flushAll() error {
	if !pe.hasRemote {
		return nil
	}
	for r := range pe.peers {
		if l := pe.peers[r].link; l != nil && l.Outstanding() {
			if err := l.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// PEQuiet is Quiet for operations to the given targets only.
func (pe *PE) PEQuiet(targets ...int) error {
	if pe == nil {
		return errNilPE("PEQuiet")
	}
	if err := pe.enter(); err != nil {
		return err
	}
	defer pe.leave()
	if err := pe.alive(); err != nil {
		return err
	}
	for _, t := range targets {
		p, err := pe.peer(t)
		if err != nil {
			return err
		}
		if p.link != nil && p.link.Outstanding() {
			if err := p.link.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// BarrierAll completes this PE's operations (Quiet), then waits until
// every PE has reached the barrier.
func (pe *PE) BarrierAll() error {
	if pe == nil {
		return errNilPE("BarrierAll")
	}
	if err := pe.enter(); err != nil {
		return err
	}
	defer pe.leave()
	if pe.checked() {
		if err := pe.alive(); err != nil {
			return err
		}
		if err := pe.flushAll(); err != nil {
			return err
		}
		return pe.agree(opBarrier, 0, 0) // its two meetings are the barrier
	}
	return pe.barrierAll()
}

// checked reports whether world-synchronising calls are checked for
// agreement (SHMEM_DEBUG, more than one PE).
func (pe *PE) checked() bool { return pe.cfg.Debug && pe.npes > 1 }

// barrierAll is BarrierAll for a caller that has entered the PE.
func (pe *PE) barrierAll() error {
	if err := pe.alive(); err != nil {
		return err
	}
	if err := pe.flushAll(); err != nil {
		return err
	}
	return pe.world.sync()
}

// SyncAll waits until every PE has reached it, without completing
// outstanding operations.
func (pe *PE) SyncAll() error {
	if pe == nil {
		return errNilPE("SyncAll")
	}
	if err := pe.enter(); err != nil {
		return err
	}
	defer pe.leave()
	if err := pe.alive(); err != nil {
		return err
	}
	if pe.checked() {
		return pe.agree(opSync, 0, 0)
	}
	return pe.world.sync()
}
