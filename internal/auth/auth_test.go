package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"testing"
)

// MAC is HMAC-SHA256 over length-prefixed label and fields, byte for
// byte as the package doc states.
func TestMACBytes(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	m := hmac.New(sha256.New, key)
	m.Write([]byte{0, 0, 0, 5})
	m.Write([]byte("label"))
	m.Write([]byte{0, 0, 0, 2})
	m.Write([]byte("ab"))
	m.Write([]byte{0, 0, 0, 0})
	m.Write([]byte{0, 0, 0, 1})
	m.Write([]byte("c"))
	if got := mac(key, "label", []byte("ab"), nil, []byte("c")); !bytes.Equal(got, m.Sum(nil)) || len(got) != MACSize {
		t.Fatalf("MAC % x", got)
	}
}

// Fields that concatenate to the same bytes, labels that differ, keys
// that differ: all give different MACs; Verify accepts only the right one.
func TestMACSeparates(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	macs := [][]byte{
		mac(key, "l", []byte("ab"), []byte("c")),
		mac(key, "l", []byte("a"), []byte("bc")),
		mac(key, "l", []byte("abc")),
		mac(key, "la", []byte("bc")),
		mac(key, "m", []byte("ab"), []byte("c")),
		mac([]byte("another key of thirty-two bytes!"), "l", []byte("ab"), []byte("c")),
	}
	for i := range macs {
		for j := i + 1; j < len(macs); j++ {
			if bytes.Equal(macs[i], macs[j]) {
				t.Errorf("MACs %d and %d are equal", i, j)
			}
		}
	}
	if !verify(macs[0], key, "l", []byte("ab"), []byte("c")) || verify(macs[1], key, "l", []byte("ab"), []byte("c")) {
		t.Fatal("Verify")
	}
	if a, b := nonce(), nonce(); len(a) != NonceSize || bytes.Equal(a, b) {
		t.Fatal("Nonce")
	}
}

// verify reports, in constant time, whether m is mac(key, label,
// fields...).
func verify(m, key []byte, label string, fields ...[]byte) bool {
	return equal(m, mac(key, label, fields...))
}
