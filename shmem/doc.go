// Package shmem is goshmem's public API: one-sided, symmetric-heap RMA in
// the style of OpenSHMEM 1.5, spelled the Go way.
//
// A job is N processing elements (PEs), numbered 0..N-1. Each PE owns a
// symmetric heap; Malloc is collective and places an object at the same
// offset on every PE, so a Sym[T] names "that object" on any PE. A PE
// reads and writes other PEs' copies without their participation (Put,
// Get, P, G, the atomics), orders and completes its operations (Fence,
// Quiet), synchronises (BarrierAll, SyncAll, WaitUntil, locks) and works
// on subsets of PEs through teams.
//
// Start a job with Init (under the goshrun launcher, or alone as a job of
// one PE) or with Run (N PEs as goroutines of this process):
//
//	pe, err := shmem.Init()
//	if err != nil { ... }
//	defer pe.Finalize()
//	x, err := shmem.Malloc[int64](pe, 1)
//	err = shmem.AtomicAdd(x, 0, 1, 0) // add one to x on PE 0
//	err = pe.BarrierAll()
//
// Same-host PEs map each other's heaps: a put is a copy, an atomic is a
// hardware atomic on the shared word, and Fence costs nothing more; Quiet
// is at most one store-load fence (docs/memory-model.md, "Puts").
//
// Every OpenSHMEM 1.5 and 1.6 routine family has a Go spelling or a
// stated reason to be absent (docs/openshmem.md lists them, with the
// shapes that differ from C). Among them, the multi-element waits watch
// several elements of this PE's copy at once, each against its own value
// in the Vector forms; a mask selects the watched elements (true:
// watched, the opposite of C's status array):
//
//	flags, _ := shmem.Malloc[int64](pe, n)     // flags[i] is raised by PE i
//	err = shmem.WaitUntilAllVector(flags, nil, shmem.CmpGE, thresholds)
//	i, err := shmem.TestAny(flags, mask, shmem.CmpNE, 0) // -1 when none
//
// Put-with-signal delivers data and then updates a signal word, so that
// the PE waiting on the signal sees the data; the NBI form leaves src to
// the library until Quiet, so a stream of chunks leaves without waiting:
//
//	for c, buf := range chunks { // buf untouched until the Quiet
//		err = shmem.PutSignalNBI(data.Slice(c*n, (c+1)*n), buf, sig, 1, shmem.SignalAdd, peer)
//	}
//	err = pe.Quiet()
//	// on peer: shmem.SignalWaitUntil(sig, shmem.CmpEQ, uint64(len(chunks)))
//
// Contexts (PE.NewContext, Team.NewContext) are independent completion
// streams: bind a handle with s.Via(c), and c.Quiet completes what went
// through c only. A team context takes PE numbers in its team.
//
// Caveats:
//   - A *PE is safe for concurrent use by many goroutines. Collective
//     calls (Malloc, Free, barriers, team creation, Finalize) must be made
//     by every PE in the same order; concurrent team-creating calls of one
//     PE are serialised and may wait for each other. TeamMalloc allocates
//     over a team's members only (collective over them); a PE's
//     allocation calls, world and team, run one at a time.
//   - Slices from Sym.Local and Ptr alias the shared heap: other PEs may
//     write them at any time, and they are invalid after Free, Realloc or
//     Finalize. Under a launcher, loads and stores through them after
//     Finalize land in private memory nobody else sees (the mappings are
//     replaced, not unmapped); under Run they fault once Run has
//     returned. Synchronise with the atomics and waits, not with plain
//     loads in a loop.
//   - Every wait on other PEs ends: with ErrPeerLost when a PE of the job
//     died or failed, with ErrTimeout after the PE's timeout
//     (GOSHMEM_TIMEOUT, WithTimeout; default two minutes).
//   - Errors wrap the sentinels (ErrBadPE, ErrOutOfBounds, ...) with the
//     numbers that explain them; compare with errors.Is. A user mistake
//     is an error, never a panic, and never a write outside the object:
//     bad PEs, indexes, strides (including ones whose products
//     overflow), out-of-range slices, freed objects, calls on a nil PE
//     or after Finalize. A refused call changes nothing.
//   - Finalize is safe against the PE's other goroutines: those blocked
//     in waits and locks return ErrFinalized, later calls fail with
//     ErrFinalized, a concurrent Finalize returns ErrFinalized at once,
//     and the memory is released only after every call has left the PE.
//     Local, Ptr and SameHost return nil and false once it has begun.
package shmem
