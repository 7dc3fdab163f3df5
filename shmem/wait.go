package shmem

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/goshmem/goshmem/heap"
	"github.com/goshmem/goshmem/internal/testhook"
)

// How a wait spends its time on a PE whose peers are all on this host:
// first a tight spin (the answer is usually a few hundred nanoseconds
// away when the other PE has a core), then
// yields (to other goroutines, then to other processes, for when PEs
// outnumber cores), then sleeps on the PE's futex word in growing slices.
// Writers wake sleepers they can see; the slices bound what a missed wake
// could cost and let the wait notice a lost peer or its timeout.
//
// When this host's PEs outnumber its CPUs, the PE that would end the wait
// is likely not running: spinning only burns its time, so the spin is cut
// to a few checks and the wait yields the CPU at once (to other goroutine
// PEs under Run, to other processes otherwise).
//
// A PE with TCP links goes to parkUntil at once: it polls its sockets
// (netmesh's Mesh.Poll) from the start rather than spinning on the
// condition, which only a reader of the sockets could make true for a
// remote write. A 4 µs spin before the first read of the socket was most
// of the gap between a 2-PE barrier over TCP (one flag each way, about
// half a round trip) and a full round trip.
const (
	spinFor     = 4 * time.Microsecond
	goschedFor  = 20 * time.Microsecond
	yieldFor    = 300 * time.Microsecond
	firstSleep  = 100 * time.Microsecond
	longestNap  = 20 * time.Millisecond
	spinBetween = 64               // condition checks between clock reads
	pollFor     = time.Millisecond // a PE with TCP links: polling its sockets, per wait
)

// await returns nil once cond is true. cond must only read the n bytes
// at off of this PE's segment (writers there wake a sleeping await). It
// fails with ErrTimeout (naming what) after the PE's timeout, and with
// the job's error when a peer is lost or the PE is finalized.
func (pe *PE) await(off, n uint64, cond func() bool, what func() string) error {
	return pe.awaitFrom(-1, off, n, cond, what)
}

// awaitFrom is await for a wait that only PE from's write can end (a
// barrier round): a PE with TCP links polls that PE's link at every look
// and its other links less often (netmesh's PollFrom). from < 0: any PE.
func (pe *PE) awaitFrom(from int, off, n uint64, cond func() bool, what func() string) error {
	if cond() {
		return nil
	}
	start := time.Now()
	if pe.hasRemote {
		// No spin on the condition alone: only a reader of the sockets
		// can make a remote write true, so the wait polls them at once
		// (parkUntil), checking cond after every look.
		return pe.parkUntil(start, from, off, n, cond, what)
	}
	for {
		for i := 0; i < spinBetween; i++ {
			if cond() {
				return nil
			}
		}
		if pe.oversub || time.Since(start) > spinFor {
			break
		}
	}
	for i := 0; ; i++ {
		el := time.Since(start)
		switch {
		case el >= yieldFor:
		case pe.job != nil || (el < goschedFor && !pe.oversub):
			runtime.Gosched() // other goroutines, including Run's other PEs
		default:
			heap.Yield() // other processes
		}
		if el >= yieldFor {
			break
		}
		if cond() {
			return nil
		}
		if i%32 == 31 {
			if err := pe.alive(); err != nil {
				return err
			}
		}
	}
	me := &pe.peers[pe.rank]
	// Say what we watch, so that only writers to it wake us.
	tok := heap.BeginSleep(pe.mem, off, n)
	defer heap.EndSleep(pe.mem, tok)
	nap, grow := firstSleep, !napsOff()
	if !grow {
		nap = pe.cfg.Timeout // the test hook: only a wake ends the sleep
	}
	for {
		seq := atomic.LoadUint32(me.wake)
		if cond() {
			return nil
		}
		// Finalize and markLost change the state, then bump the wake
		// word: checked after reading the word, neither can be missed.
		if err := pe.alive(); err != nil {
			return fmt.Errorf("shmem: PE %d waiting for %s: %w", pe.rank, what(), err)
		}
		heap.FutexWait(me.wake, seq, nap)
		if !grow && time.Since(start) >= pe.cfg.Timeout {
			return fmt.Errorf("shmem: PE %d waiting for %s: no wake-up within %v (GOSHMEM_TEST_NONAP): %w", pe.rank, what(), pe.cfg.Timeout, ErrTimeout)
		}
		if cond() {
			return nil
		}
		if err := pe.alive(); err != nil {
			return fmt.Errorf("shmem: PE %d waiting for %s: %w", pe.rank, what(), err)
		}
		if time.Since(start) > pe.cfg.Timeout {
			return fmt.Errorf("shmem: PE %d waited %v for %s: %w", pe.rank, pe.cfg.Timeout, what(), ErrTimeout)
		}
		if grow {
			nap = min(2*nap, longestNap)
		}
	}
}

