package boot

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"hash"
)

// The handshake proves, in both directions, knowledge of the job key
// without sending it:
//
//	clientMAC = HMAC-SHA256(key, "goshmem-boot-client" || serverNonce || clientNonce || jobID || rank)
//	serverMAC = HMAC-SHA256(key, "goshmem-boot-server" || clientNonce || serverNonce || jobID || rank)
//
// Nonces are 32 bytes, rank is 4 bytes big-endian, jobID is its UTF-8
// bytes. The job id sits between fixed-width fields, so the concatenation
// is unambiguous. Each side picks a fresh nonce per connection, so a
// recorded exchange cannot be replayed against either side, and the two
// labels keep a client MAC from being reflected back as a server MAC.
const (
	labelClient = "goshmem-boot-client"
	labelServer = "goshmem-boot-server"
)

// handshakeMAC computes one of the two MACs. rank must fit in a uint32
// (join.check guarantees it for received values).
func handshakeMAC(key []byte, label string, first, second []byte, jobID string, rank int) []byte {
	var m hash.Hash = hmac.New(sha256.New, key)
	m.Write([]byte(label))
	m.Write(first)
	m.Write(second)
	m.Write([]byte(jobID))
	m.Write(binary.BigEndian.AppendUint32(nil, uint32(rank)))
	return m.Sum(nil)
}

func clientMAC(key, serverNonce, clientNonce []byte, jobID string, rank int) []byte {
	return handshakeMAC(key, labelClient, serverNonce, clientNonce, jobID, rank)
}

func serverMAC(key, clientNonce, serverNonce []byte, jobID string, rank int) []byte {
	return handshakeMAC(key, labelServer, clientNonce, serverNonce, jobID, rank)
}

// newNonce returns nonceSize fresh random bytes. crypto/rand.Read never
// fails on Linux (it aborts the process if the kernel cannot supply
// randomness).
func newNonce() []byte {
	b := make([]byte, nonceSize)
	rand.Read(b)
	return b
}
