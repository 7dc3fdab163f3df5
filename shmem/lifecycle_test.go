package shmem_test

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/testhook"
	"github.com/goshmem/goshmem/shmem"
)

// Finalize while other goroutines of the same PE are blocked on it: in a
// wait, a signal wait, a lock behind another PE and a lock behind another
// goroutine of the same PE. Every one of them returns ErrFinalized soon
// after Finalize, nothing faults (as processes a fault would kill the
// job), and afterwards Local, Ptr, SameHost and Accessible say the memory
// is gone.
var _ = register("finalize-wakes-waiters", func(pe *shmem.PE) error {
	me := pe.MyPE()
	flag, err := shmem.Malloc[int64](pe, 2)
	if err != nil {
		return err
	}
	sig, err := shmem.Malloc[uint64](pe, 1)
	if err != nil {
		return err
	}
	lock, err := shmem.Malloc[int64](pe, 1)
	if err != nil {
		return err
	}
	// PE 0 holds the lock through Finalize: the others' SetLock queue
	// behind it, and PE 0's second goroutine queues behind the first.
	if me == 0 {
		if err := shmem.SetLock(lock); err != nil {
			return err
		}
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	waiters := []func() error{
		func() error { return shmem.WaitUntil(flag, 0, shmem.CmpEQ, 1) },
		func() error { _, err := shmem.WaitUntilAny(flag, nil, shmem.CmpEQ, 7); return err },
		func() error { _, err := shmem.SignalWaitUntil(sig, shmem.CmpEQ, 1); return err },
		func() error { return shmem.SetLock(lock) },
	}
	errc := make(chan error, len(waiters))
	for _, w := range waiters {
		go func() { errc <- w() }()
	}
	// Wait until every waiter has entered its call (or already failed).
	if err := waitInFlight(pe, len(waiters)); err != nil {
		return err
	}
	if err := pe.Finalize(); err != nil {
		return fmt.Errorf("Finalize with blocked goroutines: %w", err)
	}
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	for range waiters {
		select {
		case err := <-errc:
			if !errors.Is(err, shmem.ErrFinalized) {
				return fmt.Errorf("a goroutine blocked on the PE ended with %v, want ErrFinalized", err)
			}
		case <-timer.C:
			return fmt.Errorf("a goroutine blocked on the PE is still blocked 5 s after Finalize")
		}
	}
	if flag.Local() != nil || shmem.Ptr(flag, me) != nil {
		return fmt.Errorf("Local or Ptr hand out a view after Finalize")
	}
	if pe.SameHost(me) || pe.Accessible(me) {
		return fmt.Errorf("SameHost or Accessible true after Finalize")
	}
	if err := pe.Finalize(); !errors.Is(err, shmem.ErrFinalized) {
		return fmt.Errorf("second Finalize: %v, want ErrFinalized", err)
	}
	if err := shmem.P(flag, 0, 1, me); !errors.Is(err, shmem.ErrFinalized) {
		return fmt.Errorf("P after Finalize: %v, want ErrFinalized", err)
	}
	return nil
})

func TestFinalizeWakesWaiters(t *testing.T) { each(t, "finalize-wakes-waiters", 1, 3) }

// Concurrent Finalize calls: one does the work, the others return at
// once with nil or ErrFinalized, and the job ends cleanly.
var _ = register("finalize-concurrently", func(pe *shmem.PE) error {
	x, err := shmem.Malloc[int64](pe, 1)
	if err != nil {
		return err
	}
	if err := shmem.AtomicAdd(x, 0, 1, 0); err != nil {
		return err
	}
	const k = 4
	errc := make(chan error, k)
	var start sync.WaitGroup
	start.Add(1)
	for range k {
		go func() {
			start.Wait()
			errc <- pe.Finalize()
		}()
	}
	start.Done()
	ok := 0
	for range k {
		err := <-errc
		switch {
		case err == nil:
			ok++
		case errors.Is(err, shmem.ErrFinalized):
		default:
			return fmt.Errorf("concurrent Finalize: %v", err)
		}
	}
	if ok == 0 {
		return fmt.Errorf("no Finalize of %d concurrent ones returned nil", k)
	}
	if x.Local() != nil {
		return fmt.Errorf("Local after Finalize is not nil")
	}
	return nil
})

func TestFinalizeConcurrently(t *testing.T) { each(t, "finalize-concurrently", 1, 3) }

// waitInFlight returns once at least n calls are inside pe, or an error
// after 10 s.
func waitInFlight(pe *shmem.PE, n int) error {
	deadline := time.Now().Add(10 * time.Second)
	for shmem.InFlight(pe) < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d goroutines entered their call in 10 s", shmem.InFlight(pe), n)
		}
		runtime.Gosched()
	}
	return nil
}

