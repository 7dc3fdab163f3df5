package shmem_test

import (
	"fmt"
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// Wake-ups with every nap fallback off (GOSHMEM_TEST_NONAP=1) and no
// polling (GOSHMEM_BUSYPOLL=0): each PE ping-pongs with its partner
// (rank^1) through P and WaitUntil, so most waits go to sleep and end
// only when the writer's wake reaches them. A wake lost on any path
// leaves a wait asleep until GOSHMEM_TIMEOUT, and the job fails with
// ErrTimeout instead of passing slowly.
var _ = register("wake-pingpong", func(pe *shmem.PE) error {
	const rounds = 300
	flag, err := shmem.Malloc[int64](pe, 1)
	if err != nil {
		return err
	}
	me := pe.MyPE()
	partner := me ^ 1
	if partner >= pe.NPEs() {
		return pe.BarrierAll()
	}
	for i := int64(1); i <= rounds; i++ {
		if me&1 == 0 {
			if err := shmem.P(flag, 0, i, partner); err != nil {
				return err
			}
			if err := shmem.WaitUntil(flag, 0, shmem.CmpGE, i); err != nil {
				return fmt.Errorf("round %d: %w", i, err)
			}
		} else {
			if err := shmem.WaitUntil(flag, 0, shmem.CmpGE, i); err != nil {
				return fmt.Errorf("round %d: %w", i, err)
			}
			if err := shmem.P(flag, 0, i, partner); err != nil {
				return err
			}
		}
	}
	return pe.BarrierAll()
})

func TestWakeWithoutNaps(t *testing.T) {
	for _, c := range []struct {
		name  string
		n     int
		hosts []string
	}{
		{"same-host-processes", 2, nil},        // a writer in another process writes the sleeper's eventfd
		{"tcp", 2, pretendHosts("remote", 2)},  // the link's reader writes it (Notify) after applying a remote write
		{"mixed", 4, pretendHosts("mixed", 4)}, // a same-host writer in another process wakes a PE that has TCP links
	} {
		t.Run(c.name, func(t *testing.T) {
			err := scenarios.Processes(c.n, "wake-pingpong", c.hosts,
				"GOSHMEM_TEST_NONAP=1", "GOSHMEM_BUSYPOLL=0", "GOSHMEM_TIMEOUT=20s", "GOSHMEM_HEARTBEAT=1h")
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Two goroutines of PE 0 asleep at once, each on its own word, in a job
// where PE 0 has TCP links (PE 2 is on another pretend host) and the
// writer, PE 1, is a same-host PE in another process. PE 0's main
// goroutine starts both waits, then tells PE 1 (a P of the round
// number); PE 1 sets B's word, waits for B's answer, then sets A's. So A
// sleeps through a wake meant for B (every wake reaches every sleeper of
// the PE) and must still hear its own; a sleeper that consumed another's
// wake, or a wake the writer did not send, leaves a wait asleep until
// GOSHMEM_TIMEOUT under GOSHMEM_TEST_NONAP=1.
var _ = register("wake-two-sleepers", func(pe *shmem.PE) error {
	const rounds = 300
	flags, err := shmem.Malloc[int64](pe, 2) // A's word, B's word: on PE 0
	if err != nil {
		return err
	}
	// On PE 1: the round PE 0's waits have started (0), B's answer (1).
	ctl, err := shmem.Malloc[int64](pe, 2)
	if err != nil {
		return err
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	for i := int64(1); i <= rounds; i++ {
		switch pe.MyPE() {
		case 0:
			errs := make(chan error, 2)
			go func() { errs <- shmem.WaitUntil(flags, 0, shmem.CmpGE, i) }()
			go func() {
				if err := shmem.WaitUntil(flags, 1, shmem.CmpGE, i); err != nil {
					errs <- err
					return
				}
				errs <- shmem.P(ctl, 1, i, 1)
			}()
			if err := shmem.P(ctl, 0, i, 1); err != nil {
				return err
			}
			for range 2 {
				if err := <-errs; err != nil {
					return fmt.Errorf("round %d: %w", i, err)
				}
			}
		case 1:
			if err := shmem.WaitUntil(ctl, 0, shmem.CmpGE, i); err != nil {
				return fmt.Errorf("round %d: %w", i, err)
			}
			if err := shmem.P(flags, 1, i, 0); err != nil {
				return err
			}
			if err := shmem.WaitUntil(ctl, 1, shmem.CmpGE, i); err != nil {
				return fmt.Errorf("round %d, B's answer: %w", i, err)
			}
			if err := shmem.P(flags, 0, i, 0); err != nil {
				return err
			}
		}
	}
	return pe.BarrierAll()
})

func TestWakeTwoSleepersMixed(t *testing.T) {
	err := scenarios.Processes(3, "wake-two-sleepers", []string{"a", "a", "b"},
		"GOSHMEM_TEST_NONAP=1", "GOSHMEM_BUSYPOLL=0", "GOSHMEM_TIMEOUT=20s", "GOSHMEM_HEARTBEAT=1h")
	if err != nil {
		t.Fatal(err)
	}
}

// A remote write for a parked wait while another goroutine of the PE
// leaves a read token lingering (netmesh lead.go: a caller done with the
// token keeps its socket quiet for the next caller). PE 0's main
// goroutine fetch-adds a counter on PE 1 while a second goroutine of PE 0
// waits for PE 1's answer to it, a P of the round number; main then
// blocks on a Go channel until the wait ends, so no call or poll of PE 0
// reads the socket again. With GOSHMEM_TEST_NONAP=1 the linger timer is
// off: if the token may linger while the wait is parked, PE 1's write
// stays unread and the wait fails with ErrTimeout.
var _ = register("wake-behind-linger", func(pe *shmem.PE) error {
	const rounds = 300
	flag, err := shmem.Malloc[int64](pe, 1)
	if err != nil {
		return err
	}
	req, err := shmem.Malloc[int64](pe, 1)
	if err != nil {
		return err
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	for i := int64(1); i <= rounds; i++ {
		switch pe.MyPE() {
		case 0:
			waited := make(chan error, 1)
			go func() { waited <- shmem.WaitUntil(flag, 0, shmem.CmpGE, i) }()
			if _, err := shmem.AtomicFetchAdd(req, 0, 1, 1); err != nil {
				return err
			}
			if err := <-waited; err != nil {
				return fmt.Errorf("round %d: %w", i, err)
			}
		case 1:
			if err := shmem.WaitUntil(req, 0, shmem.CmpGE, i); err != nil {
				return fmt.Errorf("round %d: %w", i, err)
			}
			if err := shmem.P(flag, 0, i, 0); err != nil {
				return err
			}
		}
	}
	return pe.BarrierAll()
})

func TestWakeBehindLingeringToken(t *testing.T) {
	for _, spin := range []string{"0", "auto"} {
		t.Run("busypoll="+spin, func(t *testing.T) {
			err := scenarios.Processes(2, "wake-behind-linger", pretendHosts("remote", 2),
				"GOSHMEM_TEST_NONAP=1", "GOSHMEM_BUSYPOLL="+spin, "GOSHMEM_TIMEOUT=10s", "GOSHMEM_HEARTBEAT=1h")
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
