package shmem_test

import (
	"fmt"
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// Barriers between processes on pretend hosts with heartbeats turned off
// (one an hour): every frame must be applied because it arrived, not
// because a later heartbeat made the reader look again. A wake-up lost
// anywhere on the TCP path leaves a barrier waiting for a flush reply or a
// flag that sits unread, and the job ends with ErrTimeout instead of a
// slow pass: the children run with GOSHMEM_TEST_NONAP=1, so no nap of a
// wait, linger timer or cork timer rescues a lost wake either, and a
// lost one fails the test (ErrTimeout after 20 s) in a plain go test as
// in .ci/run. Processes, not goroutines: the loss showed only between
// processes, where each PE's reader and callers share no scheduler.
var _ = register("barriers-no-heartbeat", func(pe *shmem.PE) error {
	for i := 0; i < 2000; i++ {
		if err := pe.BarrierAll(); err != nil {
			return fmt.Errorf("barrier %d: %w", i, err)
		}
	}
	return nil
})

func TestTCPBarriersNeedNoHeartbeat(t *testing.T) {
	for _, c := range []struct {
		n     int
		hosts string
	}{{2, "remote"}, {4, "mixed"}} {
		t.Run(fmt.Sprintf("%d-%s", c.n, c.hosts), func(t *testing.T) {
			err := scenarios.Processes(c.n, "barriers-no-heartbeat", pretendHosts(c.hosts, c.n),
				"GOSHMEM_HEARTBEAT=1h", "GOSHMEM_TIMEOUT=20s", "GOSHMEM_TEST_NONAP=1")
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
