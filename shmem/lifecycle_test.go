package shmem_test

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

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
