package ring

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
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

// Known bytes of an eager header decode to known fields and re-encode;
// every truncated prefix, bytes 2-3 set, and a length field that is not
// the payload's (one more, one less, the payload cut or grown) is
// ErrProtocol.
func TestCommWireEager(t *testing.T) {
	// eager: kind 14 (float64), comm 5, tag 9, 3 payload bytes
	const known = "010e0000" + "05000000" + "09000000" + "03000000" + "aabbcc"
	b, err := hex.DecodeString(known)
	if err != nil {
		t.Fatal(err)
	}
	want := header{typ: msgEager, kind: 14, comm: 5, tag: 9, n: 3}
	h, payload, err := parseHeader(b)
	if err != nil || h != want || !bytes.Equal(payload, []byte{0xaa, 0xbb, 0xcc}) {
		t.Fatalf("%s: %+v, payload %x, %v; want %+v, aabbcc", known, h, payload, err, want)
	}
	var re [hdrEager]byte
	putEager(re[:], h.kind, h.comm, h.tag, int(h.n))
	if !bytes.Equal(re[:], b[:hdrEager]) {
		t.Errorf("%s re-encodes as %x", known, re)
	}
	for n := range len(b) {
		if _, _, err := parseHeader(b[:n]); !errors.Is(err, shmem.ErrProtocol) {
			t.Errorf("%s cut to %d bytes: %v, want ErrProtocol", known, n, err)
		}
	}
	if _, _, err := parseHeader(append(bytes.Clone(b), 0xdd)); !errors.Is(err, shmem.ErrProtocol) {
		t.Errorf("%s with a byte more payload: %v, want ErrProtocol", known, err)
	}
	for _, i := range []int{2, 3} {
		bad := bytes.Clone(b)
		bad[i] = 1
		if _, _, err := parseHeader(bad); !errors.Is(err, shmem.ErrProtocol) {
			t.Errorf("%s with byte %d set: %v, want ErrProtocol", known, i, err)
		}
	}
	for _, n := range []uint32{0, 2, 4, 1 << 16, 1<<32 - 1} {
		bad := bytes.Clone(b)
		binary.LittleEndian.PutUint32(bad[12:], n)
		if _, _, err := parseHeader(bad); !errors.Is(err, shmem.ErrProtocol) {
			t.Errorf("%s with length %d: %v, want ErrProtocol", known, n, err)
		}
	}
}

