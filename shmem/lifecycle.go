package shmem

import (
	"fmt"
	"time"

	"github.com/goshmem/goshmem/heap"
)

// A PE's lifecycle is a small state machine in one atomic word, the
// gate: the state in the top two bits, the calls in flight on the PE in
// the rest. Every exported call that touches the PE's memory (its own
// segment or a mapped peer's) enters the gate and leaves it when it is
// done with the memory; Finalize moves the state forward by
// compare-and-swap, so exactly one caller does the work, and memory is
// released (retired by a launched PE, unmapped by Run) only once no call
// is inside.
//
//	running   ──Finalize──▶ draining ──no call inside──▶ leaving ──barrier done, no call inside──▶ closed
//	running   ──the PE ends on an error (Run) or GlobalExit──▶ draining ──▶ closed
//
//	running:  calls enter; waits go on.
//	draining: calls are refused (ErrFinalized); goroutines blocked in
//	          waits and locks are woken and return ErrFinalized.
//	leaving:  calls are still refused; nothing but Finalize itself runs
//	          on the PE, and its own Quiet and barrier may wait.
//	closed:   calls are refused; the memory may be released.
//
// Internal helpers that run on no user call's behalf (the same-host
// liveness watch marking the job broken) hold the gate too: they are
// admitted in every state but closed, so closing waits for them as well.
//
// A call on a team that holds the team's lock for its whole length
// (Team.Sync, BarrierAll, SyncAll, a collective between BeginCollective
// and EndCollective) is admitted by that lock instead of the count: it
// takes the lock, then checks the state with one load (lockCall), and
// settle moves the state only while no team's lock is held (teamsIdle).
// The lock is the call's mark of being inside, so such a call costs no
// atomic read-modify-write beyond the lock's own, where the count would
// add two to every barrier. Either order of a team call's admission
// against begin is safe: if its state load comes before begin's
// compare-and-swap it holds the lock, and settle waits for the lock;
// if after, it sees the PE draining and is refused.
const (
	stRunning  uint64 = 0
	stDraining uint64 = 1 << 62
	stLeaving  uint64 = 2 << 62
	stClosed   uint64 = 3 << 62
	stMask     uint64 = 3 << 62
)

// enter admits a call into the PE, or returns ErrFinalized once
// Finalize has begun. A nil error must be paired with leave. A call
// refused by the first load never touches the count, so calls that keep
// coming after Finalize began cannot keep settle from seeing it reach 0;
// only a call that raced the state change bumps it, briefly.
func (pe *PE) enter() error {
	if pe.gate.Load()&stMask != stRunning {
		return pe.finalizedErr()
	}
	if v := pe.gate.Add(1); v&stMask != stRunning {
		pe.gate.Add(^uint64(0))
		return pe.finalizedErr()
	}
	return nil
}

// tryEnter is enter for the inlinable same-host fast paths: false when
// refused; pair it with leaveFast. Only a PE whose Finalize may unmap
// its peers' mappings counts these calls (pe.counted: under Run). A
// launched PE retires its mappings instead (closeProcess: the addresses
// stay valid, private memory), so a fast call that raced Finalize can
// touch nothing that faults, and it only checks the state: one load
// instead of two atomic read-modify-writes on every put, get and atomic.
func (pe *PE) tryEnter() bool {
	if pe.gate.Load()&stMask != stRunning {
		return false
	}
	if !pe.counted {
		return true
	}
	if pe.gate.Add(1)&stMask != stRunning {
		pe.gate.Add(^uint64(0))
		return false
	}
	return true
}

// leaveFast ends a call admitted by tryEnter.
func (pe *PE) leaveFast() {
	if pe.counted {
		pe.gate.Add(^uint64(0))
	}
}

// leave ends a call admitted by enter, tryEnter or hold.
func (pe *PE) leave() { pe.gate.Add(^uint64(0)) }

// hold admits an internal helper in any state but closed.
func (pe *PE) hold() bool {
	if pe.gate.Load()&stMask == stClosed {
		return false
	}
	if pe.gate.Add(1)&stMask == stClosed {
		pe.gate.Add(^uint64(0))
		return false
	}
	return true
}

// lockCall takes t's lock and admits a call on t (see above): nil with
// the lock held, which the caller releases when done with the memory;
// ErrFinalized, without the lock, once Finalize has begun.
func (t *Team) lockCall() error {
	t.mu.Lock()
	return t.admitLocked()
}

// admitLocked is lockCall's check, with t's lock held: it releases the
// lock when it refuses the call.
func (t *Team) admitLocked() error {
	if t.pe.gate.Load()&stMask != stRunning {
		t.mu.Unlock()
		return t.pe.finalizedErr()
	}
	return nil
}

