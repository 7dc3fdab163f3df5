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
// outnumber cores), then sleeps (sleep) in growing slices. Writers wake
// sleepers they can see; the slices bound what a missed wake could cost
// and let the wait notice a lost peer or its timeout.
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
// half a round trip) and a full round trip. Then it sleeps as every wait
// does.
const (
	spinFor     = 4 * time.Microsecond
	goschedFor  = 20 * time.Microsecond
	yieldFor    = 300 * time.Microsecond
	firstSleep  = 100 * time.Microsecond
	longestNap  = 20 * time.Millisecond
	spinBetween = 64               // condition checks between clock reads
	pollFor     = time.Millisecond // a PE with TCP links: polling its sockets, per wait
	// A PE with TCP links naps shorter: a nap's end is also when it
	// checks its links (checkRemoteGone).
	firstParkedNap = 20 * time.Microsecond
	longestParked  = time.Millisecond
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
	if pe.hasRemote {
		// No spin on the condition alone: only a reader of the sockets
		// can make a remote write true, so the wait polls them at once
		// (parkUntil), checking cond after every look.
		return pe.parkUntil(time.Now(), from, off, n, cond, what)
	}
	if pe.noSpin {
		return pe.sleep(time.Now(), off, n, firstSleep, longestNap, cond, what)
	}
	// The first spinBetween checks come before the first clock read: a
	// same-host writer usually lands within them (a 2-PE barrier's whole
	// wait), and such a wait then reads no clock at all.
	for i := 0; i < spinBetween; i++ {
		if cond() {
			return nil
		}
	}
	start := time.Now()
	for !pe.oversub && time.Since(start) <= spinFor {
		for i := 0; i < spinBetween; i++ {
			if cond() {
				return nil
			}
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
	return pe.sleep(start, off, n, firstSleep, longestNap, cond, what)
}

// napsOff reports whether the test hook that turns the naps of waits off
// is set (GOSHMEM_TEST_NONAP=1, testhook.NoNap, read once per sleeping
// wait). A wait then sleeps until a wake or its timeout, and a sleep that
// only the timeout ended fails with ErrTimeout even if the condition
// holds by then: a lost wake-up fails the test instead of showing only
// as latency. The same hook takes the other rescues off the wake paths:
// settle's re-wakes, netmesh's linger timer.
func napsOff() bool { return testhook.NoNap() }

// parkUntil is await for a PE with TCP links. Remote writes are applied
// by the link's reader goroutine in this process, which needs a
// scheduler slot to run: a wait that yields the OS thread can hold the
// slot and stall the very reader it waits for (with one CPU per PE, for
// up to the Go runtime's 10 ms retake period). So this wait polls, then
// sleeps at once; the sleep parks the goroutine (sleep).
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
	// whoever applies a write this wait watches wakes it (Config.Notify).
	// Without Park a token left lingering by another goroutine's Get or
	// atomic keeps its socket quiet, and the write that ends this wait
	// would be read only when netmesh's linger timer frees it (50 µs, up
	// to a millisecond while the process sleeps).
	pe.mesh.Park()
	defer pe.mesh.Unpark()
	return pe.sleep(start, off, n, firstParkedNap, longestParked, cond, what)
}

// sleep is the one sleep of every wait, in every job shape: it announces
// what the wait watches (heap.BeginSleep), then parks the goroutine on
// the PE's wake descriptor (heap.Sleeper, an eventfd in Go's netpoller)
// until cond holds, the PE stops being alive, or the PE's timeout
// passes, in naps from nap doubling up to longest. Whoever changes what
// a wait looks at wakes the PE (heap.Waker: the wake word, then the
// eventfd): a writer to a watched range after its store and fence
// (notify: a caller of this process or of a same-host process, or a
// link's reader applying a remote write), and Finalize (begin) and
// markLost after they change the state.
//
// No wake is lost. The announcement is a fenced read-modify-write of
// the sleep word before the condition's check; a writer stores, fences,
// then reads the sleep word (heap.Watched): of the two, one sees the
// other (Dekker). In the fence mode (PE.chooseFence) the writer does not
// fence, and the sleeper's heap.AsymFence between its announcement and
// its check does that for every writer: a store made before the
// barrier reached the writer's CPU is seen by the check, and a read of
// the sleep word after it sees the announcement (docs/memory-model.md,
// "Sleeping and waking a sleeper"). So if the check missed the store,
// the writer saw the announcement, and its wake increments the wake
// word after the wait read it (seq, before the check):
// heap.Sleeper.Sleep returns at once if the word moved, and otherwise
// the wake's eventfd write comes after the sleep began and ends the
// park. A state change is the same: begin and markLost store, then wake
// unconditionally, and alive is checked after seq is read.
//
// GOSHMEM_TEST_NONAP=1 turns the naps into one deadline for the whole
// timeout, and a sleep that only the deadline ended fails with
// ErrTimeout: a lost wake-up fails the test.
func (pe *PE) sleep(start time.Time, off, n uint64, nap, longest time.Duration, cond func() bool, what func() string) error {
	// Say what we watch, so that only writers to it wake us.
	tok := heap.BeginSleep(pe.mem, off, n)
	defer heap.EndSleep(pe.mem, tok)
	if pe.asymSleep {
		// The writers' half of the fence (chooseFence): every write
		// made before it is seen by the checks below, and every writer
		// that stores after it sees the announcement. Should it fail,
		// the naps still end the sleep.
		_ = heap.AsymFence()
	}
	word := heap.Ptr32(pe.mem, heap.WakeOff)
	grow := !napsOff()
	if !grow {
		nap = pe.cfg.Timeout // the test hook: only a wake ends the sleep
	}
	deadline := time.Now().Add(nap)
	for {
		seq := atomic.LoadUint32(word)
		if cond() {
			return nil
		}
		if err := pe.alive(); err != nil {
			return fmt.Errorf("shmem: PE %d waiting for %s: %w", pe.rank, what(), err)
		}
		if time.Since(start) > pe.cfg.Timeout {
			return fmt.Errorf("shmem: PE %d waited %v for %s: %w", pe.rank, pe.cfg.Timeout, what(), ErrTimeout)
		}
		if h := testhook.Sleep.Load(); h != nil {
			(*h)(pe.rank)
		}
		woke, err := pe.sleeper.Sleep(deadline, word, seq)
		switch {
		case err != nil:
			return fmt.Errorf("shmem: PE %d waiting for %s: %w", pe.rank, what(), err)
		case woke:
			continue // look again, within the same nap
		case !grow:
			return fmt.Errorf("shmem: PE %d waiting for %s: no wake-up within %v (GOSHMEM_TEST_NONAP): %w", pe.rank, what(), pe.cfg.Timeout, ErrTimeout)
		}
		if pe.hasRemote {
			pe.checkRemoteGone()
		}
		nap = min(2*nap, longest)
		deadline = time.Now().Add(nap)
	}
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
