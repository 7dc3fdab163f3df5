// Asymmetric fences: a writer into a peer's memory on this host orders
// its stores with nothing but the CPU's own store order, and a goroutine
// about to sleep makes every writer's earlier stores visible, and its
// later loads see the sleeper's announcement, with one membarrier(2)
// system call (MEMBARRIER_CMD_GLOBAL_EXPEDITED: a full barrier on every
// CPU that runs a thread of a process that registered for it). The
// fast path, the writer's, then drops the store-load fence a Dekker
// handshake otherwise needs on both sides; the slow path, the sleeper's,
// pays for it. docs/memory-model.md, "Sleeping and waking a sleeper".

package heap

import (
	"sync"

	"golang.org/x/sys/unix"
)

// membarrier(2) commands (linux/membarrier.h).
const (
	membarrierQuery                   = 0
	membarrierGlobalExpedited         = 1 << 1
	membarrierRegisterGlobalExpedited = 1 << 2
)

var asym struct {
	once       sync.Once
	registered bool // this process's threads take part in GlobalExpedited barriers
	available  bool // the kernel has GlobalExpedited (this process may call AsymFence)
}

func membarrier(cmd int) (uintptr, error) {
	r, _, e := unix.Syscall(unix.SYS_MEMBARRIER, uintptr(cmd), 0, 0)
	if e != 0 {
		return r, e
	}
	return r, nil
}

// RegisterAsymFence registers this process for AsymFence's barriers (once
// per process) and reports whether it is registered, and whether the
// kernel lets this process call AsymFence at all. A registered process's
// writers may skip their store-load fences (see the file comment); one
// that is not must keep them.
func RegisterAsymFence() (registered, available bool) {
	asym.once.Do(func() {
		q, err := membarrier(membarrierQuery)
		if err != nil || q&membarrierGlobalExpedited == 0 || q&membarrierRegisterGlobalExpedited == 0 {
			return
		}
		asym.available = true
		_, err = membarrier(membarrierRegisterGlobalExpedited)
		asym.registered = err == nil
	})
	return asym.registered, asym.available
}

// AsymFence runs a full memory barrier on every CPU that runs a thread
// of a registered process, this one's included, and returns once they
// all have: every store such a thread made before it is visible to the
// caller's later loads, and every load such a thread makes after it sees
// the caller's earlier stores. It costs a system call and an
// interprocessor interrupt per such CPU (1-2 µs with no other registered
// thread running, about 26 µs with one spinning on the other CPU of this
// machine kind, a PVM guest).
func AsymFence() error {
	_, err := membarrier(membarrierGlobalExpedited)
	return err
}
