// Package boot is goshmem's bootstrap rendezvous: the control plane that
// a launcher (goshrun) runs and every PE joins once at start.
//
// The launcher runs a Server on a TCP listener. Each PE Dials it with the
// job id, the job key, its rank and the job size (all from the
// environment; see env.go), authenticates, and keeps the connection for
// the life of the job. Over it the PE runs Allgather rounds (the runtime
// exchanges its bootstrap table this way), asks for GlobalExit (Exit),
// and says goodbye (Close). The server reports joins, exit requests and
// dropped connections to the launcher as Events.
//
// # Wire format
//
// Every message is one frame: a 4-byte big-endian length L (1 <= L <=
// 16 MiB, bytes after the length word), a kind byte, then the message
// struct msgpack-encoded as a map keyed by field names
// (hashicorp/go-msgpack, MsgpackHandle with WriteExt: []byte is msgpack
// bin). Unknown map keys are ignored, so fields can be added; a new
// meaning needs a new kind or Version.
//
//	kind  name          direction  fields (codec names)
//	0x01  Hello         s -> c     magic "goshboot", version 1, job, nonce [32]
//	0x02  Join          c -> s     rank, size, nonce [32], mac [32]
//	0x03  Welcome       s -> c     mac [32]
//	0x04  Error         both       code (1 auth, 2 protocol, 3 invalid), msg
//	0x10  Gather        c -> s     round (1, 2, ...), data (<= 1 MiB)
//	0x11  GatherResult  s -> c     round, data (one bin per rank, by rank)
//	0x12  RoundFailed   s -> c     round, msg
//	0x13  PeerLost      s -> c     rank, msg
//	0x14  Status        c -> s     round
//	0x15  StatusReply   s -> c     round, arrived, missing (<= 32 ranks)
//	0x20  Exit          c -> s     code
//	0x21  ExitAck       s -> c     code
//	0x22  Bye           c -> s     (empty map)
//
// msg.go has the per-message tables and bounds.
//
// # Handshake
//
// The server sends Hello with a fresh nonce. The client checks magic,
// version and job id, and answers Join with its own nonce and
//
//	HMAC-SHA256(key, "goshmem-boot-client" || serverNonce || clientNonce || jobID || rank as 4 bytes BE)
//
// The server checks the MAC (in constant time), then that the size
// matches and the rank is in range and not already taken, and answers
// Welcome with
//
//	HMAC-SHA256(key, "goshmem-boot-server" || clientNonce || serverNonce || jobID || rank as 4 bytes BE)
//
// which the client checks. The key never goes on the wire. On any
// failure the refusing side sends Error and closes; the client's error
// wraps errs.Auth, and the job is unaffected (the peer never joined).
// The whole handshake is bounded by HandshakeTimeout.
//
// # Rounds
//
// Allgather round R (R = 1, 2, ... per client) sends Gather{R, data}.
// When all ranks have sent round R the server sends every rank
// GatherResult{R, parts}. If a joined rank's connection drops without
// Bye, the server sends PeerLost to every rank: the pending round and
// every later one fail with errs.PeerLost. A rank that said Bye is also
// fatal to any round it has not taken part in. A client whose ctx
// expires asks Status{R} and reports how many ranks had arrived.
//
// # Caveats
//
//   - A timed-out or cancelled Allgather leaves that client out of step
//     with the job (its part was sent, its result abandoned); all its
//     later Allgather calls fail. The usual response is to end the job.
//   - Bad bytes from a peer close that peer's connection only: a
//     stranger's never joined; a joined rank's becomes a lost rank.
//   - Events are buffered for every event a job can produce; the channel
//     closes when Serve returns.
package boot
