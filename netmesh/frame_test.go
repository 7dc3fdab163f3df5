package netmesh

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"testing"

	"github.com/goshmem/goshmem/internal/errs"
)

// sampleFrames has one frame of every kind.
func sampleFrames() []Frame {
	return []Frame{
		{Type: typePut, Off: 0x0102030405060708, Len: 3, Payload: []byte{0xAA, 0xBB, 0xCC}},
		{Type: typeGet, ID: 0x11223344, Off: 4096, Len: 8},
		{Type: typeGetResp, ID: 7, Status: statusOK, Len: 2, Payload: []byte{1, 2}},
		{Type: typeGetResp, ID: 8, Status: 0x01},
		{Type: typeAtomic, ID: 9, Op: byte(OpCSwap), Width: 8, Off: 64, V: 5, Cond: 6},
		{Type: typeAtomic, ID: 0, Op: byte(OpFetchAdd), Width: 4, Off: 68, V: 1},
		{Type: typeAtomicResp, ID: 9, Status: statusOK, Old: 0xDEADBEEF},
		{Type: typePutSignal, Off: 128, Len: 1, SigOff: 8, Op: signalAdd, V: 1, Payload: []byte{0x5A}},
		{Type: typePutSignal, Off: 0, SigOff: 16, Op: signalSet, V: 42},
		{Type: typeFlush, ID: 3},
		{Type: typeFlushReply, ID: 3},
		{Type: typeHeartbeat},
		{Type: typeGoodbye},
		{Type: typeError, Code: codeBounds, Len: 4, Payload: []byte("oops")},
	}
}

func encode(f Frame) []byte { return AppendFrame(nil, &f) }

// Known bytes decode to known fields, and the encoders produce them.
func TestFrameKnownBytes(t *testing.T) {
	cases := []struct {
		hex string
		f   Frame
	}{
		{"0201" + "03000000" + "0807060504030201" + "aabbcc", sampleFrames()[0]},
		{"0202" + "44332211" + "08000000" + "0010000000000000", sampleFrames()[1]},
		{"020300" + "00" + "07000000" + "02000000" + "0102", sampleFrames()[2]},
		{"0204" + "04" + "08" + "09000000" + "4000000000000000" + "0500000000000000" + "0600000000000000", sampleFrames()[4]},
		{"020500" + "00" + "09000000" + "efbeadde00000000", sampleFrames()[6]},
		{"0206" + "02" + "00" + "01000000" + "8000000000000000" + "0800000000000000" + "0100000000000000" + "5a", sampleFrames()[7]},
		{"0207" + "0000" + "03000000", sampleFrames()[9]},
		{"0208" + "0000" + "03000000", sampleFrames()[10]},
		{"0209", sampleFrames()[11]},
		{"020a", sampleFrames()[12]},
		{"020b" + "0400" + "0400" + hex.EncodeToString([]byte("oops")), sampleFrames()[13]},
	}
	for _, c := range cases {
		b, _ := hex.DecodeString(c.hex)
		if got := encode(c.f); !bytes.Equal(got, b) {
			t.Errorf("%s encodes as %x, want %x", typeName(c.f.Type), got, b)
		}
		f, n, err := ParseFrame(b)
		if err != nil || n != len(b) {
			t.Errorf("%s: parse %v, used %d of %d", typeName(c.f.Type), err, n, len(b))
			continue
		}
		if !reflect.DeepEqual(f, c.f) {
			t.Errorf("%s: parsed %+v, want %+v", typeName(c.f.Type), f, c.f)
		}
	}
}

// Every truncated prefix is an error wrapping errs.Protocol, never a
// panic; encode-then-decode round-trips; frames can be concatenated.
func TestFrameTruncationAndRoundTrip(t *testing.T) {
	var stream []byte
	for _, f := range sampleFrames() {
		b := encode(f)
		stream = append(stream, b...)
		for i := 0; i < len(b); i++ {
			if _, _, err := ParseFrame(b[:i]); !errors.Is(err, errs.Protocol) {
				t.Errorf("%s cut at %d of %d: %v", typeName(f.Type), i, len(b), err)
			}
		}
		g, n, err := ParseFrame(b)
		if err != nil || n != len(b) || !reflect.DeepEqual(g, f) {
			t.Errorf("%s round trip: %+v %d %v", typeName(f.Type), g, n, err)
		}
	}
	for i, f := range sampleFrames() {
		g, n, err := ParseFrame(stream)
		if err != nil || !reflect.DeepEqual(g, f) {
			t.Fatalf("frame %d of the stream: %+v %v", i, g, err)
		}
		stream = stream[n:]
	}
	if len(stream) != 0 {
		t.Fatalf("%d bytes left", len(stream))
	}
}

