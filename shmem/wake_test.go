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
		{"same-host-processes", 2, nil},        // futex wakes between processes
		{"tcp", 2, pretendHosts("remote", 2)},  // a remote write's Notify pokes the parked wait
		{"mixed", 4, pretendHosts("mixed", 4)}, // same-host writers in other processes reach a parked wait through the relay
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
