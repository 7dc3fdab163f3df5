package shmem

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/goshmem/goshmem/heap"
)

// Locks are MCS queue locks over the symmetric lock word, so waiting PEs
// each watch a word of their own heap and the lock passes in FIFO order.
// The 8-byte word is used as two 4-byte halves:
//
//	bytes 0..3 (low half), meaningful on the lock's home PE only: the
//	        queue's tail, as PE number + 1 (0: the lock is free)
//	bytes 4..7 (high half), on every PE: this PE's queue node.
//	        bits 0..30: the successor, as PE number + 1 (0: none yet)
//	        bit 31:     granted, set by the predecessor on release
//
// The home PE is (offset/8) mod NPEs, the same on every PE, which spreads
// many locks over the job (for an object of TeamMalloc, member
// (offset/8) mod its team's size). A zero word is a free lock.
const lockGranted = 1 << 31

// lockState orders this PE's goroutines on one lock word: the MCS node
// is per PE, so only one goroutine of a PE may be queued at a time.
//
// A SetLock whose wait ends with ErrTimeout cannot simply leave: its
// node is linked into the queue and its predecessor will grant it. It
// hands the node to a goroutine of the PE (finishAbandoned) that waits
// for the grant and passes the lock on at once, so the PEs queued behind
// it still get the lock, and a later SetLock of this PE queues afresh
// once the node is free. ClearLock's wait for a successor to link is
// handed over the same way.
type lockState struct {
	held   chan struct{} // capacity 1: full while a goroutine of this PE holds or queues for the lock, or an abandoned node is being finished
	holder atomic.Int32  // lockHeld while the program holds the lock
	off    uint64        // the lock word: a goroutine waiting for held sleeps on it (takeLocal)
	frees  atomic.Uint64 // how many times held was freed: what takeLocal's wait watches
}

const lockHeld = 1

func (pe *PE) lockFor(off uint64) *lockState {
	pe.locksMu.Lock()
	defer pe.locksMu.Unlock()
	if pe.locks == nil {
		pe.locks = make(map[uint64]*lockState)
	}
	l := pe.locks[off]
	if l == nil {
		l = &lockState{held: make(chan struct{}, 1), off: off}
		pe.locks[off] = l
	}
	return l
}

// dropLocks forgets the lock state of words in [off, off+size): the
// object holding them was freed.
func (pe *PE) dropLocks(off, size uint64) {
	pe.locksMu.Lock()
	defer pe.locksMu.Unlock()
	for o := range pe.locks {
		if o >= off && o < off+size {
			delete(pe.locks, o)
		}
	}
}

func lockCheck(l Sym[int64]) (*PE, uint64, int, error) {
	if err := l.check(); err != nil {
		return nil, 0, 0, err
	}
	if l.n < 1 {
		return nil, 0, 0, fmt.Errorf("shmem: lock word of %d elements: %w", l.n, ErrOutOfBounds)
	}
	pe := l.b.pe
	if err := pe.enter(); err != nil {
		return nil, 0, 0, err
	}
	if err := pe.alive(); err != nil {
		pe.leave()
		return nil, 0, 0, err
	}
	if t := l.b.team; t != nil {
		// A team object's lock lives on its team's members.
		return pe, l.off, t.members[(l.off/8)%uint64(len(t.members))], nil
	}
	return pe, l.off, int((l.off / 8) % uint64(pe.npes)), nil
}

// SetLock acquires the lock l (a symmetric word, zero when free),
// waiting in FIFO order behind PEs that asked first. When it fails (the
// PE's timeout passed), the lock stays usable: the PEs behind this one
// still get it, and a later SetLock by this PE succeeds once the holder
// clears it.
func SetLock(l Sym[int64]) error {
	pe, off, home, err := lockCheck(l)
	if err != nil {
		return err
	}
	defer pe.leave()
	ls := pe.lockFor(off)
	if err := pe.takeLocal(ls, off); err != nil {
		return err
	}
	q := pe.queue(ls, off, home)
	prev, err := q.acquire(false)
	if err == nil {
		ls.holder.Store(lockHeld)
		return nil
	}
	q.abandon(prev, err)
	return err
}

// TestLock acquires l if it is free and reports whether it did.
func TestLock(l Sym[int64]) (bool, error) {
	pe, off, home, err := lockCheck(l)
	if err != nil {
		return false, err
	}
	defer pe.leave()
	ls := pe.lockFor(off)
	select {
	case ls.held <- struct{}{}:
	default:
		return false, nil // another goroutine of this PE has it
	}
	if _, err := pe.queue(ls, off, home).acquire(true); err != nil {
		pe.freeLocal(ls)
		if err == errLockBusy {
			return false, nil
		}
		return false, err
	}
	ls.holder.Store(lockHeld)
	return true, nil
}

