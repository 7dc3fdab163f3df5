package shmem

import "github.com/goshmem/goshmem/heap"

// rawAtomic applies op to the width-byte runtime word at off of target's
// segment (reserved words, lock words). It is the one dispatch point for
// the runtime's own remote words.
func (pe *PE) rawAtomic(target int, off uint64, width int, op heap.AtomicOp, v, cond uint64) (uint64, error) {
	p, err := pe.peer(target)
	if err != nil {
		return 0, err
	}
	if p.mem == nil {
		return p.link.Atomic(width, op, off, v, cond)
	}
	old := heap.AtomicAt(p.mem, off, width, op, v, cond)
	if op != heap.OpFetch {
		notifyAtomic(p, off, uint64(width))
	}
	return old, nil
}

// storeWord atomically stores v into the 8-byte runtime word at off of
// target's segment and wakes target's sleepers. Over TCP it does not wait
// for the peer: the store travels in order in the link's stream, and the
// peer only ever waits for it to arrive. So it is written at once and a
// later Quiet does not wait for it (netmesh's Signal): a BarrierAll
// flushes a link only when the program put something on it.
func (pe *PE) storeWord(target int, off uint64, v uint64) error {
	p, err := pe.peer(target)
	if err != nil {
		return err
	}
	if p.mem == nil {
		return p.link.Signal(off, v)
	}
	heap.AtomicAt(p.mem, off, 8, heap.OpSet, v, 0)
	notifyAtomic(p, off, 8)
	return nil
}

// remoteLink is the remote route to a PE on another host: a netmesh link.
// Every method is safe for concurrent use.
type remoteLink interface {
	Put(off uint64, src []byte) error
	PutNBI(off uint64, src []byte) error
	PutBlocks(off uint64, dstStride int, src []byte, srcStride, width, n int) error
	Get(dst []byte, off uint64) error
	GetNBI(dst []byte, off uint64) error
	Atomic(width int, op heap.AtomicOp, off, v, cond uint64) (uint64, error)
	AtomicNBI(width int, op heap.AtomicOp, off, v, cond uint64, dst *uint64) error
	PutSignal(off uint64, src []byte, sigOff uint64, add bool, v uint64) error
	PutSignalNBI(off uint64, src []byte, sigOff uint64, add bool, v uint64) error
	Signal(off, v uint64) error
	Flush() error
	Fence() error
	Outstanding() bool
	Err() error
}