// napsOff reports whether the test hook that turns the naps of waits off
// is set (GOSHMEM_TEST_NONAP=1, testhook.NoNap, read once per sleeping
// wait). A wait then sleeps until a wake or its timeout, and a sleep that
// only the timeout ended fails with ErrTimeout even if the condition
// holds by then: a lost wake-up fails the test instead of showing only
// as latency. The same hook takes the other rescues off the wake paths:
// the relay's bound (relayNap), settle's re-wakes, netmesh's linger
// timer.
func napsOff() bool { return testhook.NoNap() }

// parkUntil is await for a PE with TCP links. Remote
// writes are applied by the link's reader goroutine in this process,
// which needs a scheduler slot to run: a wait that yields the OS thread
// or blocks in a raw futex call can hold the slot and stall the very
// reader it waits for (with one CPU per PE, for up to the Go runtime's
// 10 ms retake period). So this wait parks the goroutine instead, on a
// channel that whoever applies a watched write closes (poke): the
// link's reader, a caller or poller of this process (through Notify), a
// same-host writer of this process, Finalize and markLost. Same-host
// writers in other processes wake only futex sleepers; for them the PE
// runs a relay (relay) that turns their wakes into pokes. The timer's
// nap (20 µs growing to 1 ms) is a fallback only; GOSHMEM_TEST_NONAP=1
// turns it into one timer for the whole timeout, so a test hangs on a
// lost wake-up.
func (pe *PE) parkUntil(start time.Time, from int, off, n uint64, cond func() bool, what func() string) error {
	// First the wait polls the links' sockets itself, while netmesh's spin
	// policy says that pays (not when this machine's PEs outnumber its
	// CPUs): the frame that ends the wait is then read and applied by
	// this goroutine, instead of waking a reader goroutine that then
	// wakes this one. Poll checks cond after every look, so writers on
	// this host are seen as promptly. Poll first sends the small puts
	// that wait in send queues for company (Mesh.Push): what this PE
	// waits for may be a peer's answer to one of them.
	if pe.mesh.PollFrom(pollFor, from, cond) {
		return nil
	}
	// From here until the wait ends no read token of the mesh lingers
	// (Mesh.Park): every frame that arrives is read at once, by a caller
	// or poller of this process or by its stream's reader goroutine, and
	// whoever applies a write this wait watches pokes it. Without Park a
	// token left lingering by another goroutine's Get or atomic keeps its
	// socket quiet, and the write that ends this wait would be read only
	// when netmesh's linger timer frees it (50 µs, up to a millisecond
	// while the process sleeps).
	pe.mesh.Park()
	defer pe.mesh.Unpark()
	tok := heap.BeginSleep(pe.mem, off, n)
	defer heap.EndSleep(pe.mem, tok)
	if pe.otherProcesses() {
		pe.parked.Add(1)
		defer pe.unpark()
		if pe.relayOn.CompareAndSwap(false, true) {
			go pe.relay()
		}
	}
	nap, grow := 20*time.Microsecond, !napsOff()
	if !grow {
		nap = pe.cfg.Timeout
	}
	t := time.NewTimer(nap)
	defer t.Stop()
	for {
		ch := *pe.pokeCh.Load()
		if cond() {
			return nil
		}
		if err := pe.alive(); err != nil { // see await
			return fmt.Errorf("shmem: PE %d waiting for %s: %w", pe.rank, what(), err)
		}
		t.Reset(nap)
		select {
		case <-ch:
		case <-t.C:
			if !grow {
				return fmt.Errorf("shmem: PE %d waiting for %s: no wake-up within %v (GOSHMEM_TEST_NONAP): %w", pe.rank, what(), pe.cfg.Timeout, ErrTimeout)
			}
			pe.checkRemoteGone()
		}
		if cond() {
			return nil
		}
		if err := pe.alive(); err != nil {
			return fmt.Errorf("shmem: PE %d waiting for %s: %w", pe.rank, what(), err)
		}
		if time.Since(start) > pe.cfg.Timeout {
			return fmt.Errorf("shmem: PE %d waited %v for %s: %w", pe.rank, pe.cfg.Timeout, what(), ErrTimeout)
		}
		if grow {
			nap = min(2*nap, time.Millisecond)
		}
	}
}

