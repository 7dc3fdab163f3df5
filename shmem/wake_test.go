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
