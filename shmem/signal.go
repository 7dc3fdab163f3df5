package shmem

import (
	"fmt"
	"unsafe"

	"github.com/goshmem/goshmem/heap"
)

// Put-with-signal and the signal word: a signal is an 8-byte symmetric
// uint64 that a remote PE updates (sets or adds to) after the data it
// guards, so that a PE waiting on it with SignalWaitUntil sees the data
// once it sees the signal.

// SignalOp says how PutSignal updates the signal word.
type SignalOp int

const (
	SignalSet SignalOp = iota + 1 // store the value
	SignalAdd                     // add the value
)

// PutSignal puts src into dst on target and then updates sig[0] on
// target with v (SignalSet or SignalAdd). A PE that sees the signal sees
// the data. src may be reused when it returns; like a Put, the data and
// the signal are complete at target after the next Quiet of the
// operation's context (over shared memory they already are).
//
// The operation's context is the one dst or sig is bound to (Via), and
// target is a PE number of that context's team; dst and sig bound to two
// different contexts is ErrInvalid.
func PutSignal[T Elem](dst Sym[T], src []T, sig Sym[uint64], v uint64, op SignalOp, target int) error {
	return putSignal(dst, src, sig, v, op, target, false)
}

// PutSignalNBI is PutSignal that may return before src has been read
// (shmem_put_signal_nbi): src must not change until the next Quiet of
// the operation's context, which completes the data and the signal. Over
// shared memory both are complete on return.
func PutSignalNBI[T Elem](dst Sym[T], src []T, sig Sym[uint64], v uint64, op SignalOp, target int) error {
	return putSignal(dst, src, sig, v, op, target, true)
}

func putSignal[T Elem](dst Sym[T], src []T, sig Sym[uint64], v uint64, op SignalOp, target int, nbi bool) error {
	if op != SignalSet && op != SignalAdd {
		return fmt.Errorf("shmem: signal op %d: %w", op, ErrInvalid)
	}
	switch {
	case dst.ctx == nil:
		dst.ctx = sig.ctx
	case sig.ctx == nil:
		sig.ctx = dst.ctx
	case sig.ctx != dst.ctx:
		return fmt.Errorf("shmem: put-with-signal whose data and signal handles are bound to contexts %d and %d: %w", dst.ctx.id, sig.ctx.id, ErrInvalid)
	}
	// The same-host fast path, as Put's: both handles valid and mapped.
	if p, off := dst.local(0, len(src), target); p != nil {
		if sp, soff := sig.local(0, 1, target); sp != nil {
			putSignalLocal(dst.b.pe, p, off, asBytes(src), sp, soff, v, op)
			sig.b.pe.leaveFast()
			dst.b.pe.leaveFast()
			return nil
		}
		dst.b.pe.leaveFast()
	}
	spe, sp, _, soff, err := sig.span(0, 1, target)
	if err != nil {
		return err
	}
	defer spe.leave()
	return putSignalSpan(dst, src, sp, soff, v, op, target, nbi)
}

// putSignalSpan is putSignal past the signal's checks (sp, soff): the
// data's, then the route's operation. A function of its own, so that
// each has one defer and the compiler open-codes both on the TCP path
// (two defers among nine returns in one function it does not).
func putSignalSpan[T Elem](dst Sym[T], src []T, sp *peer, soff, v uint64, op SignalOp, target int, nbi bool) error {
	pe, p, lk, off, err := dst.span(0, len(src), target)
	if err != nil {
		return err
	}
	defer pe.leave()
	if p.mem == nil {
		if nbi {
			return lk.PutSignalNBI(off, asBytes(src), soff, op == SignalAdd, v)
		}
		return lk.PutSignal(off, asBytes(src), soff, op == SignalAdd, v)
	}
	putSignalLocal(pe, p, off, asBytes(src), sp, soff, v, op)
	return nil
}

// putSignalLocal is PutSignal of pe into a mapped heap: the data, then
// the signal. The signal is an atomic read-modify-write or store: it
// orders the data before it and is a full fence for the sleeper check.
// In asym mode (PE.chooseFence) a SignalSet is a release store instead,
// which orders the data before it without the fence's stall.
func putSignalLocal(pe *PE, p *peer, off uint64, src []byte, sp *peer, soff, v uint64, op SignalOp) {
	copyData(p.mem[off:], src)
	switch {
	case op == SignalSet && pe.asym:
		heap.StoreRelease64((*uint64)(unsafe.Pointer(&sp.mem[soff])), v)
	case op == SignalSet:
		heap.AtomicAt(sp.mem, soff, 8, heap.OpSet, v, 0)
	default:
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

// SignalUpdate updates sig[0] on target with v: stores it (SignalSet,
// shmem_signal_set) or adds it (SignalAdd, shmem_signal_add), as the
// signal of a PutSignal without data. It is an atomic on the signal word,
// coherent with PutSignal and the atomics on the same word, and like the
// non-fetching atomics it is complete at target after the next Quiet of
// sig's context (over shared memory, on return).
func SignalUpdate(sig Sym[uint64], v uint64, op SignalOp, target int) error {
	switch op {
	case SignalSet:
		return amoSet(sig, 0, heap.OpSet, v, target)
	case SignalAdd:
		return amoSet(sig, 0, heap.OpFetchAdd, v, target)
	}
	return fmt.Errorf("shmem: signal op %d: %w", op, ErrInvalid)
}