// teamsIdle reports whether no team call of this PE holds its team's
// lock (lockCall). Called by settle once begin has moved the state, so
// a team call that gets its lock later is refused.
func (pe *PE) teamsIdle() bool {
	pe.teamMu.Lock()
	defer pe.teamMu.Unlock()
	for _, t := range pe.teams {
		if !t.mu.TryLock() {
			return false
		}
		t.mu.Unlock()
	}
	return true
}

// Enter admits a call of a package built on shmem that reads or writes
// this PE's memory, or a mapped peer's, through Local or Ptr views (the
// ring package does): until the matching Exit, Finalize does not release
// that memory, so the views cannot fault. Enter fails with ErrFinalized
// once Finalize has begun; a nil error must be paired with Exit. Like the
// PE's own same-host calls it costs one load for a launched PE and two
// atomic adds under Run. Between Enter and Exit the caller must not wait
// except in shmem calls, which end with ErrFinalized when Finalize
// begins: Finalize waits for every Exit.
func (pe *PE) Enter() error {
	if pe == nil {
		return errNilPE("Enter")
	}
	if !pe.tryEnter() {
		return pe.finalizedErr()
	}
	return nil
}

// Exit ends what Enter admitted.
func (pe *PE) Exit() { pe.leaveFast() }

// state is the lifecycle state (one of the st constants).
func (pe *PE) state() uint64 { return pe.gate.Load() & stMask }

// running reports whether the PE is neither finalizing nor finalized.
func (pe *PE) running() bool { return pe.state() == stRunning }

func (pe *PE) finalizedErr() error {
	return fmt.Errorf("shmem: PE %d is finalized: %w", pe.rank, ErrFinalized)
}

// begin moves the PE from running to draining. Only one caller gets
// true; the others see that Finalize has begun.
func (pe *PE) begin() bool {
	for {
		v := pe.gate.Load()
		if v&stMask != stRunning {
			return false
		}
		if pe.gate.CompareAndSwap(v, v&^stMask|stDraining) {
			break
		}
	}
	// Wake every sleeper of this PE: each sees the new state (a wait
	// checks it after its sleep began and after every wake, so a wake
	// after the state change reaches it: wait.go, sleep).
	pe.wakeSelf()
	return true
}

// settle waits until no call is inside (none counted in the gate, no
// team's lock held), then moves the state from one to next in the same
// compare-and-swap as the count's check. Team calls cannot be admitted
// meanwhile (the state is no longer running), so a team seen idle stays
// so. Blocked calls were woken by begin; those in a blocking remote
// operation end within the PE's timeout. If calls are still inside
// after the timeout, settle moves to closed anyway and returns false
// with the error: the memory must then not be unmapped (release).
func (pe *PE) settle(from, next uint64) (bool, error) {
	deadline := time.Now().Add(pe.cfg.Timeout)
	nap := 20 * time.Microsecond
	for {
		if pe.gate.Load() == from && pe.teamsIdle() && pe.gate.CompareAndSwap(from, next) {
			return true, nil
		}
		if time.Now().After(deadline) {
			for {
				v := pe.gate.Load()
				if pe.gate.CompareAndSwap(v, v&^stMask|stClosed) {
					return false, fmt.Errorf("shmem: PE %d: %d calls still inside the PE (or a team call holding its team) %v after Finalize began: %w",
						pe.rank, v&^stMask, pe.cfg.Timeout, ErrTimeout)
				}
			}
		}
		// The re-wake is a rescue only: a waiter checks the state after
		// its sleep began, so begin's wake reaches every wait. Under
		// GOSHMEM_TEST_NONAP it is left out, so that a wait that missed
		// begin's wake hangs the test.
		//
		// The sleep itself is the protocol: a call leaving the PE signals
		// nobody, so settle polls the gate's count, with naps growing to
		// a millisecond; it wakes no wait and adds only to how long
		// Finalize takes.
		if from == stDraining && !napsOff() {
			pe.wakeSelf()
		}
		time.Sleep(nap)
		nap = min(2*nap, time.Millisecond)
	}
}

