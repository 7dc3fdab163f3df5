package ring

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"
)

// The slot layout is a wire format: pin every offset and size.
func TestSlotConst(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"offSeq", offSeq, 0},
		{"offWord", offWord, 8},
		{"offCRC", offCRC, 12},
		{"offPayload", offPayload, 16},
		{"tailSize", tailSize, 8},
		{"slotFixed", slotFixed, 24},
		{"bulkFlag", int(uint32(bulkFlag) >> 16), 0x8000},
		{"descMagic>>32", descMagic >> 32, 0x676e6972},
		{"Safe", int(Safe), 1},
		{"Raw", int(Raw), 2},
		{"slotSize(8, 64)", slotSize(8, 64), 64},
		{"slotSize(40, 64)", slotSize(40, 64), 64},
		{"slotSize(41, 64)", slotSize(41, 64), 128},
		{"slotSize(64, 64)", slotSize(64, 64), 128},
		{"slotSize(InlineMax, 64)", slotSize(InlineMax, 64), 1088},
		{"slotSize(8, 128)", slotSize(8, 128), 128},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x, want %#x", c.name, c.got, c.want)
		}
	}
}

// Known bytes decode to known fields: message 2 carrying "hi" in a
// 64-byte slot. The CRC was computed independently, with a bitwise
// CRC32C (polynomial 0x82F63B78) of 02 00 00 00 00 00 00 00 02 00 00 00 'h' 'i'.
func TestSlotKnownBytes(t *testing.T) {
	want := "0200000000000000" + "02000000" + "ae931501" + "6869" + // seq, word, crc, "hi"
		strings.Repeat("00", 38) + // padding
		"fdffffffffffffff" // tail ^2
	img := make([]byte, 64)
	encodeSlot(img, 2, []byte("hi"))
	if got := hex.EncodeToString(img); got != want {
		t.Fatalf("encoded\n%s\nwant\n%s", got, want)
	}
	v, st := decodeSlot(img)
	if st != slotOK || v.seq != 2 || v.n != 2 || v.bulk || string(v.payload) != "hi" {
		t.Fatalf("decoded %+v, %v", v, st)
	}
	// A bulk message of 70000 bytes: no inline payload.
	encodeBulkSlot(img, 9, 70000, 0xdeadbeef)
	v, st = decodeSlot(img)
	if st != slotOK || v.seq != 9 || v.n != 70000 || !v.bulk || hex.EncodeToString(v.payload) != "efbeadde" {
		t.Fatalf("bulk decoded %+v, %v", v, st)
	}
	if img[offWord+3] != 0x80 {
		t.Fatalf("bulk flag byte %#x", img[offWord+3])
	}
}

// Every truncated prefix is an error, never a panic; so is every length
// that is not a multiple of 8.
func TestSlotTruncated(t *testing.T) {
	img := make([]byte, 128)
	encodeSlot(img, 77, bytes.Repeat([]byte{0xab}, 100))
	for n := 0; n < len(img); n++ {
		if _, st := decodeSlot(img[:n]); st == slotOK {
			t.Errorf("prefix of %d bytes decoded as OK", n)
		}
	}
}

// An empty slot, a torn one (head of a new message, tail of the old),
// a length past the slot.
func TestSlotStates(t *testing.T) {
	img := make([]byte, 64)
	if _, st := decodeSlot(img); st != slotEmpty {
		t.Errorf("zero slot: %v", st)
	}
	encodeSlot(img, 5, []byte("abc"))
	copy(img[:offPayload], func() []byte { b := make([]byte, 64); encodeSlot(b, 9, []byte("xyz")); return b[:offPayload] }())
	if _, st := decodeSlot(img); st != slotTorn {
		t.Errorf("torn slot: %v", st)
	}
	encodeSlot(img, 5, make([]byte, 40)) // fits exactly: 24+40 = 64
	if _, st := decodeSlot(img); st != slotOK {
		t.Errorf("full slot: %v", st)
	}
	img[offWord] = 41
	if _, st := decodeSlot(img); st != slotBadLen {
		t.Errorf("length 41 in a 64-byte slot: %v", st)
	}
}

