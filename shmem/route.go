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
	old := heap.AtomicAt(p.mem, off, width, op, v, cond)
	if op != heap.OpFetch {
		notifyAtomic(p, off, uint64(width))
	}
	return old, nil
}

// storeWord atomically stores v into the 8-byte runtime word at off of
// target's segment and wakes target's sleepers.
func (pe *PE) storeWord(target int, off uint64, v uint64) error {
	_, err := pe.rawAtomic(target, off, 8, heap.OpSet, v, 0)
	return err
}