// otherProcesses reports whether some peer's heap is mapped here but the
// peer is not a goroutine of this process: its writes wake this PE only
// through the futex word.
func (pe *PE) otherProcesses() bool {
	for r := range pe.peers {
		if p := &pe.peers[r]; r != pe.rank && p.mem != nil && p.inproc == nil {
			return true
		}
	}
	return false
}

// relay carries the futex wakes of same-host writers in other processes
// to this PE's parked waits (parkUntil), which sleep on the wake channel
// and cannot hear FUTEX_WAKE. It sleeps in FUTEX_WAIT on the PE's wake
// word and pokes the channel whenever the word moved from the value it
// last saw. No wake is lost: a writer stores its data, then bumps the
// word, then wakes; the relay compares with what it saw before, so a
// bump that lands between its poke and its next FUTEX_WAIT makes that
// wait return at once, and a waiter loads the channel before it checks
// its condition, so a poke after the check closes the channel it waits
// on.
//
// It runs while the PE runs or a wait is parked (Finalize's own barrier
// parks while the PE is leaving), and ends when neither holds, so that
// Finalize's settling finds no call inside: a parked wait counts itself
// in pe.parked before it checks pe.relayOn, and the relay clears
// relayOn before it looks at pe.parked again, so either the wait starts
// a relay or the relay sees the wait. The last parked wait of a PE that
// no longer runs wakes the relay on its way out (unpark).
func (pe *PE) relay() {
	me := &pe.peers[pe.rank]
	if !pe.hold() {
		pe.relayOn.Store(false)
		return
	}
	last := atomic.LoadUint32(me.wake)
	pe.leave()
	nap := relayNap
	if napsOff() {
		nap = pe.cfg.Timeout // the test hook: only a wake ends the relay's sleep
	}
	// A writer may have bumped the word after the wait that started this
	// relay checked its condition but before the load above: that bump is
	// in last already and would never be relayed. So poke once now; a wait
	// whose condition does not hold yet just looks again.
	pe.poke()
	for {
		if !pe.hold() {
			pe.relayOn.Store(false)
			return
		}
		if !pe.running() && pe.parked.Load() == 0 {
			pe.leave()
			pe.relayOn.Store(false)
			if pe.parked.Load() == 0 || !pe.relayOn.CompareAndSwap(false, true) {
				return
			}
			continue // a wait parked meanwhile and found the relay still on
		}
		heap.FutexWait(me.wake, last, nap)
		cur := atomic.LoadUint32(me.wake)
		pe.leave()
		if cur != last {
			last = cur
			pe.poke()
		}
	}
}

// relayNap bounds one FUTEX_WAIT of the relay, so that it looks at the
// PE's state now and then even without a wake. It is a rescue only: every
// change the relay must see comes with a wake of the word (a writer's
// bump, Finalize's begin, markLost, the last unpark), so under
// GOSHMEM_TEST_NONAP the relay sleeps for the PE's whole timeout and a
// lost wake leaves the parked wait to fail with ErrTimeout.
const relayNap = 100 * time.Millisecond

// unpark ends a parked wait's count; the last one of a PE that no longer
// runs wakes the relay, so that it ends at once rather than after its nap.
func (pe *PE) unpark() {
	if pe.parked.Add(-1) == 0 && !pe.running() && pe.hold() {
		wake(pe.peers[pe.rank].wake)
		pe.leave()
	}
}