// Every single flipped bit of the covered bytes is caught.
func TestSlotFlippedBits(t *testing.T) {
	const size = 128
	msg := []byte("the quick brown fox jumps over the lazy dog")
	orig := make([]byte, size)
	encodeSlot(orig, 1234567, msg)
	covered := func(i int) bool { return i < offPayload+len(msg) || i >= size-tailSize }
	img := make([]byte, size)
	for i := 0; i < size; i++ {
		for bit := 0; bit < 8; bit++ {
			copy(img, orig)
			img[i] ^= 1 << bit
			v, st := decodeSlot(img)
			if covered(i) {
				if st == slotOK && v.seq == 1234567 && bytes.Equal(v.payload, msg) {
					t.Fatalf("flip of byte %d bit %d not caught", i, bit)
				}
				if st == slotOK {
					t.Fatalf("flip of byte %d bit %d decoded as OK %+v", i, bit, v)
				}
			} else if st != slotOK || !bytes.Equal(v.payload, msg) {
				t.Fatalf("flip of padding byte %d changed the decode: %+v %v", i, v, st)
			}
		}
	}
}

// Encode-then-decode round trips for every length up to the slot.
func TestSlotRoundTrip(t *testing.T) {
	for _, size := range []int{64, 128, 1088} {
		img := make([]byte, size)
		src := make([]byte, size)
		for i := range src {
			src[i] = byte(i*7 + 3)
		}
		for n := 0; n <= size-slotFixed; n++ {
			seq := uint64(n)*0x9e3779b97f4a7c15 | 1
			encodeSlot(img, seq, src[:n])
			v, st := decodeSlot(img)
			if st != slotOK || v.seq != seq || v.n != n || v.bulk || !bytes.Equal(v.payload, src[:n]) {
				t.Fatalf("size %d n %d: %+v %v", size, n, v, st)
			}
		}
	}
}

// FuzzDecodeSlot: any bytes decode without a panic; an OK decode has a
// payload inside the slot, and re-encoding what was decoded gives an
// image that decodes the same.
func FuzzDecodeSlot(f *testing.F) {
	for _, size := range []int{24, 64, 128} {
		img := make([]byte, size)
		f.Add(append([]byte(nil), img...)) // never written
		encodeSlot(img, 1, nil)
		f.Add(append([]byte(nil), img...)) // empty payload
		encodeBulkSlot(img, 1<<40, 1<<20, 0x12345678)
		f.Add(append([]byte(nil), img...)) // bulk
		encodeSlot(img, 3, bytes.Repeat([]byte{7}, size-slotFixed))
		f.Add(append([]byte(nil), img...)) // full
		img[offSeq] ^= 1
		f.Add(append([]byte(nil), img...)) // torn
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, st := decodeSlot(b)
		if st != slotOK {
			return
		}
		if v.bulk && len(v.payload) != bulkInline || !v.bulk && len(v.payload) != v.n {
			t.Fatalf("payload of %d bytes for %+v", len(v.payload), v)
		}
		if v.n > len(b)-slotFixed && !v.bulk {
			t.Fatalf("inline length %d in a %d-byte slot", v.n, len(b))
		}
		img := make([]byte, len(b))
		if v.bulk {
			encodeBulkSlot(img, v.seq, v.n, binary.LittleEndian.Uint32(v.payload))
		} else {
			encodeSlot(img, v.seq, v.payload)
		}
		w, st2 := decodeSlot(img)
		if st2 != slotOK || w.seq != v.seq || w.n != v.n || w.bulk != v.bulk || !bytes.Equal(w.payload, v.payload) {
			t.Fatalf("re-encoded %+v decodes as %+v %v", v, w, st2)
		}
	})
}
