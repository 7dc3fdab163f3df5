package suite

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Binding PEs to CPUs, as mpirun does by default for jobs no larger than
// the machine (Open MPI's --bind-to core): without it Linux places a PE
// woken from a futex sleep on its waker's CPU, both PEs then spin on
// one CPU, and every synchronisation figure measures the scheduler.
// sched_setaffinity binds one thread, so every thread of the process is
// bound; threads created later inherit the binding of their creator.

// Bind modes (Config.Bind).
const (
	BindCPU  = "cpu"  // PE r on the r-th CPU it may use, when the job has no more PEs than those CPUs
	BindNone = "none" // leave placement to the kernel
)

// allowedCPUs lists the CPUs this process may run on.
func allowedCPUs() ([]int, error) {
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		return nil, fmt.Errorf("reading the CPU affinity: %w", err)
	}
	var cpus []int
	for c := 0; c < len(allowed)*64; c++ {
		if allowed.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// bind applies the job's binding to this PE and returns the CPU it is
// bound to, or -1.
func bind(mode string, rank, npes int) (int, error) {
	if mode != BindCPU {
		return -1, nil
	}
	cpus, err := allowedCPUs()
	if err != nil {
		return -1, err
	}
	if npes > len(cpus) {
		return -1, nil // oversubscribed: binding would only pin PEs to shared CPUs
	}
	cpu := cpus[rank]
	var set unix.CPUSet
	set.Set(cpu)
	// Go may start a thread while we walk the list: walk until a pass
	// binds nothing new.
	done := map[int]bool{}
	for {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return -1, err
		}
		fresh := false
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil || done[tid] {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
				return -1, fmt.Errorf("binding thread %d to CPU %d: %w", tid, cpu, err)
			}
			done[tid], fresh = true, true
		}
		if !fresh {
			return cpu, nil
		}
	}
}
