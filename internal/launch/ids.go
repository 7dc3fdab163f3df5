package launch

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/goshmem/goshmem/internal/boot"
)

// NewJobID returns a fresh job id: "gosh-" and 16 random hex digits.
func NewJobID() string {
	b := make([]byte, 8)
	rand.Read(b) // never fails on Linux
	return "gosh-" + hex.EncodeToString(b)
}

// NewKey returns a fresh job key of boot.KeySize (32) random bytes.
func NewKey() []byte {
	b := make([]byte, boot.KeySize)
	rand.Read(b)
	return b
}
