package suite

import (
	"fmt"
	"sync/atomic"
	"syscall"
	"time"
)

// spinBeforeYield is how many checks of the word spinUntil makes between
// yields of the CPU: about a microsecond, longer than a cross-core
// round trip. A pure spin is what the limit means when both PEs have a
// core; the yields matter when they do not (more PEs than cores, or
// both PEs placed on one CPU of a machine shared with other work),
// where a spinning PE would burn the time slice its partner needs and
// the "limit" would measure the scheduler's time slice.
const spinBeforeYield = 1 << 10

// spinUntil spins until *w >= v: the raw side of the cache-line limit,
// with no goshmem call. It fails after timeout (the partner died or
// never came).
func spinUntil(w *uint64, v uint64, timeout time.Duration) error {
	var start time.Time
	for spins := 0; atomic.LoadUint64(w) < v; spins++ {
		if spins%spinBeforeYield == spinBeforeYield-1 {
			if start.IsZero() {
				start = time.Now()
			} else if time.Since(start) > timeout {
				return fmt.Errorf("goshbench: raw ping-pong: no answer for %v (word %d, want %d)", timeout, atomic.LoadUint64(w), v)
			}
			// sched_yield(2): the standard library has no wrapper, and
			// runtime.Gosched yields only to this process's goroutines.
			syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
		}
	}
	return nil
}