// comm-malformed: eager lane messages whose header's length is not
// their payload's, put on PE 1's Comm lane to PE 0 beside Send, are
// dropped: the Recv that meets them returns ErrProtocol and Status{},
// and the well-formed message sent after them is the next Recv's, whole.
var _ = register("comm-malformed", func(pe *shmem.PE) error {
	c, err := NewComm(pe.World())
	if err != nil {
		return err
	}
	e := c.e
	switch c.Rank() {
	case 1:
		// 5 bytes said, 3 carried (inline); 0 said, 40 carried (through
		// a bulk area); 40 said, 39 carried.
		for _, m := range []struct{ said, n int }{{5, 3}, {0, 40}, {40, 39}} {
			var h [hdrEager]byte
			putEager(h[:], kindOf[byte](), c.id, 7, m.said)
			if err := e.hold(); err != nil {
				return err
			}
			_, sent, err := e.r.outTo[c.world[0]].sendv(e.r, h[:], make([]byte, m.n), false)
			e.pe.Exit()
			if err != nil || !sent {
				return fmt.Errorf("raw lane send: sent %v, %v", sent, err)
			}
		}
	}
	// Sends completed before a barrier are visible to Poll after it: PE
	// 0's Recv finds the bad messages at its first look.
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	if c.Rank() == 0 {
		dst := make([]byte, 64)
		st, err := Recv(bg(), c, AnySource, AnyTag, dst)
		if !errors.Is(err, shmem.ErrProtocol) || st != (Status{}) {
			return fmt.Errorf("Recv over malformed messages: %+v, %v; want Status{}, ErrProtocol", st, err)
		}
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	switch c.Rank() {
	case 1:
		if err := Send(bg(), c, 0, 8, []byte{1, 2, 3}); err != nil {
			return err
		}
	case 0:
		dst := make([]byte, 64)
		st, err := Recv(bg(), c, AnySource, AnyTag, dst)
		if err != nil || st != (Status{Source: 1, Tag: 8, Bytes: 3}) || !bytes.Equal(dst[:3], []byte{1, 2, 3}) {
			return fmt.Errorf("Recv after the malformed messages: %+v, %v, %x; want tag 8, 3 bytes 010203", st, err, dst[:3])
		}
	}
	return closeComm(pe, c)
})

func TestCommMalformed(t *testing.T) { each(t, "comm-malformed", 2) }

// commLimits against the rule its comment states, at its edges: the full
// eager limit from 3,786,496 heap bytes a peer, 4 KiB steps below it,
// ErrHeapExhausted under 345,856 a peer, and the frag size (FragMax once
// an eighth of the heap holds it, the largest multiple of 4 KiB that it
// holds below that) never below the eager limit.
func TestCommLimits(t *testing.T) {
	const full, least = 3_786_496, 345_856
	for _, c := range []struct {
		heap, n, frag, eager int
	}{
		{1 << 20, 1, FragMax, EagerMax},
		{full, 2, 64 << 10, 64 << 10},
		{full - 1, 2, 60 << 10, 60 << 10},
		{7 * full, 8, 64 << 10, 64 << 10},
		{16 << 20, 8, 36 << 10, 36 << 10},   // docs/ring.md's example
		{128 << 20, 36, 64 << 10, 64 << 10}, // the default heap's most PEs at 64 KiB
		{128 << 20, 37, 60 << 10, 60 << 10},
		{128 << 20, 2, 580 << 10, EagerMax}, // an eighth of it holds 580 KiB frags
		{128 << 20, 3, 288 << 10, EagerMax},
		{256 << 20, 2, FragMax, EagerMax},  // and of this one 1 MiB frags
		{128 << 20, 8, 80 << 10, EagerMax}, // docs/ring.md's example
		{least, 2, 4 << 10, 4 << 10},
		{3 * least, 4, 4 << 10, 4 << 10},
		{least - 1, 2, 0, 0},
		{0, 2, 0, 0},
	} {
		frag, eager, err := commLimits(c.heap, c.n)
		if c.eager == 0 {
			if !errors.Is(err, shmem.ErrHeapExhausted) {
				t.Errorf("%d PEs, %d-byte heap: %d, %d, %v; want ErrHeapExhausted", c.n, c.heap, frag, eager, err)
			}
			continue
		}
		if err != nil || frag != c.frag || eager != c.eager {
			t.Errorf("%d PEs, %d-byte heap: frag %d, eager %d, %v; want %d, %d", c.n, c.heap, frag, eager, err, c.frag, c.eager)
		}
	}
}

// rdvCut against the rule its comment states, for every length from
// just above the least eager limit to a few frags, and at the frag
// sizes a Comm uses: a final frag longer than corkMax (published at
// once) and at most a frag, at least half the message when that is under a frag; early
// frags whole, before the final one, at most specFrags and specBytes
// (but at least one frag).
func TestRdvCut(t *testing.T) {
	for _, frag := range []int{minFrag, 64 << 10, nearFrag, 288 << 10, 580 << 10, FragMax} {
		for _, n := range []int{minFrag + 1, frag - 1, frag, frag + 1, 2*frag - 1, 2 * frag, 2*frag + 1, 3*frag + 7, 17*frag + 3, 64 << 20} {
			if n <= minFrag {
				continue
			}
			last, spec := rdvCut(n, frag)
			final := n - last
			switch {
			case final <= corkMax || final > frag:
				t.Errorf("n %d, frag %d: final frag of %d bytes (it must not be corked: over %d)", n, frag, final, corkMax)
			case final < frag && 2*final < n:
				t.Errorf("n %d, frag %d: final frag of %d bytes, under half and under a frag", n, frag, final)
			case spec < 0 || spec > last || spec%frag != 0 && spec != last:
				t.Errorf("n %d, frag %d: early up to %d, final from %d", n, frag, spec, last)
			case spec > specFrags*frag || spec > max(frag, specBytes):
				t.Errorf("n %d, frag %d: %d bytes early", n, frag, spec)
			case spec < min(last, frag):
				t.Errorf("n %d, frag %d: only %d bytes early, final from %d", n, frag, spec, last)
			}
		}
	}
}
