// Futex wait and wake on words of shared mappings: the only raw syscalls
// of heap/. The futexes are the shared (non-private) kind, keyed by the
// page of the mapping rather than by the address space, so a waker in one
// process reaches a sleeper in another.

package heap

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	futexWait = 0 // FUTEX_WAIT, without FUTEX_PRIVATE_FLAG
	futexWake = 1 // FUTEX_WAKE, without FUTEX_PRIVATE_FLAG
)

// FutexWait sleeps while *addr == val, for at most d. It returns when
// woken, when *addr != val on entry, on a signal or on timeout; the caller
// re-checks its condition in every case. The calling goroutine holds its
// OS thread while it sleeps.
func FutexWait(addr *uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWait, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// FutexWake wakes up to n sleepers on addr.
func FutexWake(addr *uint32, n int) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWake, uintptr(n), 0, 0, 0)
}

// Yield gives up the processor to other threads and processes
// (sched_yield), for waits when PEs outnumber cores.
func Yield() { unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
