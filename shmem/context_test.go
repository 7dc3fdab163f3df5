package shmem_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// A context's Quiet flushes only its own streams: with
// two contexts talking to two different remote PEs, each Quiet leaves
// the other context's stream outstanding, and completes its own puts.
func TestContextQuietIsItsOwn(t *testing.T) {
	err := shmem.Run(3, func(pe *shmem.PE) error {
		s, err := shmem.Malloc[int64](pe, 4)
		if err != nil {
			return err
		}
		if pe.MyPE() == 0 {
			c1, err := pe.NewContext()
			if err != nil {
				return err
			}
			c2, err := pe.NewContext()
			if err != nil {
				return err
			}
			if c1.Team() != pe.World() {
				return errors.New("a PE's context is not of the world team")
			}
			if err := shmem.P(s.Via(c1), 0, 11, 1); err != nil {
				return err
			}
			if err := shmem.P(s.Via(c2), 0, 22, 2); err != nil {
				return err
			}
			if err := c1.Quiet(); err != nil {
				return err
			}
			if shmem.ContextOutstanding(c1, 1) || !shmem.ContextOutstanding(c2, 2) {
				return fmt.Errorf("after c1.Quiet: c1's stream to PE 1 outstanding %v, c2's to PE 2 %v (want false, true)",
					shmem.ContextOutstanding(c1, 1), shmem.ContextOutstanding(c2, 2))
			}
			if err := c2.PEQuiet(1); err != nil { // c2 used no link to PE 1
				return err
			}
			if !shmem.ContextOutstanding(c2, 2) {
				return errors.New("c2.PEQuiet(1) flushed c2's stream to PE 2")
			}
			if err := c2.PEQuiet(2); err != nil {
				return err
			}
			if shmem.ContextOutstanding(c2, 2) {
				return errors.New("c2.PEQuiet(2) left c2's stream to PE 2 outstanding")
			}
			if err := c2.PEQuiet(3); !errors.Is(err, shmem.ErrBadPE) {
				return fmt.Errorf("PEQuiet of PE 3 in a 3-PE job: %v", err)
			}
		}
		if err := pe.BarrierAll(); err != nil {
			return err
		}
		if me := pe.MyPE(); me > 0 {
			if got, want := s.Local()[0], int64(11*me); got != want {
				return fmt.Errorf("PE %d holds %d, want %d", me, got, want)
			}
		}
		return pe.BarrierAll()
	}, shmem.WithTimeout(30*time.Second), shmem.WithHeapSize(1<<20), shmem.WithHosts(pretendHosts("remote", 3)))
	if err != nil {
		t.Fatal(err)
	}
}

// Goroutines of one PE, each with its own context, put and quiet at the
// same time, each to its own PE over TCP: every value arrives, and a
// handle of one PE cannot be bound to another PE's context.
func TestContextsConcurrent(t *testing.T) {
	const n, rounds = 4, 200
	var mu sync.Mutex
	var ctxOf0 *shmem.Context
	err := shmem.Run(n, func(pe *shmem.PE) error {
		s, err := shmem.Malloc[int64](pe, n)
		if err != nil {
			return err
		}
		if pe.MyPE() == 0 {
			c, err := pe.NewContext()
			if err != nil {
				return err
			}
			mu.Lock()
			ctxOf0 = c
			mu.Unlock()
			if err := inGoroutines(n-1, func(i int) error {
				target := i + 1
				c, err := pe.NewContext()
				if err != nil {
					return err
				}
				defer c.Close()
				h := s.Via(c)
				for i := int64(1); i <= rounds; i++ {
					if err := shmem.P(h, 0, i, target); err != nil {
						return err
					}
					if err := c.Quiet(); err != nil {
						return err
					}
					if v, err := shmem.G(h, 0, target); err != nil || v != i {
						return fmt.Errorf("target %d round %d: read %d, %v", target, i, v, err)
					}
				}
				return nil
			}); err != nil {
				return err
			}
		}
		if err := pe.BarrierAll(); err != nil {
			return err
		}
		if pe.MyPE() == 1 {
			mu.Lock()
			c := ctxOf0
			mu.Unlock()
			if err := shmem.P(s.Via(c), 0, 1, 0); !errors.Is(err, shmem.ErrInvalid) {
				return fmt.Errorf("PE 1's handle through PE 0's context: %v", err)
			}
		}
		return pe.BarrierAll()
	}, shmem.WithTimeout(30*time.Second), shmem.WithHeapSize(1<<20), shmem.WithHosts(pretendHosts("remote", n)))
	if err != nil {
		t.Fatal(err)
	}
}
