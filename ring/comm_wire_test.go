package ring

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// The Comm header's constants and layout, pinned against the byte table
// (comm_wire.go, docs/ring.md "The header"), and the claim word's.
func TestCommWireConst(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"msgEager", msgEager, 1}, {"msgRTS", msgRTS, 2}, {"msgFrag", msgFrag, 3}, {"msgAbort", msgAbort, 4},
		{"hdrEager", hdrEager, 16}, {"hdrLong", hdrLong, 32},
		{"rdvFree", rdvFree, 0}, {"rdvMatched", rdvMatched, 1}, {"rdvGiven", rdvGiven, 2}, {"rdvDone", rdvDone, 3},
		{"claimsPer", claimsPer, 8},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if w := rdvWord(0x01020304, 0xABCDEF, rdvDone); w != 0x01020304_ABCDEF_03 {
		t.Errorf("rdvWord = %#x", w)
	}
	if id, ep, st := rdvSplit(0x01020304_ABCDEF_03); id != 0x01020304 || ep != 0xABCDEF || st != rdvDone {
		t.Errorf("rdvSplit: id %#x epoch %#x state %d", id, ep, st)
	}
}

// Known bytes of each long header decode to known fields; every
// truncated prefix and each field the table leaves zero, set, is
// ErrProtocol.
func TestCommWireKnown(t *testing.T) {
	for _, c := range []struct {
		hex string
		h   header
		pay int
	}{
		// rts: kind 8 (uint8), comm 5, tag 9, 1 MiB, id 7
		{"02080000" + "05000000" + "09000000" + "00000000" + "0000100000000000" + "07000000" + "00000000",
			header{typ: msgRTS, kind: 8, comm: 5, tag: 9, n: 1 << 20, id: 7}, 0},
		// frag: offset 0x40000, id 7, epoch 2, 3 payload bytes
		{"03080000" + "05000000" + "00000000" + "00000000" + "0000040000000000" + "07000000" + "02000000" + "aabbcc",
			header{typ: msgFrag, kind: 8, comm: 5, n: 0x40000, id: 7, epoch: 2}, 3},
		// abort: id 7
		{"04080000" + "05000000" + "00000000" + "00000000" + "0000000000000000" + "07000000" + "00000000",
			header{typ: msgAbort, kind: 8, comm: 5, id: 7}, 0},
	} {
		b, err := hex.DecodeString(c.hex)
		if err != nil {
			t.Fatal(err)
		}
		h, payload, err := parseHeader(b)
		if err != nil || h != c.h || len(payload) != c.pay {
			t.Errorf("%s: %+v, %d payload bytes, %v; want %+v, %d", c.hex, h, len(payload), err, c.h, c.pay)
			continue
		}
		var re [hdrLong]byte
		putLong(re[:], h.typ, h.kind, h.comm, h.tag, h.n, h.id, h.epoch)
		if !bytes.Equal(re[:], b[:hdrLong]) {
			t.Errorf("%s re-encodes as %x", c.hex, re)
		}
		for n := range hdrLong {
			if _, _, err := parseHeader(b[:n]); !errors.Is(err, shmem.ErrProtocol) {
				t.Errorf("%s cut to %d bytes: %v, want ErrProtocol", c.hex, n, err)
			}
		}
		// Bytes the type leaves zero: 2-3, 12-15, the id when 0 (it must
		// not be), the tag of a frag or abort, the epoch of an rts or
		// abort, the offset of an abort.
		zero := []int{2, 3, 12, 13, 14, 15}
		switch h.typ {
		case msgRTS:
			zero = append(zero, 28)
		case msgFrag:
			zero = append(zero, 8)
		case msgAbort:
			zero = append(zero, 8, 16, 28)
		}
		for _, i := range zero {
			bad := bytes.Clone(b)
			bad[i] = 1
			if _, _, err := parseHeader(bad); !errors.Is(err, shmem.ErrProtocol) {
				t.Errorf("%s with byte %d set: %v, want ErrProtocol", c.hex, i, err)
			}
		}
		noID := bytes.Clone(b)
		clear(noID[24:28])
		if _, _, err := parseHeader(noID); !errors.Is(err, shmem.ErrProtocol) {
			t.Errorf("%s with id 0: %v, want ErrProtocol", c.hex, err)
		}
	}
}
