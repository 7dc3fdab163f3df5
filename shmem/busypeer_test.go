package shmem_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/shmem"
)

// A PE busy in a loop the Go runtime cannot preempt is not a lost peer.
// Both PE processes are bound to one CPU (as taskset around a launcher
// does) and PE 0 then runs only copy() of 16 MiB for about six loss
// times (GOSHMEM_HEARTBEAT=100ms: lost after 500 ms of silence): each
// copy is one memmove, where the runtime's preemption signal cannot stop
// it, so PE 0's timer and writer goroutines do not run and it sends no
// heartbeat for the whole loop. PE 1, waiting in the barrier, sees its
// host acknowledge its own heartbeats all along, so the barrier
// completes when PE 0 comes back. Before 2026-12-06 PE 1 declared PE 0
// lost after 500 ms and the job failed (netmesh watchdog.go).
func TestBusyPeerIsNotLost(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3 s busy loop")
	}
	err := scenarios.Processes(2, "busy-copy", pretendHosts("remote", 2),
		"GOSHMEM_HEARTBEAT=100ms", "GOSHMEM_TIMEOUT=60s")
	if err != nil {
		t.Fatal(err)
	}
}

var _ = register("busy-copy", func(pe *shmem.PE) error {
	if err := bindAllThreads(); err != nil {
		return err
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	if pe.MyPE() == 0 {
		src, dst := make([]byte, 16<<20), make([]byte, 16<<20)
		for i := range src {
			src[i] = byte(i)
		}
		copy(dst, src) // the first copy faults dst's pages in
		start := time.Now()
		for range 4 {
			copy(dst, src)
		}
		n := int(3*time.Second/max(time.Since(start)/4, time.Microsecond)) + 1
		start = time.Now()
		for range n { // nothing but memmove: no preemption point
			copy(dst, src)
		}
		if d := time.Since(start); d < time.Second {
			return fmt.Errorf("the busy loop ran %v, shorter than two loss times: the test tests nothing", d)
		}
	}
	return pe.BarrierAll()
})

// bindAllThreads binds every thread of this process to the first CPU it
// may run on (threads started later inherit it).
func bindAllThreads() error {
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		return err
	}
	cpu := 0
	for !allowed.IsSet(cpu) {
		cpu++
	}
	var set unix.CPUSet
	set.Set(cpu)
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, e := range tasks {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
			return fmt.Errorf("binding thread %d: %w", tid, err)
		}
	}
	return nil
}
