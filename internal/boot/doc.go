// Package boot is goshmem's bootstrap rendezvous: the control plane that
// a launcher (goshrun) runs and every PE joins at each Init.
//
// The launcher runs a Server on a TCP listener. Each PE Dials it with the
// job id, the job key, its rank and the job size (all from the
// environment; see env.go), authenticates, and keeps the connection until
// Finalize. Over it the PE runs Allgather rounds (the runtime exchanges
// its bootstrap table this way), asks for GlobalExit (Exit), and says
// goodbye (Close). A PE may Init again after Finalize: it Dials again
// with the same rank (see Generations). The server reports joins, exit
// requests and dropped connections to the launcher as Events.
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
//	0x01  Hello         s -> c     magic "goshboot", version 2, job
//	0x02  Join          c -> s     rank, size; then the key exchange (auth.go)
//	0x03  Welcome       s -> c     (empty map)
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
//	0x23  JobEnded      s -> c     rank, code (another rank called GlobalExit)
//
// msg.go has the per-message tables and bounds.
//
// # Handshake
//
// The server sends Hello. The client checks magic, version and job id,
// and answers Join with its rank and the job size. Then, on the raw
// connection and outside any frame, the two run the runtime's one
// challenge-response exchange (auth.Exchange, the server its initiator;
// see auth.go for the label and bound fields): the server checks the
// client's proof first, the client the server's. The server then checks
// that the size matches, the rank is in range and the rank may join
// (see Generations), and answers Welcome. The key never goes on the
// wire. On a failed exchange the refusing side sends the exchange's
// REFUSE, on any other failure Error, and closes; the client's error
// wraps errs.Auth, and the job is unaffected (the peer never joined).
// The whole handshake is bounded by HandshakeTimeout.
//
// # Rounds
//
// Allgather round R (R = 1, 2, ... per connection) sends Gather{R,
// data}. When all ranks have sent round R of the current generation the
// server sends every rank GatherResult{R, parts}. If a joined rank's
// connection drops without Bye, in any generation, the server sends
// PeerLost to every connected rank: the pending round and every later
// one, of this and every later generation, fail with errs.PeerLost. A
// rank that said Bye is also fatal to any round of its generation it has
// not taken part in (a round it has sent its part to still completes). A
// client whose ctx expires asks Status{R} and reports how many ranks had
// arrived.
//
// # Generations
//
// OpenSHMEM lets a program call Init again after Finalize and start
// afresh. Under the launcher each Init Dials the same server with the
// same rank, so the server groups connections into generations, and
// never mixes them:
//
//   - Every rank's first connection belongs to generation 1.
//   - A rank whose connection of generation g said Bye may join again;
//     its new connection belongs to generation g+1. A rank whose
//     connection is open is refused ("already joined"), as is a second
//     connection to generation g+1 ("already joined generation g+1") and
//     any connection of a lost rank ("was lost"). So each rank holds at
//     most two connections: one in generation g, one waiting for g+1.
//   - Generation g ends when every rank has said Bye to it. Then
//     generation g+1 starts: round 1, fresh parts, with the ranks that
//     have joined it; the others join it directly when they connect.
//   - A connection waiting for its generation gets Welcome at once. Its
//     round-1 Gather (it cannot send round 2 before round 1's result) is
//     held and counted when the generation starts; its Status{1} counts
//     the held parts of generation g+1. Its Exit works as on any
//     connection. Its Bye counts when the generation starts: the rank
//     has left it (with its held part, if any). Its loss fails the job at
//     once, as any loss.
//
// Within a generation everything above holds as for a single Init: a
// rank that says Bye before the others fails the rounds they run without
// it. The job's first loss (PeerLost) is never reset: a lost rank never
// says Bye, so its generation never ends and no later one starts, and
// connections waiting for one get PeerLost too. EventJoined is reported
// again, with Event.Gen, for each rejoin.
//
// # Caveats
//
//   - A timed-out or cancelled Allgather leaves that client out of step
//     with the job (its part was sent, its result abandoned); all its
//     later Allgather calls fail. The usual response is to end the job.
//   - Bad bytes from a peer close that peer's connection only: a
//     stranger's never joined; a joined rank's becomes a lost rank.
//   - Events are buffered for every first EventJoined, EventLost and
//     EventExit a job can produce (each at most once per rank); the
//     channel closes when Serve returns. The EventJoined of a rejoin
//     (Gen > 1) is best effort: it is dropped rather than take room one
//     of those may still need, which happens only if the reader falls
//     behind by about 8 events.
//   - Generations assume the SPMD discipline: every rank runs Init,
//     the same Allgather rounds and Finalize, the same number of times.
//     A rank that Inits more often than the others waits in its last
//     generation until its ctx expires; the server cannot tell it from a
//     slow rank.
package boot