var errLockBusy = fmt.Errorf("shmem: lock busy")

// takeLocal queues this goroutine behind the PE's other goroutines on the
// lock, with the same bounds as any wait: the PE's timeout and the job's
// health. It waits as every wait does (await, on the lock word), for
// frees to move: the goroutine that frees held wakes it (freeLocal), and
// so do Finalize and a lost peer, with no timer on the way. The wait's
// condition only reads frees (a wait may evaluate it and drop the
// answer), and the channel is tried again after every wake.
func (pe *PE) takeLocal(ls *lockState, off uint64) error {
	start := time.Now()
	for {
		seen := ls.frees.Load()
		select {
		case ls.held <- struct{}{}:
			return nil
		default:
		}
		if time.Since(start) > pe.cfg.Timeout {
			return fmt.Errorf("shmem: PE %d waited %v for another of its goroutines to release the lock at offset %d: %w",
				pe.rank, pe.cfg.Timeout, off, ErrTimeout)
		}
		err := pe.await(off, 8, func() bool { return ls.frees.Load() != seen }, func() string {
			return fmt.Sprintf("another of its goroutines to release the lock at offset %d", off)
		})
		if err != nil {
			return err
		}
	}
}

// freeLocal frees held for this PE's next goroutine and wakes it if it
// sleeps in takeLocal. Dekker, as every wake (wait.go, sleep): the
// sleeper announces its watch of the lock word, then loads frees; this
// adds to frees (an atomic read-modify-write, a full fence), then reads
// the announcement, so one of the two sees the other.
func (pe *PE) freeLocal(ls *lockState) {
	<-ls.held
	ls.frees.Add(1)
	notifyAtomic(&pe.peers[pe.rank], ls.off, 8)
}

// ClearLock completes this PE's outstanding operations (Quiet), so the
// next holder sees what was written under the lock, then releases l to
// the next PE in line. The lock is released even when the Quiet fails;
// the error then says that writes made under the lock may not be
// complete.
func ClearLock(l Sym[int64]) error {
	pe, off, home, err := lockCheck(l)
	if err != nil {
		return err
	}
	defer pe.leave()
	ls := pe.lockFor(off)
	if !ls.holder.CompareAndSwap(lockHeld, 0) {
		return fmt.Errorf("shmem: ClearLock of the lock at offset %d, which PE %d does not hold: %w", off, pe.rank, ErrInvalid)
	}
	qerr := pe.flushAll()
	if qerr != nil {
		qerr = fmt.Errorf("shmem: PE %d releasing the lock at offset %d: completing the writes made under it: %w", pe.rank, off, qerr)
	}
	if err := pe.queue(ls, off, home).release(); err != nil {
		return err
	}
	return qerr
}

// lockPort is what the queue's protocol (mcsQueue) needs from the
// runtime: the PE (peLockPort), or the explorer in explore_lock_test.go,
// which drives the same protocol over a model of the words in every
// interleaving.
type lockPort interface {
	// atomic applies op to the 4-byte word at off of PE target.
	atomic(target int, off uint64, op heap.AtomicOp, v, cond uint64) (uint64, error)
	// await waits until cond, which reads this PE's 4-byte word at off;
	// it fails as the PE's waits do (ErrTimeout, ErrPeerLost, ...).
	await(off uint64, cond func() bool, what func() string) error
	// node loads this PE's queue node at off.
	node(off uint64) uint32
	// unheld frees the lock for this PE's next goroutine (ls.held).
	unheld()
	// spawn runs f in a goroutine of the PE and reports whether it
	// could (not once the PE is closed).
	spawn(f func()) bool
}

// peLockPort is the runtime's lockPort.
type peLockPort struct {
	pe *PE
	ls *lockState
}

func (p peLockPort) atomic(target int, off uint64, op heap.AtomicOp, v, cond uint64) (uint64, error) {
	return p.pe.rawAtomic(target, off, 4, op, v, cond)
}

func (p peLockPort) await(off uint64, cond func() bool, what func() string) error {
	return p.pe.await(off, 4, cond, what)
}

func (p peLockPort) node(off uint64) uint32 { return atomic.LoadUint32(heap.Ptr32(p.pe.mem, off)) }
func (p peLockPort) unheld()                { p.pe.freeLocal(p.ls) }

func (p peLockPort) spawn(f func()) bool {
	if !p.pe.hold() {
		return false
	}
	go func() {
		defer p.pe.leave()
		f()
	}()
	return true
}

// mcsQueue is this PE's view of one lock's queue: the protocol steps,
// over a lockPort.
type mcsQueue struct {
	port lockPort
	me   uint64 // this PE's number + 1, as the queue names it
	npes int
	off  uint64 // the lock word
	home int    // the PE whose low half is the queue's tail
}

