// Package collective is barrier, broadcast, reductions, scans, collect
// and all-to-all over shmem teams, built from the shmem API alone (put,
// get, put-with-signal, atomics, wait-until, team sync), so every
// algorithm runs unchanged over shared memory, TCP or a mix of both.
//
//	err := collective.AllReduce(pe.World(), dst, src, collective.Sum)
//
// Every call takes a team and symmetric buffers, and every member of
// the team makes the same calls in the same order with the same
// arguments (counts, operator, root, element type). Members that
// disagree, or whose buffers are too small, all get an error (wrapping
// shmem.ErrAsymmetric, ErrOutOfBounds, ErrInvalid or ErrBadPE) and the
// team stays usable: no call hangs on a bad argument and none writes
// outside dst. A lost peer ends the call with shmem.ErrPeerLost.
//
// Buffer ownership is stronger than OpenSHMEM's: a collective reads a
// PE's src and writes its dst only while that PE is inside the same
// call. A PE may read its result, refill src and call the next
// collective at once, with no barrier in between. Broadcast, Reduce,
// AllReduce, InScan and ExScan may run in place: dst and src starting at
// the same element (dst may be longer; the rest is left alone). Any other
// overlap of src with the elements the call writes, dst[0:src.Len()], is
// refused with ErrInvalid.
//
// Small vectors (up to the payload of one scratch message: 216 bytes
// on 2-PE teams, 88 on 4, 24 on 8) go through each team's reserved
// scratch in one exchange (flat on teams of up to 8, recursive doubling
// on larger ones); larger ones by direct reads and writes of the
// members' buffers between an entry and an exit exchange, straight in
// the peers' mapped heaps over shared memory, with no staging copy. On
// teams that span hosts AllReduce pushes (halves on 2 members, recursive
// halving and doubling on 4 or 8, a ring on the others), Reduce passes
// the vector along a pipelined chain to the root (up to 4 members) or
// pushes a ring reduce-scatter and gathers the chunks to the root, and
// a large Broadcast is a scatter and an allgather. docs/collectives.md
// has the algorithms, the crossovers and the measured figures;
// GOSHMEM_COLLECTIVE_ALGO (auto, rd, direct, ring, pushring, halving,
// chain) forces one (docs/env.md).
//
// Caveats:
//   - Collectives of one PE on one team are serialised (a lock of the
//     team's); calls on different teams may run at once from different
//     goroutines, each team with its own scratch and signal words.
//     Calling collectives on one team from several goroutines of a PE
//     in an order the other members do not share is a mismatch, as in
//     OpenSHMEM.
//   - Teams of more than 32767 PEs are refused (the recursive-doubling
//     signal words of a team slot run out).
//   - FCollect, Collect, AllToAll and AllToAllS refuse overlapping dst
//     and src (ErrInvalid).
//   - ExScan leaves member 0's dst holding the identity of the operator
//     (0 for Sum, Or and Xor; 1 for Prod; all ones for And; the largest
//     value for Min and the smallest for Max, ±Inf for floats).
//   - Reduce writes the root's dst only; the others' dst are as they
//     were when the call returns. (Across hosts, the others' dst are
//     landing space during the call: each such member saves the part
//     that is written before the entry exchange and writes it back
//     before it returns; a call that fails midway may leave it written.)
//   - A call that returns an error may have written part of dst on the
//     members that got as far as the data movement (a peer lost midway);
//     argument errors are found before any data moves.
//   - Floating-point sums may differ in the last bits from a serial sum
//     in rank order (the algorithms combine in other orders); every
//     member of an AllReduce gets the same bits.
//   - A Finalize on another goroutine of the PE ends a collective in
//     progress with shmem.ErrFinalized; the call holds the PE open
//     (Finalize does not unmap its memory) until it returns.
//   - Agreement covers the collectives of this package except Barrier,
//     which is Team.Sync: a member in Barrier (or in Team.Sync, Split
//     or Destroy) while another is in another collective waits until
//     the PE's timeout (ErrTimeout), as a mismatched barrier does.
//   - Agreement compares 64-bit digests of the members' arguments; two
//     different argument sets with the same digest (a chance of about
//     2^-63) would not be caught.
package collective
