package heap

import "golang.org/x/sys/unix"

// affinity is the calling thread's CPU affinity mask (sched_getaffinity),
// as WriteHeader publishes it; all zero when the system call fails.
func affinity() (m [CPUWords]uint64) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return m
	}
	for c := range CPUWords * 64 {
		if set.IsSet(c) {
			m[c/64] |= 1 << (c % 64)
		}
	}
	return m
}
