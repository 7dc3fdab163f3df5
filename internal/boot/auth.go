package boot

import "github.com/goshmem/goshmem/internal/auth"

// The handshake proves, in both directions, knowledge of the job key
// without sending it, with the runtime's one challenge-response MAC
// (internal/auth: HMAC-SHA256 over length-prefixed fields):
//
//	clientMAC = auth.MAC(key, "goshmem-boot-client", serverNonce, clientNonce, jobID, rank)
//	serverMAC = auth.MAC(key, "goshmem-boot-server", clientNonce, serverNonce, jobID, rank)
//
// Nonces are 32 bytes, rank is 4 bytes big-endian, jobID is its UTF-8
// bytes. Each side picks a fresh nonce per connection, so a recorded
// exchange cannot be replayed against either side, and the two labels
// keep a client MAC from being reflected back as a server MAC.
const (
	labelClient = "goshmem-boot-client"
	labelServer = "goshmem-boot-server"
)

// handshakeMAC computes one of the two MACs. rank must fit in a uint32
// (join.check guarantees it for received values).
func handshakeMAC(key []byte, label string, first, second []byte, jobID string, rank int) []byte {
	return auth.MAC(key, label, first, second, []byte(jobID), auth.Uint32(uint32(rank)))
}

func clientMAC(key, serverNonce, clientNonce []byte, jobID string, rank int) []byte {
	return handshakeMAC(key, labelClient, serverNonce, clientNonce, jobID, rank)
}

func serverMAC(key, clientNonce, serverNonce []byte, jobID string, rank int) []byte {
	return handshakeMAC(key, labelServer, clientNonce, serverNonce, jobID, rank)
}

// newNonce returns nonceSize fresh random bytes.
func newNonce() []byte { return auth.Nonce() }
