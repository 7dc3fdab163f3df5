package ring

import (
	"bytes"
	"errors"
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// FuzzParseHeader: the Comm header decoder over any lane message, as a
// faulty or hostile same-job sender could put it. parseHeader never
// panics; an error wraps ErrProtocol; a header it accepts has a known
// type, a tag in range and a non-zero id, re-encodes (putEager, putLong) to the
// very bytes it was read from, and hands back the rest of the message as
// the payload.
func FuzzParseHeader(f *testing.F) {
	var e [hdrEager + 3]byte
	putEager(e[:], 2, 7, 42, 3)
	f.Add(e[:])
	for _, typ := range []uint8{msgRTS, msgFrag, msgAbort} {
		var l [hdrLong]byte
		tag, n, ep := 0, uint64(64), uint32(3)
		switch typ {
		case msgRTS:
			tag, n, ep = 9, 1<<20, 0
		case msgAbort:
			n, ep = 0, 0
		}
		putLong(l[:], typ, 2, 0, tag, n, 5, ep)
		f.Add(l[:])
	}
	f.Add([]byte{msgEager})
	f.Add(bytes.Repeat([]byte{0xff}, hdrLong))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, payload, err := parseHeader(b)
		if err != nil {
			if !errors.Is(err, shmem.ErrProtocol) {
				t.Fatalf("error %v does not wrap ErrProtocol", err)
			}
			return
		}
		var re [hdrLong]byte
		size := hdrLong
		switch h.typ {
		case msgEager:
			size = hdrEager
			putEager(re[:], h.kind, h.comm, h.tag, int(h.n))
		case msgRTS, msgFrag, msgAbort:
			if h.id == 0 {
				t.Fatalf("id 0 accepted")
			}
			putLong(re[:], h.typ, h.kind, h.comm, h.tag, h.n, h.id, h.epoch)
		default:
			t.Fatalf("type %d accepted", h.typ)
		}
		if h.tag < 0 || h.tag > MaxTag {
			t.Fatalf("tag %d accepted", h.tag)
		}
		if !bytes.Equal(re[:size], b[:size]) {
			t.Fatalf("header % x re-encodes as % x", b[:size], re[:size])
		}
		if len(payload) != len(b)-size || (len(payload) > 0 && &payload[0] != &b[size]) {
			t.Fatalf("payload of %d bytes from a %d-byte message with a %d-byte header", len(payload), len(b), size)
		}
	})
}