// Finalize ends this PE's part in the job (collective): it completes
// outstanding operations, waits for every PE, and releases the heap and
// every link. It is safe against everything else the program does with
// the PE: goroutines blocked on the PE (waits, locks) return
// ErrFinalized; a second or concurrent Finalize returns ErrFinalized at
// once; every later call fails with ErrFinalized; Local, Ptr and
// SameHost return nil and false. The memory is released only once every
// call in flight on the PE has left it (a launched PE retires its
// mappings rather than unmapping them, see closeProcess). Slices from
// Local and Ptr must not be used afterwards.
func (pe *PE) Finalize() error {
	if pe == nil {
		return fmt.Errorf("shmem: Finalize of a nil PE: %w", ErrInvalid)
	}
	if !pe.begin() {
		return fmt.Errorf("shmem: PE %d is already finalized: %w", pe.rank, ErrFinalized)
	}
	clean, err := pe.settle(stDraining, stLeaving)
	if clean {
		// Nothing else runs on the PE now: its own quiet and barrier,
		// unless the job is broken and the barrier cannot complete.
		if err = pe.brokenErr(); err != nil {
			err = fmt.Errorf("shmem: PE %d finalizing: %w", pe.rank, err)
		} else if err = pe.flushEvery(); err == nil {
			if pe.checked() {
				// The agreement's descriptors catch any call that
				// meets this one; its barriers are plain ones, which
				// a peer's finalizing bit would end early.
				err = pe.agree(opFinalize, 0, 0)
			} else {
				pe.announceFinalize()
				err = pe.world.syncFinal()
			}
		}
		// met tells the peers how this PE leaves: with the others
		// (a same-host peer gets the goodbye byte, closeProcess), or
		// without them, which breaks every peer's waits that it is not
		// past (watch; departed under Run).
		pe.met.Store(err == nil)
		var serr error
		if clean, serr = pe.settle(stLeaving, stClosed); err == nil {
			err = serr
		}
		if pe.job != nil {
			pe.job.departed(pe.rank, pe.met.Load())
		}
	}
	if rerr := pe.release(clean); err == nil {
		err = rerr
	}
	return err
}

// announceFinalize sets this PE's bit in every peer's finalizing bitmap
// (heap.FinalizingOff) and wakes the peer's waits, whatever they watch.
// Each bit goes after every store this PE made in its earlier
// collective calls (on one host an atomic after atomics; over TCP on
// the same stream as its barrier flags and floor words), so a PE whose
// wait for this PE's store of a collective call (a barrier flag, a
// floor word) sees the bit and still not the store knows that this PE
// never made that call: it fails with ErrAsymmetric at once
// (waitingFor), where it would have waited out the timeout while this
// PE waits in its final barrier. A bit that cannot be set (the peer is
// gone, or its rank is past heap.FinalizingMax) is left: the barrier
// sees the loss, or the timeout ends the wait.
func (pe *PE) announceFinalize() {
	if pe.rank >= heap.FinalizingMax {
		return
	}
	word, bit := finalizingWord(pe.rank)
	for r := range pe.npes {
		if r == pe.rank {
			continue
		}
		// A mapped peer's waits are woken here; a remote peer's link
		// wakes them when it applies the bit (startMesh's Notify).
		if _, err := pe.rawAtomic(r, word, 8, heap.OpFetchOr, bit, 0); err == nil && pe.peers[r].mem != nil {
			pe.peers[r].wake.Wake()
		}
	}
}

// finalizingWord is the offset of PE r's word in the finalizing bitmap
// and r's bit in it.
func finalizingWord(r int) (uint64, uint64) {
	return heap.FinalizingOff + uint64(8*(r/64)), 1 << (r % 64)
}

// finalizing reports whether PE r has set its bit in this PE's
// finalizing bitmap: it has begun Finalize, and every store it made in
// its earlier collective calls is here.
func (pe *PE) finalizing(r int) bool {
	if r < 0 || r >= heap.FinalizingMax {
		return false
	}
	word, bit := finalizingWord(r)
	return heap.Load64(pe.mem, word)&bit != 0
}

// missedErr is the error of a wait of this PE's for PE r's store in a
// collective call (what) that r will never make: r has begun Finalize
// without it. The job is broken on this PE (markLost): no later
// collective call can pair up, and its peers learn it when it leaves.
func (pe *PE) missedErr(r int, what string) error {
	err := fmt.Errorf("shmem: PE %d in %s: PE %d has begun Finalize without making this call (mismatched collective calls): %w",
		pe.rank, what, r, ErrAsymmetric)
	pe.markLost(err)
	return err
}

// abandon ends the PE without meeting the others: after its function
// failed under Run, or at GlobalExit. Blocked goroutines are woken, and
// the memory is released once they have left.
func (pe *PE) abandon() {
	if !pe.begin() {
		return
	}
	clean, _ := pe.settle(stDraining, stClosed)
	pe.release(clean)
}

// release frees what the closed PE holds. unmap is false when calls may
// still be inside. A launched PE retires its mappings either way (they
// stay valid, private memory; closeProcess); under Run a PE whose calls
// are stuck keeps its segment mapped until the process exits.
func (pe *PE) release(unmap bool) error {
	defer close(pe.done)
	pe.locksMu.Lock()
	pe.locks = nil
	pe.locksMu.Unlock()
	if !unmap {
		pe.leaked.Store(true)
	}
	if pe.job != nil {
		// Under Run the segments stay mapped until every PE has
		// returned: a peer may still be reading this PE's sleep word
		// after its last store of the final barrier.
		return nil
	}
	return pe.closeProcess(true)
}
