package netmesh

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
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

// goldenFrame is one header from an encoder with distinctive field values
// (no two fields share a byte value where the format lets them differ),
// so that a field written or read at the wrong offset shows.
type goldenFrame struct {
	name  string
	b     []byte           // what the encoder appended
	parse func([]byte) any // the type's parser, its result as one value
	want  any              // what parse must return for the golden bytes
}

func goldenFrames() []goldenFrame {
	// Each encoder appends after existing bytes, as the send buffer does.
	enc := func(f func([]byte) []byte) []byte { return f([]byte{0xEE, 0xEF}) }
	pair := func(a, b any) any { return [2]any{a, b} }
	return []goldenFrame{
		{"PUT", enc(func(b []byte) []byte { return appendPut(b, 0x1112131415161718, 0x00A22324) }),
			func(b []byte) any { return pair(parsePut(b)) },
			pair(putHdr{off: 0x1112131415161718, n: 0x00A22324}, nil)},
		{"GET", enc(func(b []byte) []byte { return appendGet(b, 0x31323334, 0x4142434445464748, 0x00B25354) }),
			func(b []byte) any { return pair(parseGet(b)) },
			pair(getHdr{id: 0x31323334, off: 0x4142434445464748, n: 0x00B25354}, nil)},
		{"GET_RESP", enc(func(b []byte) []byte { return appendGetResp(b, 0x61626364, statusOK, 0x00C27374) }),
			func(b []byte) any { return pair(parseGetResp(b)) },
			pair(getRespHdr{id: 0x61626364, status: statusOK, n: 0x00C27374}, nil)},
		{"GET_RESP refused", enc(func(b []byte) []byte { return appendGetResp(b, 0x65666768, 0x7A, 0) }),
			func(b []byte) any { return pair(parseGetResp(b)) },
			pair(getRespHdr{id: 0x65666768, status: 0x7A}, nil)},
		{"ATOMIC", enc(func(b []byte) []byte {
			return appendAtomic(b, 0x81828384, 0x9A, 0x9B, 0xA1A2A3A4A5A6A7A8, 0xB1B2B3B4B5B6B7B8, 0xC1C2C3C4C5C6C7C8)
		}),
			func(b []byte) any { return pair(parseAtomic(b)) },
			pair(atomicHdr{id: 0x81828384, op: 0x9A, width: 0x9B, off: 0xA1A2A3A4A5A6A7A8, v: 0xB1B2B3B4B5B6B7B8, cond: 0xC1C2C3C4C5C6C7C8}, nil)},
		{"ATOMIC_RESP", enc(func(b []byte) []byte { return appendAtomicResp(b, 0xD1D2D3D4, 0xDA, 0xE1E2E3E4E5E6E7E8) }),
			func(b []byte) any { return pair(parseAtomicResp(b)) },
			pair(atomicRespHdr{id: 0xD1D2D3D4, status: 0xDA, old: 0xE1E2E3E4E5E6E7E8}, nil)},
		{"PUT_SIGNAL", enc(func(b []byte) []byte {
			return appendPutSignal(b, 0x1A1B1C1D1E1F1011, 0x00D22C2D, 0x3A3B3C3D3E3F3031, signalAdd, 0x5A5B5C5D5E5F5051)
		}),
			func(b []byte) any { return pair(parsePutSignal(b)) },
			pair(putSignalHdr{off: 0x1A1B1C1D1E1F1011, n: 0x00D22C2D, sigOff: 0x3A3B3C3D3E3F3031, sigOp: signalAdd, sigV: 0x5A5B5C5D5E5F5051}, nil)},
		{"FLUSH", enc(func(b []byte) []byte { return appendFlush(b, 0x6A6B6C6D) }),
			func(b []byte) any { return pair(parseFlush(b)) }, pair(uint32(0x6A6B6C6D), nil)},
		{"FLUSH_REPLY", enc(func(b []byte) []byte { return appendFlushReply(b, 0x7B7C7D7E) }),
			func(b []byte) any { return pair(parseFlushReply(b)) }, pair(uint32(0x7B7C7D7E), nil)},
		{"HEARTBEAT", enc(appendHeartbeat), func(b []byte) any { return parseHeartbeat(b) }, nil},
		{"GOODBYE", enc(appendGoodbye), func(b []byte) any { return parseGoodbye(b) }, nil},
		{"ERROR", enc(func(b []byte) []byte { return appendError(b, 0x8A8B, "xyz") }),
			func(b []byte) any { c, n, err := parseError(b); return [3]any{c, n, err} },
			[3]any{uint16(0x8A8B), 3, nil}},
	}
}