// A flipped byte in the version, type or a reserved byte is caught; a
// flipped byte elsewhere either is caught or decodes to a frame that
// re-encodes to exactly the corrupted bytes (it is a different, valid
// frame: TCP, not the frame, carries integrity).
func TestFrameFlippedBytes(t *testing.T) {
	for _, f := range sampleFrames() {
		b := encode(f)
		for i := range b {
			for _, mask := range []byte{0x01, 0x80, 0xFF} {
				c := bytes.Clone(b)
				c[i] ^= mask
				g, n, err := ParseFrame(c)
				if i < prefixLen && err == nil && g.Type == f.Type {
					t.Errorf("%s: flipped prefix byte %d not caught", typeName(f.Type), i)
				}
				if err == nil {
					if re := AppendFrame(nil, &g); !bytes.Equal(re, c[:n]) {
						t.Errorf("%s byte %d ^%#x: decodes to %+v, which encodes differently", typeName(f.Type), i, mask, g)
					}
				} else if !errors.Is(err, errs.Protocol) {
					t.Errorf("%s byte %d: error %v does not wrap errs.Protocol", typeName(f.Type), i, err)
				}
			}
		}
	}
}

// Judging is separate from parsing: well-formed frames are refused when
// they do not fit the segment.
func TestValidate(t *testing.T) {
	const size = 4096
	if err := checkPut(putHdr{off: size - 8, n: 8}, size); err != nil {
		t.Error(err)
	}
	for _, h := range []putHdr{{off: size - 7, n: 8}, {off: size + 1, n: 1}, {off: ^uint64(0), n: 2}} {
		if err := checkPut(h, size); !errors.Is(err, errs.Protocol) {
			t.Errorf("put %+v: %v", h, err)
		}
	}
	if err := checkGet(getHdr{id: 1, off: 0, n: size}, size); err != nil {
		t.Error(err)
	}
	if err := checkGet(getHdr{id: 1, off: 1, n: size}, size); !errors.Is(err, errs.Protocol) {
		t.Error(err)
	}
	ok := atomicHdr{op: OpFetchAdd, width: 8, off: size - 8}
	if err := checkAtomic(ok, size); err != nil {
		t.Error(err)
	}
	for _, h := range []atomicHdr{
		{op: 0, width: 8}, {op: 9, width: 8}, {op: OpSet, width: 2},
		{op: OpSet, width: 8, off: 4}, {op: OpSet, width: 8, off: size},
		{op: OpSet, width: 4, v: 1 << 32}, {op: OpFetchAdd, width: 8, cond: 1},
	} {
		if err := checkAtomic(h, size); !errors.Is(err, errs.Protocol) {
			t.Errorf("atomic %+v: %v", h, err)
		}
	}
	if err := checkPutSignal(putSignalHdr{off: 0, n: 8, sigOff: 12, sigOp: signalSet}, size); !errors.Is(err, errs.Protocol) {
		t.Errorf("unaligned signal: %v", err)
	}
	if err := checkPutSignal(putSignalHdr{off: 0, n: 8, sigOff: size - 8, sigOp: signalSet}, size); err != nil {
		t.Error(err)
	}
}

func FuzzFrame(f *testing.F) {
	for _, fr := range sampleFrames() {
		f.Add(encode(fr))
	}
	f.Add([]byte{})
	f.Add([]byte{Version})
	f.Add([]byte{Version + 1, typePut})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, n, err := ParseFrame(b)
		if err != nil {
			if !errors.Is(err, errs.Protocol) {
				t.Fatalf("error %v does not wrap errs.Protocol", err)
			}
			return
		}
		if n < prefixLen || n > len(b) {
			t.Fatalf("used %d of %d bytes", n, len(b))
		}
		// A valid frame re-encodes to the same bytes and decodes again.
		re := AppendFrame(nil, &fr)
		if !bytes.Equal(re, b[:n]) {
			t.Fatalf("%+v re-encodes as %x, was %x", fr, re, b[:n])
		}
		fr2, n2, err := ParseFrame(re)
		if err != nil || n2 != n || !reflect.DeepEqual(fr, fr2) {
			t.Fatalf("second round: %+v %d %v", fr2, n2, err)
		}
		// Judging never panics either.
		switch fr.Type {
		case typePut:
			checkPut(putHdr{off: fr.Off, n: fr.Len}, 1<<16)
		case typeGet:
			checkGet(getHdr{id: fr.ID, off: fr.Off, n: fr.Len}, 1<<16)
		case typeAtomic:
			checkAtomic(atomicHdr{op: AtomicOp(fr.Op), width: fr.Width, off: fr.Off, v: fr.V, cond: fr.Cond}, 1<<16)
		case typePutSignal:
			checkPutSignal(putSignalHdr{off: fr.Off, n: fr.Len, sigOff: fr.SigOff, sigOp: fr.Op, sigV: fr.V}, 1<<16)
		}
	})
}
