// Package netmesh is goshmem's remote path: an authenticated full mesh of
// TCP connections between PEs on different hosts, carrying one-sided
// PUT, GET, atomic, put-with-signal, flush, heartbeat and goodbye frames
// that the receiving side applies straight into its segment.
//
// A Mesh is one PE's end. Listen validates the configuration and starts
// accepting; Addr is what the PE publishes; Connect(peers) links it with
// every remote PE (the lower rank of a pair dials, the higher one
// accepts; both run the handshake of handshake.go). Link(rank) returns the
// link to one peer, whose methods (Put, PutNBI, PutBlocks,
// Get, GetNBI, Atomic, AtomicNBI, PutSignal, PutSignalNBI, Flush, Fence)
// operate on the peer's segment by offset. netmesh never imports shmem: shmem owns the routing decision
// (shared memory for same-host peers, a Link for the others) and the
// public API's argument checks.
//
// The wire format is fixed binary, little-endian, version byte first;
// docs/wire.md is its normative description and each frame_*.go file
// carries the byte table of the frames it encodes. Per connection,
// frames are applied in order by whoever holds the connection's read
// token: PUT payloads are read from the socket into the segment, GETs are
// answered from the segment, atomics use Config.Atomics on the segment,
// which its owner wires to the same hardware atomics the same-host path
// uses, so both are coherent on one word (netmesh does not import heap).
// The send side (writer.go) coalesces small frames from many goroutines
// into one write and sends large payloads from the caller's
// slice without copying. With Config.Streams > 1, large PUTs and GETs are
// striped over several connections per pair.
//
// Channels (chan.go): Link.OpenChannel opens an independent completion
// stream over a link, a connection of its own (opened on demand with the
// same handshake, by either side), whose Flush waits for its own frames
// only; Link.Flush covers the link's own connections (the default
// context's operations) and Link.FlushAll every connection. At most
// Config.ChanStreams (default and most MaxChanStreams, 64) per side and
// link; beyond, channels share (shmem never goes beyond: it bounds a PE's
// open contexts instead).
//
// Who reads (lead.go, watch.go): a caller blocked in Get, Atomic or Flush
// that finds the connection's read token free reads the connection itself
// until its reply has arrived (applying whatever comes before it, as any
// reader does), so the reply wakes the goroutine that waits for it
// directly, with no hand-off through the Go scheduler; callers that find
// the token held wait for the holder to apply their reply or to hand the
// token over. While no caller reads, the connection's reader goroutine
// does: it sleeps on an epoll set of its own, which arrivals signal only
// while the token is free (the socket is quiet, SO_RCVLOWAT raised, while
// anyone else has it), so a caller's round trip wakes nobody but the
// caller. While it pays (Config.Spin, spin.go), a goroutine waiting
// for bytes polls the socket before it sleeps in the netpoller, and a
// goroutine waiting for its segment to change can poll every stream
// (Mesh.Poll): about the kernel's round trip instead of a thread wake-up
// per frame (docs/wire.md, "Engine").
//
// Faults: a peer that closes, resets, stays silent for Heartbeat*Misses
// while its host acknowledges nothing, or leaves sent data
// unacknowledged that long is lost (a silent peer whose host keeps
// acknowledging is busy or stopped, not lost: watchdog.go): Config.OnLost
// is called once, then every operation pending on the link fails with an
// error wrapping errs.PeerLost that names the rank (so none of them
// returns before OnLost did), and later operations fail at once. A peer that breaks the protocol is sent an ERROR frame and
// dropped the same way, with errs.Protocol as well. A peer that says
// goodbye is not lost: operations on its link fail with errs.Finalized.
//
// Caveats. Put returns when src may be reused, not when the data arrived:
// only Flush (or a blocking Get or Atomic on the same stream, which
// travels behind it) says the peer applied it. PutNBI's src and GetNBI's
// dst belong to the link until the next Flush returns; AtomicNBI's *dst is
// written by the goroutine reading the stream and is valid only after that
// Flush. A GET is answered from the peer's memory after every earlier
// frame on that stream was applied: a small one (up to 2 KiB) as the
// memory is when the GET is applied, a larger one as it is when the reply
// is written. With
// Streams > 1, operations on different streams are not ordered with
// each other: Fence then costs a Flush, while with one stream it is
// free. A blocking Get or Atomic that waits longer than Config.Timeout
// (checked by the mesh's watchdog, so up to min(Heartbeat/2, Timeout/8)
// later) returns errs.Timeout and leaves the link up (a late reply is
// dropped);
// a blocking Put of a large slice waits for the socket without a timeout
// (the link's loss detection bounds it). Notify runs on the goroutine
// reading the stream (its reader goroutine, or a caller blocked in Get,
// Atomic or Flush on that link) and OnLost on whichever goroutine noticed
// the loss (possibly one calling a Link method): both must return
// promptly, Notify must not call a blocking Link method, and OnLost must
// not wait for Close. A lost link is not reconnected. The race detector
// does not see the kernel's reads of a segment (large GET replies are
// written from it), nor the copy a reader makes of a small GET reply, and
// cannot order what one process's meshes do through a socket: tests that
// inspect a peer's segment synchronise through Notify.
package netmesh
