package shmem_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/testhook"
	"github.com/goshmem/goshmem/shmem"
)

// Context A's operations to PE 1 are held at PE 1 before PE 1 applies
// them (a hook on A's own stream, not a sleep); meanwhile context B's
// put, fetch-add, Quiet and get to the same PE complete, over pretend
// hosts (TCP). A's Quiet completes once the frames are released.
func TestContextQuietNotBehindAnother(t *testing.T) {
	const bound = 20 * time.Second
	var (
		slotA   = make(chan int, 1)
		entered = make(chan struct{})
		release = make(chan struct{})
		once    sync.Once
	)
	hold := func(rank, from, slot, _ int) {
		if rank != 1 || from != 0 || slot < 0 {
			return
		}
		select {
		case s := <-slotA:
			slotA <- s
			if s != slot {
				return
			}
		default:
			return
		}
		once.Do(func() { close(entered) })
		<-release
	}
	testhook.Apply.Store(&hold)
	defer testhook.Apply.Store(nil)
	var relOnce sync.Once
	rel := func() { relOnce.Do(func() { close(release) }) }
	defer rel()

	err := shmem.Run(2, func(pe *shmem.PE) error {
		s, err := shmem.Malloc[int64](pe, 8)
		if err != nil {
			return err
		}
		if err := pe.BarrierAll(); err != nil {
			return err
		}
		if pe.MyPE() == 0 {
			defer rel() // a failed check must not leave PE 1's stream held
			a, err := pe.NewContext()
			if err != nil {
				return err
			}
			b, err := pe.NewContext()
			if err != nil {
				return err
			}
			// Open A's stream with a completed get, then hold it at PE 1.
			if _, err := shmem.G(s.Via(a), 0, 1); err != nil {
				return err
			}
			if err := shmem.P(s.Via(b), 7, 0, 1); err != nil { // B's stream
				return err
			}
			if err := b.Quiet(); err != nil {
				return err
			}
			sa, sb := shmem.ContextSlot(a, 1), shmem.ContextSlot(b, 1)
			if sa < 0 || sb < 0 || sa == sb {
				return fmt.Errorf("contexts A and B have streams in slots %d and %d", sa, sb)
			}
			slotA <- sa
			if err := shmem.PutNBI(s.Via(a), []int64{101, 102}, 1); err != nil {
				return err
			}
			doneA := make(chan error, 1)
			go func() { doneA <- a.Quiet() }()
			select {
			case <-entered:
			case <-time.After(bound):
				return errors.New("PE 1 never held context A's frames")
			}
			doneB := make(chan error, 1)
			go func() {
				if err := shmem.Put(s.Via(b).Slice(2, 4), []int64{201, 202}, 1); err != nil {
					doneB <- err
					return
				}
				if _, err := shmem.AtomicFetchAdd(s.Via(b), 4, 5, 1); err != nil {
					doneB <- err
					return
				}
				if err := b.Quiet(); err != nil {
					doneB <- err
					return
				}
				got := make([]int64, 3)
				if err := shmem.Get(got, s.Via(b).Slice(2, 5), 1); err != nil {
					doneB <- err
					return
				}
				if got[0] != 201 || got[1] != 202 || got[2] != 5 {
					doneB <- fmt.Errorf("B reads %v at PE 1, want [201 202 5]", got)
					return
				}
				// The default context is independent of A too: the PE's
				// own Quiet and PEQuiet do not wait for A's held frames.
				if err := shmem.Put(s.Slice(5, 6), []int64{301}, 1); err != nil {
					doneB <- err
					return
				}
				if err := pe.Quiet(); err != nil {
					doneB <- err
					return
				}
				if err := shmem.PutNBI(s.Slice(6, 7), []int64{302}, 1); err != nil {
					doneB <- err
					return
				}
				if err := pe.PEQuiet(1); err != nil {
					doneB <- err
					return
				}
				if v, err := shmem.G(s, 6, 1); err != nil || v != 302 {
					doneB <- fmt.Errorf("the default context reads %d (%v) at PE 1 after its PEQuiet, want 302", v, err)
					return
				}
				doneB <- nil
			}()
			select {
			case err := <-doneB:
				if err != nil {
					return err
				}
			case <-time.After(bound):
				return fmt.Errorf("context B's put, atomic and Quiet, and the PE's own Quiet, did not complete within %v while A was held", bound)
			}
			select {
			case err := <-doneA:
				return fmt.Errorf("context A's Quiet returned (%v) while PE 1 held its frames", err)
			default:
			}
			if !shmem.ContextOutstanding(a, 1) {
				return errors.New("A's stream is not outstanding while held")
			}
			rel()
			select {
			case err := <-doneA:
				if err != nil {
					return err
				}
			case <-time.After(bound):
				return errors.New("context A's Quiet did not complete after release")
			}
			if err := a.Close(); err != nil {
				return err
			}
			if err := b.Close(); err != nil {
				return err
			}
		}
		if err := pe.BarrierAll(); err != nil {
			return err
		}
		if pe.MyPE() == 1 {
			want := []int64{101, 102, 201, 202, 5, 301, 302, 0} // A's, B's, the default context's
			for i, w := range want {
				if got := s.Local()[i]; got != w {
					return fmt.Errorf("PE 1 element %d is %d, want %d (all %v)", i, got, w, s.Local())
				}
			}
		}
		return pe.BarrierAll()
	}, shmem.WithTimeout(60*time.Second), shmem.WithHeapSize(1<<20), shmem.WithHosts(pretendHosts("remote", 2)))
	if err != nil {
		t.Fatal(err)
	}
}

