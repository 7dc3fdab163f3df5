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
//
// It is a raw system call: the Go scheduler is not told, and the
// goroutine keeps its thread and its Go processor. sched_yield returns
// as soon as the kernel runs the thread again, but that may be after the
// PE sharing the core ran for a while; through syscall.Syscall the
// runtime then treats the yield as a blocking call, hands the processor
// to another thread, and the goroutine resumes on a thread that must be
// woken first: a 4-process flat barrier on 2 CPUs took 2.9 to 5.3 µs a
// call so, 1.8 to 2.5 µs with the raw call, as a C program does
// (docs/performance.md). The cost: while the thread is off its CPU, the
// process's other goroutines have one Go processor fewer.
func Yield() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