// poke wakes this PE's parked waits (parkUntil): it closes the channel
// they wait on and installs a fresh one.
func (pe *PE) poke() {
	ch := make(chan struct{})
	close(*pe.pokeCh.Swap(&ch))
}

// Cmp is a comparison for the wait and test calls.
type Cmp int

// The comparisons. A wait for (cmp, v) ends when "word cmp v" holds.
const (
	CmpEQ Cmp = iota + 1
	CmpNE
	CmpGT
	CmpGE
	CmpLT
	CmpLE
)

func (c Cmp) String() string {
	switch c {
	case CmpEQ:
		return "=="
	case CmpNE:
		return "!="
	case CmpGT:
		return ">"
	case CmpGE:
		return ">="
	case CmpLT:
		return "<"
	case CmpLE:
		return "<="
	}
	return fmt.Sprintf("Cmp(%d)", int(c))
}

func (c Cmp) valid() bool { return c >= CmpEQ && c <= CmpLE }

func compare[T AtomicElem](a T, c Cmp, b T) bool {
	switch c {
	case CmpEQ:
		return a == b
	case CmpNE:
		return a != b
	case CmpGT:
		return a > b
	case CmpGE:
		return a >= b
	case CmpLT:
		return a < b
	case CmpLE:
		return a <= b
	}
	return false
}

// loadLocal atomically reads element i of s on this PE: a plain atomic
// load of its width (small enough to inline, which the waits' scans of
// many elements rely on).
func loadLocal[T AtomicElem](s Sym[T], i int) T {
	off := s.off + uint64(i)*uint64(sizeOf[T]())
	if sizeOf[T]() == 4 {
		return fromBits[T](uint64(heap.Load32(s.b.pe.mem, off)))
	}
	return fromBits[T](heap.Load64(s.b.pe.mem, off))
}

// localCheck validates a wait or test on this PE's own copy of s and
// enters the PE; on success the caller calls pe.leave when done.
func localCheck[T AtomicElem](s Sym[T], cmp Cmp) (*PE, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if !cmp.valid() {
		return nil, fmt.Errorf("shmem: comparison %v: %w", cmp, ErrInvalid)
	}
	pe := s.b.pe
	if err := pe.enter(); err != nil {
		return nil, err
	}
	return pe, nil
}

func indexCheck(i, n int) error {
	if uint(i) >= uint(n) {
		return fmt.Errorf("shmem: index %d of a %d-element object: %w", i, n, ErrOutOfBounds)
	}
	return nil
}

// WaitUntil blocks until element i of this PE's own copy of s satisfies
// cmp v (shmem_wait_until). It spins briefly, then sleeps; it ends with
// ErrPeerLost or ErrTimeout when the job breaks or the PE's timeout passes.
func WaitUntil[T AtomicElem](s Sym[T], i int, cmp Cmp, v T) error {
	pe, err := localCheck(s, cmp)
	if err != nil {
		return err
	}
	defer pe.leave()
	return waitUntil(pe, s, i, cmp, v)
}

// waitUntil is WaitUntil for a caller that has entered the PE.
func waitUntil[T AtomicElem](pe *PE, s Sym[T], i int, cmp Cmp, v T) error {
	if err := indexCheck(i, s.n); err != nil {
		return err
	}
	sz := uint64(sizeOf[T]())
	return pe.await(s.off+uint64(i)*sz, sz, func() bool { return compare(loadLocal(s, i), cmp, v) },
		func() string { return fmt.Sprintf("element %d at offset %d to be %v %v", i, s.off, cmp, v) })
}

// Test reports whether element i of this PE's own copy of s satisfies
// cmp v, without waiting.
func Test[T AtomicElem](s Sym[T], i int, cmp Cmp, v T) (bool, error) {
	pe, err := localCheck(s, cmp)
	if err != nil {
		return false, err
	}
	defer pe.leave()
	if err := indexCheck(i, s.n); err != nil {
		return false, err
	}
	return compare(loadLocal(s, i), cmp, v), nil
}