// The encoders' bytes are pinned: these strings were captured from the
// encoders before their field offsets became named constants, and the
// wire format may not change without a new Version. The parsers read the
// same bytes back into the same fields.
func TestFrameGolden(t *testing.T) {
	want := map[string]string{
		"PUT":              "02012423a2001817161514131211",
		"GET":              "0202343332315453b2004847464544434241",
		"GET_RESP":         "02030000646362617473c200",
		"GET_RESP refused": "02037a006867666500000000",
		"ATOMIC":           "02049a9b84838281a8a7a6a5a4a3a2a1b8b7b6b5b4b3b2b1c8c7c6c5c4c3c2c1",
		"ATOMIC_RESP":      "0205da00d4d3d2d1e8e7e6e5e4e3e2e1",
		"PUT_SIGNAL":       "020602002d2cd20011101f1e1d1c1b1a31303f3e3d3c3b3a51505f5e5d5c5b5a",
		"FLUSH":            "020700006d6c6b6a",
		"FLUSH_REPLY":      "020800007e7d7c7b",
		"HEARTBEAT":        "0209",
		"GOODBYE":          "020a",
		"ERROR":            "020b8b8a030078797a",
	}
	for _, g := range goldenFrames() {
		if !bytes.HasPrefix(g.b, []byte{0xEE, 0xEF}) {
			t.Errorf("%s: overwrote the bytes before it: %x", g.name, g.b)
			continue
		}
		h := g.b[2:]
		got := hex.EncodeToString(h)
		w, ok := want[g.name]
		if !ok {
			t.Errorf("%s: no golden bytes; encodes as %q", g.name, got)
			continue
		}
		if got != w {
			t.Errorf("%s encodes as\n%s, want\n%s", g.name, got, w)
		}
		b, _ := hex.DecodeString(w)
		if p := g.parse(b); !reflect.DeepEqual(p, g.want) {
			t.Errorf("%s: golden bytes parse as %+v, want %+v", g.name, p, g.want)
		}
	}
}

// The encoders are on the hot path: appending a header to a buffer with
// room for it allocates nothing.
func TestEncodersDoNotAllocate(t *testing.T) {
	buf := make([]byte, 0, 256)
	encoders := []struct {
		name string
		f    func([]byte) []byte
	}{
		{"PUT", func(b []byte) []byte { return appendPut(b, 1, 2) }},
		{"GET", func(b []byte) []byte { return appendGet(b, 1, 2, 3) }},
		{"GET_RESP", func(b []byte) []byte { return appendGetResp(b, 1, statusOK, 2) }},
		{"ATOMIC", func(b []byte) []byte { return appendAtomic(b, 1, byte(OpFetchAdd), 8, 0, 1, 0) }},
		{"ATOMIC_RESP", func(b []byte) []byte { return appendAtomicResp(b, 1, statusOK, 2) }},
		{"PUT_SIGNAL", func(b []byte) []byte { return appendPutSignal(b, 0, 1, 8, signalAdd, 1) }},
		{"FLUSH", func(b []byte) []byte { return appendFlush(b, 1) }},
		{"FLUSH_REPLY", func(b []byte) []byte { return appendFlushReply(b, 1) }},
		{"HEARTBEAT", appendHeartbeat},
		{"GOODBYE", appendGoodbye},
		{"ERROR", func(b []byte) []byte { return appendError(b, codeBounds, "oops") }},
	}
	for _, e := range encoders {
		if n := testing.AllocsPerRun(100, func() { buf = e.f(buf[:1]) }); n != 0 {
			t.Errorf("%s: %v allocations per call", e.name, n)
		}
	}
}

