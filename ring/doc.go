// Package ring is messaging over the symmetric heap: directed lanes of
// fixed-size, CRC32C-guarded slots in the receiver's heap, with
// cumulative acknowledgements. It is built from the shmem API alone
// (Malloc, PutSignal, Put, AtomicAdd, WaitUntil, Local), so the same
// code runs wherever shmem does.
//
// A Lane is a directed pair From → To with Depth slots of Capacity
// payload bytes. New creates a set of lanes on every PE (collectively);
// a PE then sends on its lanes out and receives on its lanes in:
//
//	r, err := ring.New(pe, []ring.Lane{{From: 0, To: 1, Depth: 16, Capacity: 256}}, ring.Safe)
//	if err != nil { ... }
//	defer r.Close()
//	if pe.MyPE() == 0 {
//		seq, err := r.Send(1, []byte("hello"))
//		...
//	} else {
//		m, err := r.Recv()                 // m.Origin 0, m.Seq 1, m.Data "hello"
//		...
//		err = r.Ack(m.Origin, m.Seq)       // Safe lanes: frees the slot for the sender
//	}
//
// Sequence numbers are per lane, start at 1 and rise by 1. A message is
// one put of a whole slot image (header, payload, tail guard) at slot
// (seq-1) mod Depth, whose signal sets the lane's pub word to seq. The
// receiver reads only its own memory: the pub word says which messages
// are complete, and a slot is delivered only when its sequence number,
// tail guard (^seq), length and CRC32C all agree. Messages longer than
// InlineMax go through the lane's bulk areas: a put of the payload, then
// a small slot. docs/ring.md has the byte layout and the measurements.
//
// Safe lanes never lose a message: Send waits while Depth are
// unacknowledged. Raw lanes never wait: a receiver that was lapped gets
// the newest Depth messages, in order, and Stats().Lost counts the
// others exactly. A slot found invalid after its put completed is
// corruption: counted in Stats().Corrupt, reported by Poll or Recv
// (ErrProtocol), and skipped, never delivered.
//
// The typed helpers SendT, RecvT and AppendT move slices of any
// shmem.Elem without hand-written encoding.
//
// Comm, built on lanes, is MPI-style two-sided messaging: Send, Recv,
// Probe and SendRecv of typed slices of any length, matched by (source,
// tag) with AnySource / AnyTag, non-overtaking, each call bounded by a
// context.Context:
//
//	c, err := ring.NewComm(pe.World())    // collective
//	...
//	err = ring.Send(ctx, c, 1, 7, []float64{1, 2, 3})
//	st, err := ring.Recv(ctx, c, 0, 7, buf) // st.Source, st.Tag, st.Bytes
//
// Messages up to EagerMax (64 KiB) are eager; longer ones move, once a
// receive has matched them, in pieces through the lanes' bulk areas
// (rendezvous). NewComm works over any team, collective over its
// members, on lanes allocated over them (shmem.TeamMalloc); c.Sub(t)
// gives a sub-team of c's team a Comm on c's lanes, allocating nothing.
// docs/ring.md ("Comm") has the protocol, its bounds, and when to use
// which.
//
// Caveats:
//   - In Safe mode a Message's Data aliases the receiver's heap (the
//     slot or bulk area): it is valid until that message is acknowledged
//     (Ack of its Seq or a later one) or the ring is closed. Copy what
//     you keep longer; AppendT and RecvT copy. Treat Data as read-only.
//     In Raw mode Data is a fresh copy that stays valid.
//   - Acknowledge what you received: a Safe sender stalls once Depth
//     messages on its lane are unacknowledged. Ack is cumulative and
//     cheap (one remote atomic add); acking a batch at once is fine.
//   - Every Send puts the whole slot: Capacity (up to InlineMax) rounded
//     up to the cache line, plus 24 bytes. Choose Capacity near the
//     sizes you send; a lane with Capacity above InlineMax also reserves
//     Depth × Capacity bytes of bulk areas in the receiver's heap.
//   - Bulk payloads in Safe mode are not checksummed (the slot that
//     announces them is); in Raw mode they are, to detect overwriting.
//   - Send, Poll, Recv, Ack and Stats are safe for concurrent use; sends
//     on one lane are serialised, and so is the receiving side. New and
//     Close are collective and must not run concurrently with other
//     calls on the ring.
//   - Recv and a waiting Send end with the shmem error when a peer is
//     lost (ErrPeerLost) or the PE's timeout passes (ErrTimeout); a
//     timeout on Recv means nothing arrived for that long.
//   - Poll and Recv return messages and an error together when they meet
//     corruption (like io.Reader): use the messages, then the error.
//   - Sequence numbers are 64-bit and never wrap in practice (at 10^9
//     messages a second a lane lasts 584 years).
package ring
