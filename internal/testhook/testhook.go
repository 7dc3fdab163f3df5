// Package testhook holds the hooks goshmem's tests set inside the
// runtime, so that a test can hold a piece of the protocol still (a
// stream's frames, say) instead of sleeping to make an interleaving
// happen. Being internal, the hooks are no part of the public API; the
// runtime pays one atomic load at each site while none is set.
package testhook

import (
	"os"
	"sync/atomic"
)

// Apply, when set, is called by netmesh before each frame it applies,
// in the goroutine applying it, with the applying PE's rank, the sending
// PE's rank, the slot of the channel stream the frame arrives on when
// the sender opened that stream (its channel's requests; -1 otherwise),
// and the index of the link stream it arrives on (0 up to the link's
// stream count; -1 on a channel stream). Blocking in it holds that
// stream's frames, and only that stream's.
var Apply atomic.Pointer[func(rank, from, slot, stream int)]

// Step, when set, is called at each step of a collective's algorithm,
// in the calling goroutine, with the calling PE's world rank and the
// step's number within the call (from 0; the same for a given call, team
// and algorithm): by collective/ at the start of each exchange and of
// each of its recursive-doubling rounds (before this PE sends its
// message) and before each ring, pair, halving or gather wait; by
// shmem's team barrier (Team.Sync, and so also the runtime's own uses of
// it) before each round's store and, on a gather barrier's root, before
// its release (step 1). A test that stops the PE there (a panic in a
// goroutine PE, a kill of a process) makes it die at that step.
var Step atomic.Pointer[func(rank, step int)]

// Sleep, when set, is called by shmem each time a wait is about to
// sleep (its watch is registered and its condition was false at the
// last look), in the waiting goroutine, with the PE's rank. A wake that
// comes after the call ends that sleep at once, so a test that acts
// once every PE it expects has called it (a goroutine PE's Finalize,
// say) exercises the wake-up of a sleeping wait, not of a spinning one.
var Sleep atomic.Pointer[func(rank int)]

// NoNap reports whether GOSHMEM_TEST_NONAP=1 is set: every timer that
// could rescue a lost wake-up is off (shmem's wait naps and settle's
// re-wakes; netmesh's linger timer while a wait is parked, and its cork
// timer, so a wait that forgot Mesh.Push hangs too), so a lost wake hangs a test (until the PE's timeout,
// then ErrTimeout) instead of showing only as latency. Read once per
// mesh and per sleeping wait: one getenv.
func NoNap() bool { return os.Getenv("GOSHMEM_TEST_NONAP") == "1" }

// NoSpin reports whether GOSHMEM_TEST_NOSPIN=1 is set: shmem's waits on
// a PE without TCP links skip their spin and yield phases and go to
// sleep at the first look that finds their condition false, so that
// nearly every wait of a ping-pong sleeps and its wake-up races the
// writer's store (the fence handshake of docs/memory-model.md, "Sleeping
// and waking a sleeper"). Read once per PE.
func NoSpin() bool { return os.Getenv("GOSHMEM_TEST_NOSPIN") == "1" }