// eachTimeout is each with the PEs' timeout set to d, for scenarios
// that need a wait to time out.
func eachTimeout(t *testing.T, name string, d time.Duration, n int) {
	eachWith(t, name, n, []shmem.Option{shmem.WithTimeout(d)}, "GOSHMEM_TIMEOUT="+d.String())
}

// A SetLock that times out leaves the lock usable: the PE queued behind
// the one that gave up gets the lock when the holder clears it, and the
// PE that gave up gets it on its next SetLock. Three PEs: PE 0 holds the
// lock, PE 1's SetLock times out behind it, PE 2 queues behind PE 1's
// abandoned place, then PE 0 clears.
var _ = register("lock-after-timeout", func(pe *shmem.PE) error {
	me, np := pe.MyPE(), pe.NPEs()
	if np != 3 || pe.Info().Timeout > 10*time.Second {
		return fmt.Errorf("lock-after-timeout wants 3 PEs and a short timeout, has %d PEs and %v", np, pe.Info().Timeout)
	}
	lock, err := shmem.Malloc[int64](pe, 1)
	if err != nil {
		return err
	}
	// step[0] is 1 on PE 2 once PE 1 has timed out, and 2 on PE 1 once
	// PE 2 has had the lock.
	step, err := shmem.Malloc[int64](pe, 1)
	if err != nil {
		return err
	}
	count, err := shmem.Malloc[int64](pe, 1)
	if err != nil {
		return err
	}
	if me == 0 {
		if err := shmem.SetLock(lock); err != nil {
			return err
		}
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	// The lock word's home PE keeps the queue's tail (PE number + 1) in
	// its low half (shmem/lock.go).
	home := int(lock.Offset()/8) % np
	tail := func() (int64, error) {
		v, err := shmem.AtomicFetch(lock, 0, home)
		return v & 0xFFFFFFFF, err
	}
	switch me {
	case 0:
		// Clear once PE 2 is queued behind PE 1's abandoned place.
		deadline := time.Now().Add(20 * time.Second)
		for {
			v, err := tail()
			if err != nil {
				return err
			}
			if v == 3 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("PE 2 never queued (tail %d)", v)
			}
			runtime.Gosched()
		}
		if err := shmem.ClearLock(lock); err != nil {
			return err
		}
	case 1:
		err := shmem.SetLock(lock)
		if !errors.Is(err, shmem.ErrTimeout) {
			return fmt.Errorf("SetLock behind a holder: %v, want ErrTimeout", err)
		}
		if err := shmem.ClearLock(lock); !errors.Is(err, shmem.ErrInvalid) {
			return fmt.Errorf("ClearLock after a failed SetLock: %v, want ErrInvalid", err)
		}
		if err := shmem.AtomicSet(step, 0, 1, 2); err != nil {
			return err
		}
		if err := pe.Quiet(); err != nil {
			return err
		}
		// Queue again only once PE 2 has had the lock, so that this PE's
		// new SetLock cannot stand in for the abandoned one.
		if err := shmem.WaitUntil(step, 0, shmem.CmpEQ, 2); err != nil {
			return err
		}
	case 2:
		// PE 1 needs a whole timeout to give up: wait through a few.
		for try := 0; ; try++ {
			err := shmem.WaitUntil(step, 0, shmem.CmpEQ, 1)
			if err == nil {
				break
			}
			if !errors.Is(err, shmem.ErrTimeout) || try == 5 {
				return err
			}
		}
		if err := shmem.SetLock(lock); err != nil {
			return fmt.Errorf("SetLock behind a PE whose SetLock timed out: %w", err)
		}
		if err := shmem.AtomicAdd(count, 0, 1, 0); err != nil {
			return err
		}
		if err := shmem.ClearLock(lock); err != nil {
			return err
		}
		if err := shmem.AtomicSet(step, 0, 2, 1); err != nil {
			return err
		}
	}
	// Every PE, the one that gave up included, takes the lock again.
	if err := shmem.SetLock(lock); err != nil {
		return fmt.Errorf("SetLock after the lock went round: %w", err)
	}
	if err := shmem.AtomicAdd(count, 0, 1, 0); err != nil {
		return err
	}
	if err := shmem.ClearLock(lock); err != nil {
		return err
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	if v, err := shmem.AtomicFetch(count, 0, 0); err != nil || v != 4 {
		return fmt.Errorf("count %d (%v), want 4", v, err)
	}
	return nil
})

func TestLockAfterTimeout(t *testing.T) { eachTimeout(t, "lock-after-timeout", 2*time.Second, 3) }

// A PE that finalizes while the others make another world-synchronising
// call fails fast on every side, with ErrAsymmetric where the mismatch
// is seen and ErrPeerLost where a PE that saw it leaves first, never by
// waiting out the timeout:
//
//   - against a barrier: Finalize's barrier is marked, so both sides see
//     the mismatch at once. Until the mark, the others' barrier returned
//     nil (PE 0's final barrier let it out), and their Finalize then
//     waited the whole timeout for a same-host PE 0 whose goodbye came
//     after they had begun it.
//   - against a collective allocation or another team's barrier: PE 0
//     sets its bit in every peer's finalizing bitmap (announceFinalize),
//     so a PE waiting in the floor exchange or the team barrier for PE
//     0's word fails at once, and the others learn it from its
//     departure. Until then every PE waited the timeout.
//
// On 2, 3 and 4 PEs every barrier algorithm runs: flat (one host),
// dissemination (2 PEs over TCP) and gather (3 or 4 over TCP).
func finalizeAgainst(extra func(pe *shmem.PE) error) scenarioFunc {
	return func(pe *shmem.PE) error {
		mismatched := func(err error) bool {
			return (errors.Is(err, shmem.ErrAsymmetric) || errors.Is(err, shmem.ErrPeerLost)) && !errors.Is(err, shmem.ErrTimeout)
		}
		// Every PE's Init is over before the mismatch: a PE that fails
		// and leaves while another is still connecting its links fails
		// that Init (the peer is lost), which this test is not about.
		// The fastest PEs may leave this meeting, and meet the mismatch,
		// before a slow one has taken its release: that one's meeting
		// then fails as its next call would (the job is broken), and
		// its Finalize must still fail at once.
		if err := pe.BarrierAll(); err != nil {
			if !mismatched(err) {
				return fmt.Errorf("PE %d's first BarrierAll: %w", pe.MyPE(), err)
			}
			if err := pe.Finalize(); !mismatched(err) {
				return fmt.Errorf("Finalize of a broken job: %v, want ErrAsymmetric or ErrPeerLost", err)
			}
			return nil
		}
		if pe.MyPE() == 0 {
			if err := pe.Finalize(); !mismatched(err) {
				return fmt.Errorf("PE 0's Finalize against the others' call: %v, want ErrAsymmetric or ErrPeerLost", err)
			}
			return nil
		}
		start := time.Now()
		if err := extra(pe); !mismatched(err) {
			return fmt.Errorf("PE %d's call against PE 0's Finalize: %v, want ErrAsymmetric or ErrPeerLost", pe.MyPE(), err)
		}
		if el := time.Since(start); el > 2*time.Second {
			return fmt.Errorf("PE %d noticed the mismatch after %v", pe.MyPE(), el)
		}
		if err := pe.Quiet(); err == nil {
			return fmt.Errorf("Quiet after the mismatch: nil, want the job's error")
		}
		if err := pe.Finalize(); !mismatched(err) {
			return fmt.Errorf("Finalize of a broken job: %v, want ErrAsymmetric or ErrPeerLost", err)
		}
		return nil
	}
}

var _ = register("finalize-against-barrier", finalizeAgainst(func(pe *shmem.PE) error { return pe.BarrierAll() }))

var _ = register("finalize-against-malloc", finalizeAgainst(func(pe *shmem.PE) error {
	_, err := shmem.Malloc[int64](pe, 8)
	return err
}))

// Every PE, PE 0 included, makes the team (a copy of the world) first.
var _ = register("finalize-against-team-sync", func(pe *shmem.PE) error {
	t, err := pe.World().Split(0, 1, pe.NPEs())
	if err != nil {
		return err
	}
	return finalizeAgainst(func(*shmem.PE) error { return t.Sync() })(pe)
})

func TestFinalizeAgainst(t *testing.T) {
	for _, name := range []string{"finalize-against-barrier", "finalize-against-malloc", "finalize-against-team-sync"} {
		t.Run(name, func(t *testing.T) {
			for _, n := range []int{2, 3, 4} {
				eachWith(t, name, n, []shmem.Option{shmem.WithTimeout(20 * time.Second)}, "GOSHMEM_TIMEOUT=20s")
			}
		})
	}
}

// A program that keeps Local and Ptr slices past Finalize, against the
// docs, does not fault when it uses them: a launched PE retires its
// mappings (private memory at the same addresses) instead of unmapping
// them, and under Run they stay mapped until Run returns.
var _ = register("slices-after-finalize", func(pe *shmem.PE) error {
	s, err := shmem.Malloc[int64](pe, 4)
	if err != nil {
		return err
	}
	l := s.Local()
	var peers [][]int64
	for t := range pe.NPEs() {
		if p := shmem.Ptr(s, t); p != nil {
			peers = append(peers, p)
		}
	}
	if err := pe.Finalize(); err != nil {
		return err
	}
	l[0] = 5
	sum := l[0] + l[3]
	for _, p := range peers {
		p[1] = 6
		sum += p[2]
	}
	_ = sum
	return nil
})

func TestSlicesAfterFinalize(t *testing.T) { each(t, "slices-after-finalize", 1, 3) }

// A ClearLock whose wait for its successor to link times out still
// hands the lock on once the successor links. PE 1 plays a successor
// that swapped itself into the queue's tail but links only after PE 0's
// ClearLock gave up, by writing the lock words as the layout in
// shmem/lock.go says: tail (PE number + 1) in the low half of the home
// PE's word, a node (successor + 1, granted bit 31) in the high half of
// each PE's word.
var _ = register("clearlock-successor-late", func(pe *shmem.PE) error {
	me, np := pe.MyPE(), pe.NPEs()
	if np != 2 || pe.Info().Timeout > 10*time.Second {
		return fmt.Errorf("clearlock-successor-late wants 2 PEs and a short timeout")
	}
	lock, err := shmem.Malloc[int64](pe, 1)
	if err != nil {
		return err
	}
	gaveUp, err := shmem.Malloc[int64](pe, 1) // 1 on PE 1 once PE 0's ClearLock gave up
	if err != nil {
		return err
	}
	home := int(lock.Offset()/8) % np
	if me == 0 {
		if err := shmem.SetLock(lock); err != nil {
			return err
		}
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	if me == 1 {
		// Swap PE 1 in as the tail, without linking behind PE 0.
		for {
			old, err := shmem.AtomicFetch(lock, 0, home)
			if err != nil {
				return err
			}
			if got, err := shmem.AtomicCompareSwap(lock, 0, old, old&^0xFFFFFFFF|2, home); err != nil {
				return err
			} else if got == old {
				break
			}
		}
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	if me == 0 {
		if err := shmem.ClearLock(lock); !errors.Is(err, shmem.ErrTimeout) {
			return fmt.Errorf("ClearLock with a successor that never links: %v, want ErrTimeout", err)
		}
		if err := shmem.AtomicSet(gaveUp, 0, 1, 1); err != nil {
			return err
		}
	}
	if me == 1 {
		// PE 0 needs a whole timeout to give up: wait through a few.
		for try := 0; ; try++ {
			err := shmem.WaitUntil(gaveUp, 0, shmem.CmpEQ, 1)
			if err == nil {
				break
			}
			if !errors.Is(err, shmem.ErrTimeout) || try == 5 {
				return err
			}
		}
		// Link now; PE 0 must grant PE 1's node.
		if err := shmem.AtomicOr(lock, 0, int64(2)<<32, 0); err != nil {
			return err
		}
		if err := pe.Quiet(); err != nil {
			return err
		}
		if err := shmem.WaitUntil(lock, 0, shmem.CmpLT, 0); err != nil { // bit 63: granted
			return fmt.Errorf("the late successor was never granted the lock: %w", err)
		}
		// Release as a holder without a successor would: clear the tail.
		for {
			old, err := shmem.AtomicFetch(lock, 0, home)
			if err != nil {
				return err
			}
			if old&0xFFFFFFFF != 2 {
				return fmt.Errorf("tail %d, want PE 1's", old&0xFFFFFFFF)
			}
			if got, err := shmem.AtomicCompareSwap(lock, 0, old, old&^0xFFFFFFFF, home); err != nil {
				return err
			} else if got == old {
				break
			}
		}
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	// Both PEs, the one whose ClearLock failed included, take it again.
	if err := shmem.SetLock(lock); err != nil {
		return fmt.Errorf("SetLock after the late hand-over: %w", err)
	}
	if err := shmem.ClearLock(lock); err != nil {
		return err
	}
	return pe.BarrierAll()
})

func TestClearLockSuccessorLate(t *testing.T) {
	eachTimeout(t, "clearlock-successor-late", 2*time.Second, 2)
}

// A same-host PE that exits without Finalize is noticed by its peers
// within 2 s whatever they are blocked in: its liveness link ends
// without a goodbye. The peers ignore the launcher's SIGTERM long enough
// to report what they saw, in GOSHMEM_TEST_DIR.
var _ = register("exit-without-finalize", func(pe *shmem.PE) error {
	flag, err := shmem.Malloc[int64](pe, 1)
	if err != nil {
		return err
	}
	signal.Ignore(syscall.SIGTERM)
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	if pe.MyPE() == 1 {
		os.Exit(0)
	}
	start := time.Now()
	return reportLost(pe, start, shmem.WaitUntil(flag, 0, shmem.CmpEQ, 1))
})

// reportLost writes whether err is ErrPeerLost, and the milliseconds
// since start, into GOSHMEM_TEST_DIR for lostWithin2s, and returns err.
func reportLost(pe *shmem.PE, start time.Time, err error) error {
	report := fmt.Sprintf("%v %d", errors.Is(err, shmem.ErrPeerLost), time.Since(start).Milliseconds())
	name := filepath.Join(os.Getenv("GOSHMEM_TEST_DIR"), strconv.Itoa(pe.MyPE()))
	if werr := os.WriteFile(name, []byte(report), 0o644); werr != nil {
		return werr
	}
	return err
}

func TestExitWithoutFinalize(t *testing.T) {
	lostWithin2s(t, "exit-without-finalize", 1, []int{0, 2})
}

// lostWithin2s runs scenario name on 3 processes on one host, in which
// PE victim exits without Finalize and the survivors report whether
// their wait ended with ErrPeerLost, and after how long, in
// GOSHMEM_TEST_DIR: the job must fail, and every survivor's wait end so
// within 2 s.
func lostWithin2s(t *testing.T, name string, victim int, survivors []int) {
	dir := t.TempDir()
	err := scenarios.Processes(3, name, nil, "GOSHMEM_TEST_DIR="+dir, "GOSHMEM_TIMEOUT=20s")
	if err == nil {
		t.Fatalf("the job succeeded although PE %d exited without Finalize", victim)
	}
	for _, r := range survivors {
		b, rerr := os.ReadFile(filepath.Join(dir, strconv.Itoa(r)))
		if rerr != nil {
			t.Fatalf("PE %d reported nothing (%v); the job: %v", r, rerr, err)
		}
		var lost bool
		var ms int
		if _, serr := fmt.Sscan(string(b), &lost, &ms); serr != nil || !lost || ms > 2000 {
			t.Fatalf("PE %d: lost %v after %d ms (%q), want ErrPeerLost within 2 s", r, lost, ms, b)
		}
	}
}

// A same-host PE that dies while the others are inside Finalize's
// barrier ends their Finalize with ErrPeerLost within 2 s. The
// survivors' step hook (called at each barrier's start, after Finalize
// has moved them out of the running state) writes into the victim's heap
// through its mapping; the victim exits without Finalize only once both
// have, so the death falls inside their final barrier every time. The
// survivors ignore the launcher's SIGTERM long enough to report what
// they saw, in GOSHMEM_TEST_DIR (as exit-without-finalize). Until a
// death was heeded in every state but closed, the liveness link's end of
// file was ignored once a PE had begun Finalize, and the survivors
// waited out GOSHMEM_TIMEOUT.
var _ = register("die-in-final-barrier", func(pe *shmem.PE) error {
	const victim = 2
	me := pe.MyPE()
	in, err := shmem.Malloc[int64](pe, 2)
	if err != nil {
		return err
	}
	signal.Ignore(syscall.SIGTERM)
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	if me == victim {
		w := in.Local()
		for atomic.LoadInt64(&w[0]) == 0 || atomic.LoadInt64(&w[1]) == 0 {
			runtime.Gosched()
		}
		os.Exit(0)
	}
	p := shmem.Ptr(in, victim)
	if p == nil {
		return fmt.Errorf("the victim's heap is not mapped here")
	}
	f := func(rank, step int) {
		if rank == me && step == 0 {
			atomic.StoreInt64(&p[me], 1) // the only barrier left is Finalize's
		}
	}
	testhook.Step.Store(&f)
	start := time.Now()
	return reportLost(pe, start, pe.Finalize())
})

func TestDieInFinalBarrier(t *testing.T) {
	lostWithin2s(t, "die-in-final-barrier", 2, []int{0, 1})
}
