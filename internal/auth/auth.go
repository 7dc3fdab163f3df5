// Package auth is goshmem's one challenge-response exchange. Every
// handshake of the runtime (a PE joining the launcher's boot server,
// two PEs opening a mesh connection, two same-host PEs exchanging their
// segments) proves knowledge of the job key by running Exchange
// (exchange.go) under a label of its own, with the fields it sent in
// the clear before as bound data: each side sends a fresh nonce, and
// each proves with a MAC over both nonces, its role, the label and the
// bound fields. The key itself never goes on the wire.
//
// MAC is HMAC-SHA256 keyed with the job key over the label and then
// each field preceded by its length, 4 bytes big-endian:
//
//	MAC(key, label, f1, ..., fn) = HMAC-SHA256(key,
//	    len(label) ‖ label ‖ len(f1) ‖ f1 ‖ ... ‖ len(fn) ‖ fn)
//
// so no two different lists of fields hash the same bytes, whatever the
// fields hold.
//
// Caveats: an exchange proves the key, nothing else: it does not bind
// the bytes that follow on the connection (a stream a third party could
// rewrite after the exchange is not protected), and a relay between two
// genuine PEs passes it. The job key sits in each PE's environment
// (readable by the user's other processes); see docs/env.md.
package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
)

// NonceSize is the length of a nonce; MACSize that of a MAC.
const (
	NonceSize = 32
	MACSize   = sha256.Size
)

// mac returns the MAC of fields under label with key (see the package
// doc for the exact bytes). It is unexported so that Exchange stays the
// only way the runtime proves the key.
func mac(key []byte, label string, fields ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(label)))
	m.Write(n[:])
	m.Write([]byte(label))
	for _, f := range fields {
		binary.BigEndian.PutUint32(n[:], uint32(len(f)))
		m.Write(n[:])
		m.Write(f)
	}
	return m.Sum(nil)
}

// nonce returns NonceSize fresh random bytes. crypto/rand.Read never
// fails on Linux (it aborts the process if the kernel cannot supply
// randomness).
func nonce() []byte {
	b := make([]byte, NonceSize)
	rand.Read(b)
	return b
}

// Uint32 is v as 4 bytes big-endian, for a bound field of Exchange.
func Uint32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// equal reports, in constant time, whether two MACs are equal.
func equal(a, b []byte) bool { return hmac.Equal(a, b) }