// The offset constants agree with the byte tables in the comments (the
// human-readable definition, mirrored by docs/wire.md): each table row's
// offset is the named constant, each fixed field's width reaches the next
// one, and the last reaches the header length, where a payload row, if
// any, starts.
func TestFrameTablesMatchConstants(t *testing.T) {
	type table struct {
		name   string
		at     []int // every fixed field's offset, in table order
		hdrLen int
	}
	files := []struct {
		file   string
		tables []table
	}{
		{"frame.go", []table{{"prefix", []int{versionAt, typeAt}, prefixLen}}},
		{"frame_put.go", []table{{"PUT", []int{versionAt, typeAt, putLenAt, putOffAt}, putHdrLen}}},
		{"frame_get.go", []table{
			{"GET", []int{versionAt, typeAt, getIDAt, getLenAt, getOffAt}, getHdrLen},
			{"GET_RESP", []int{versionAt, typeAt, getRespStatusAt, getRespReservedAt, getRespIDAt, getRespLenAt}, getRespHdrLen},
		}},
		{"frame_atomic.go", []table{
			{"ATOMIC", []int{versionAt, typeAt, atomicOpAt, atomicWidthAt, atomicIDAt, atomicOffAt, atomicVAt, atomicCondAt}, atomicHdrLen},
			{"ATOMIC_RESP", []int{versionAt, typeAt, atomicRespStatusAt, atomicRespReservedAt, atomicRespIDAt, atomicRespOldAt}, atomicRespHdrLen},
		}},
		{"frame_signal.go", []table{{"PUT_SIGNAL", []int{versionAt, typeAt, putSignalOpAt, putSignalReservedAt,
			putSignalLenAt, putSignalOffAt, putSignalSigOffAt, putSignalSigVAt}, putSignalHdrLen}}},
		{"frame_control.go", []table{
			{"FLUSH", []int{versionAt, typeAt, flushReservedAt, flushIDAt}, flushHdrLen},
			{"HEARTBEAT", []int{versionAt, typeAt}, heartbeatHdrLen},
			{"ERROR", []int{versionAt, typeAt, errorCodeAt, errorLenAt}, errorHdrLen},
		}},
	}
	if flushReplyHdrLen != flushHdrLen || goodbyeHdrLen != heartbeatHdrLen {
		t.Error("FLUSH_REPLY or GOODBYE no longer shares its table's layout")
	}
	row := regexp.MustCompile(`^//\t(\d+)\s+(\S+)`)
	for _, f := range files {
		src, err := os.ReadFile(f.file)
		if err != nil {
			t.Fatal(err)
		}
		// Each table starts at its "offset  width" heading; its rows are
		// the lines that start with an offset.
		var rows [][][2]string
		for _, line := range strings.Split(string(src), "\n") {
			if strings.HasPrefix(line, "//\toffset") {
				rows = append(rows, nil)
			} else if m := row.FindStringSubmatch(line); m != nil && len(rows) > 0 {
				rows[len(rows)-1] = append(rows[len(rows)-1], [2]string{m[1], m[2]})
			}
		}
		if len(rows) != len(f.tables) {
			t.Errorf("%s: %d byte tables, want %d", f.file, len(rows), len(f.tables))
			continue
		}
		for i, tb := range f.tables {
			r := rows[i]
			// A payload row (width Len or N) ends the table and starts
			// at the header length.
			if w := r[len(r)-1][1]; w == "Len" || w == "N" {
				if at, _ := strconv.Atoi(r[len(r)-1][0]); at != tb.hdrLen {
					t.Errorf("%s: the table's payload starts at %d, the header length is %d", tb.name, at, tb.hdrLen)
				}
				r = r[:len(r)-1]
			}
			if len(r) != len(tb.at) {
				t.Errorf("%s: %d fields in the table, %d offset constants", tb.name, len(r), len(tb.at))
				continue
			}
			for j, c := range r {
				at, err1 := strconv.Atoi(c[0])
				w, err2 := strconv.Atoi(c[1])
				end := tb.hdrLen
				if j+1 < len(tb.at) {
					end = tb.at[j+1]
				}
				switch {
				case err1 != nil || err2 != nil:
					t.Errorf("%s row %d: %q %q", tb.name, j, c[0], c[1])
				case at != tb.at[j]:
					t.Errorf("%s row %d: offset %d in the table, %d in the constants", tb.name, j, at, tb.at[j])
				case at+w != end:
					t.Errorf("%s row %d: offset %d width %d ends at %d, the next field starts at %d", tb.name, j, at, w, at+w, end)
				}
			}
		}
	}
}