func (pe *PE) queue(ls *lockState, off uint64, home int) mcsQueue {
	return mcsQueue{port: peLockPort{pe, ls}, me: uint64(pe.rank + 1), npes: pe.npes, off: off, home: home}
}

// acquire joins the lock's queue and waits for the lock. A non-zero prev
// with an error means this PE's node is linked behind PE prev-1.
func (q mcsQueue) acquire(try bool) (prev uint64, err error) {
	// Reset the node before joining the queue: nobody else touches it now
	// (the last successor was granted before our last release ended).
	if _, err := q.port.atomic(int(q.me-1), q.off+4, heap.OpSet, 0, 0); err != nil {
		return 0, err
	}
	if try {
		old, err := q.port.atomic(q.home, q.off, heap.OpCSwap, q.me, 0)
		if err != nil {
			return 0, err
		}
		if old != 0 {
			return 0, errLockBusy
		}
		return 0, nil
	}
	prev, err = q.port.atomic(q.home, q.off, heap.OpSwap, q.me, 0)
	if err != nil {
		return 0, err
	}
	if prev == 0 {
		return 0, nil
	}
	if prev > uint64(q.npes) {
		return 0, fmt.Errorf("shmem: lock word at offset %d holds tail %d, not a PE of %d (not a lock, or corrupted): %w", q.off, prev, q.npes, ErrProtocol)
	}
	if _, err := q.port.atomic(int(prev-1), q.off+4, heap.OpFetchOr, q.me, 0); err != nil {
		return 0, err
	}
	return prev, q.awaitGrant(prev)
}

// abandon ends a SetLock whose acquire failed with err. Linked behind PE
// prev-1 after a timeout, the node will be granted: a goroutine of the
// PE (finishAbandoned) waits for that and passes the lock on, and keeps
// the lock's held mark until then. Otherwise the mark is freed now.
func (q mcsQueue) abandon(prev uint64, err error) {
	if prev != 0 && errors.Is(err, ErrTimeout) && q.port.spawn(func() { q.finishAbandoned(prev) }) {
		return
	}
	q.port.unheld()
}

func (q mcsQueue) awaitGrant(prev uint64) error {
	return q.port.await(q.off+4, func() bool { return q.port.node(q.off+4)&lockGranted != 0 },
		func() string { return fmt.Sprintf("the lock at offset %d from PE %d", q.off, prev-1) })
}

// finishAbandoned completes a SetLock that gave up while linked in the
// queue: it waits for the grant however long it takes and releases the
// lock at once. It ends early only when the PE finalizes or the job
// breaks. The held mark stays until the node is free.
func (q mcsQueue) finishAbandoned(prev uint64) {
	for {
		err := q.awaitGrant(prev)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrTimeout) {
			q.port.unheld()
			return
		}
	}
	q.release()
}

// release passes the lock this PE holds to the next PE in line, or frees
// it, and then frees the held mark for this PE's next goroutine. If the
// wait for a successor to link ends with ErrTimeout, the rest of the
// release continues in a goroutine of the PE and the error is returned.
func (q mcsQueue) release() error {
	next := uint64(q.port.node(q.off+4) &^ lockGranted)
	if next == 0 {
		old, err := q.port.atomic(q.home, q.off, heap.OpCSwap, 0, q.me)
		if err != nil {
			q.port.unheld()
			return err
		}
		if old == q.me {
			q.port.unheld()
			return nil
		}
		// A successor swapped itself in and is about to link.
		if err := q.awaitLink(); err != nil {
			if errors.Is(err, ErrTimeout) && q.port.spawn(q.finishRelease) {
				return err
			}
			q.port.unheld()
			return err
		}
	}
	return q.grantNext()
}

// finishRelease completes a release whose wait for the successor to link
// timed out: it waits however long it takes, then grants.
func (q mcsQueue) finishRelease() {
	werr := ErrTimeout
	for errors.Is(werr, ErrTimeout) {
		werr = q.awaitLink()
	}
	if werr != nil {
		q.port.unheld()
		return
	}
	q.grantNext()
}

func (q mcsQueue) awaitLink() error {
	return q.port.await(q.off+4, func() bool { return q.port.node(q.off+4)&^lockGranted != 0 },
		func() string { return fmt.Sprintf("the next PE to link behind the lock at offset %d", q.off) })
}

// grantNext grants the lock to the successor linked on this PE's node.
func (q mcsQueue) grantNext() error {
	defer q.port.unheld()
	next := uint64(q.port.node(q.off+4) &^ lockGranted)
	if next == 0 || next > uint64(q.npes) {
		return fmt.Errorf("shmem: lock node at offset %d names successor %d, not a PE of %d: %w", q.off, next, q.npes, ErrProtocol)
	}
	_, err := q.port.atomic(int(next-1), q.off+4, heap.OpFetchOr, lockGranted, 0)
	return err
}
