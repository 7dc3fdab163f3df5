package boot

import "github.com/goshmem/goshmem/internal/auth"

// The handshake proves, in both directions, knowledge of the job key
// without sending it, with the runtime's one challenge-response exchange
// (auth.Exchange; its bytes are in docs/wire.md). After Hello and Join
// the server runs it as the initiator and the client as the responder,
// on the raw connection between those frames and Welcome, with label
// labelBoot and bound fields
//
//	jobID (UTF-8), rank (4 bytes big-endian), size (4 bytes big-endian)
//
// so the proofs cover what the client claims in Join and the job it
// checked in Hello. The server checks the client's proof before it
// proves anything, and before it judges the rank or size.
const labelBoot = "goshmem-boot-v2"

// bootBound is the exchange's bound fields. rank and size must fit in a
// uint32 (join.check and Dial guarantee it).
func bootBound(jobID string, rank, size int) [][]byte {
	return [][]byte{[]byte(jobID), auth.Uint32(uint32(rank)), auth.Uint32(uint32(size))}
}
