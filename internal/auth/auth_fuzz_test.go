package auth

import (
	"bytes"
	"testing"
)

// FuzzMAC: the fields' framing makes different field lists different
// messages: the same bytes split at two different places give different
// MACs; Verify accepts the MAC and nothing else near it (a flipped bit,
// a cut or a longer MAC), whatever bytes it is handed.
func FuzzMAC(f *testing.F) {
	f.Add([]byte("0123456789abcdef0123456789abcdef"), "goshmem-seg2-proof", []byte("nonce-a nonce-b"), uint8(3), uint8(9), []byte{})
	f.Add([]byte{}, "", []byte{}, uint8(0), uint8(0), []byte{1, 2, 3})
	f.Add([]byte("k"), "l", []byte{0, 0, 0, 1, 0}, uint8(1), uint8(4), bytes.Repeat([]byte{0xff}, MACSize))
	f.Fuzz(func(t *testing.T, key []byte, label string, b []byte, i, j uint8, other []byte) {
		si, sj := int(i)%(len(b)+1), int(j)%(len(b)+1)
		mi := mac(key, label, b[:si], b[si:])
		if len(mi) != MACSize {
			t.Fatalf("MAC of %d bytes", len(mi))
		}
		if si != sj && bytes.Equal(mi, mac(key, label, b[:sj], b[sj:])) {
			t.Fatalf("splitting %x at %d and at %d gives the same MAC", b, si, sj)
		}
		if bytes.Equal(mi, mac(key, label, b)) {
			t.Fatalf("two fields and their concatenation give the same MAC")
		}
		if !verify(mi, key, label, b[:si], b[si:]) {
			t.Fatal("Verify refuses the MAC")
		}
		flip := append([]byte(nil), mi...)
		flip[int(j)%MACSize] ^= 1 << (i % 8)
		if verify(flip, key, label, b[:si], b[si:]) || verify(mi[:MACSize-1], key, label, b[:si], b[si:]) ||
			verify(append(mi, 0), key, label, b[:si], b[si:]) {
			t.Fatal("Verify accepts a damaged MAC")
		}
		if !bytes.Equal(other, mi) && verify(other, key, label, b[:si], b[si:]) {
			t.Fatalf("Verify accepts %x", other)
		}
	})
}