// Goroutines of every PE, each with a context of its own (more contexts
// than a link has channel streams, so some share), put, get, fetch-add,
// NBI-fetch and Quiet to every other PE, with exact results; on every
// route (same host, TCP, mixed, processes).
var _ = register("context-streams", func(pe *shmem.PE) error {
	const workers, rounds = 20, 12
	me, np := pe.MyPE(), pe.NPEs()
	data, err := shmem.Malloc[int64](pe, np*workers)
	if err != nil {
		return err
	}
	counters, err := shmem.Malloc[int64](pe, workers)
	if err != nil {
		return err
	}
	if err := inGoroutines(workers, func(g int) error {
		c, err := pe.NewContext()
		if err != nil {
			return err
		}
		defer c.Close()
		d, cn := data.Via(c), counters.Via(c)
		for r := 0; r < rounds; r++ {
			for k := 1; k < np; k++ {
				t := (me + k) % np
				v := int64(me*1_000_000 + g*1000 + r)
				if err := shmem.PutNBI(d.Slice(me*workers+g, me*workers+g+1), []int64{v}, t); err != nil {
					return err
				}
				var old int64
				if err := shmem.AtomicFetchAddNBI(&old, cn, g, 1, t); err != nil {
					return err
				}
				if err := c.Quiet(); err != nil {
					return err
				}
				got, err := shmem.G(d, me*workers+g, t)
				if err != nil {
					return err
				}
				if got != v {
					return fmt.Errorf("PE %d goroutine %d round %d: PE %d holds %d, want %d", me, g, r, t, got, v)
				}
				if old < int64(r) { // this goroutine's own adds so far to t, at least
					return fmt.Errorf("PE %d goroutine %d round %d: counter at PE %d was %d before its add", me, g, r, t, old)
				}
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	for g := 0; g < workers; g++ {
		if got, want := counters.Local()[g], int64((np-1)*rounds); got != want {
			return fmt.Errorf("PE %d counter %d is %d, want %d", me, g, got, want)
		}
		for from := 0; from < np; from++ {
			if from == me {
				continue
			}
			if got, want := data.Local()[from*workers+g], int64(from*1_000_000+g*1000+rounds-1); got != want {
				return fmt.Errorf("PE %d: PE %d goroutine %d's last value is %d, want %d", me, from, g, got, want)
			}
		}
	}
	return pe.BarrierAll()
})

func TestScenarioContextStreams(t *testing.T) { each(t, "context-streams", 2, 3) }
