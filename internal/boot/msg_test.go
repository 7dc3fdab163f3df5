package boot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"maps"
	"reflect"
	"testing"

	"github.com/hashicorp/go-msgpack/v2/codec"

	"github.com/goshmem/goshmem/internal/errs"
)

func TestWireConstants(t *testing.T) {
	kinds := map[string][2]int{
		"Hello":        {kindHello, 0x01},
		"Join":         {kindJoin, 0x02},
		"Welcome":      {kindWelcome, 0x03},
		"Error":        {kindError, 0x04},
		"Gather":       {kindGather, 0x10},
		"GatherResult": {kindGatherResult, 0x11},
		"RoundFailed":  {kindRoundFailed, 0x12},
		"PeerLost":     {kindPeerLost, 0x13},
		"Status":       {kindStatus, 0x14},
		"StatusReply":  {kindStatusReply, 0x15},
		"Exit":         {kindExit, 0x20},
		"ExitAck":      {kindExitAck, 0x21},
		"Bye":          {kindBye, 0x22},
		"JobEnded":     {kindJobEnded, 0x23},
	}
	for name, kv := range kinds {
		if kv[0] != kv[1] {
			t.Errorf("kind %s = %#02x, want %#02x", name, kv[0], kv[1])
		}
		if m := newMessage(byte(kv[0])); m == nil || int(m.kind()) != kv[0] {
			t.Errorf("newMessage(%s) = %v", name, m)
		}
	}
	pins := []struct {
		name      string
		got, want int
	}{
		{"frameHeaderLen", frameHeaderLen, 4},
		{"MaxFrame", MaxFrame, 16 << 20},
		{"maxHandshakeFrame", maxHandshakeFrame, 4096},
		{"MaxGatherData", MaxGatherData, 1 << 20},
		{"helloVersion", helloVersion, 2},
		{"errCodeAuth", errCodeAuth, 1},
		{"errCodeProtocol", errCodeProtocol, 2},
		{"errCodeInvalid", errCodeInvalid, 3},
		{"KeySize", KeySize, 32},
	}
	for _, p := range pins {
		if p.got != p.want {
			t.Errorf("%s = %d, want %d", p.name, p.got, p.want)
		}
	}
	if helloMagic != "goshboot" {
		t.Errorf("helloMagic = %q", helloMagic)
	}
	if labelBoot != "goshmem-boot-v2" {
		t.Errorf("exchange label %q", labelBoot)
	}
	for name, v := range map[string]string{
		EnvRank: "GOSHMEM_RANK", EnvSize: "GOSHMEM_SIZE", EnvJobID: "GOSHMEM_JOBID",
		EnvKey: "GOSHMEM_KEY", EnvRendezvous: "GOSHMEM_RENDEZVOUS",
		EnvLauncher: "GOSHMEM_LAUNCHER", EnvHost: "GOSHMEM_HOST",
	} {
		if name != v {
			t.Errorf("env name %q, want %q", name, v)
		}
	}
}

// sampleMessages holds one valid message of every kind.
func sampleMessages() []message {
	return []message{
		&hello{Magic: helloMagic, Version: helloVersion, JobID: "job-1"},
		&join{Rank: 3, Size: 8},
		&welcome{},
		&errorMsg{Code: errCodeAuth, Msg: "no"},
		&gather{Round: 1, Data: []byte("hi")},
		&gatherResult{Round: 2, Data: [][]byte{[]byte("a"), {}, []byte("ccc")}},
		&roundFailed{Round: 3, Msg: "too big"},
		&peerLost{Rank: 2, Msg: "closed its connection without Bye"},
		&status{Round: 4},
		&statusReply{Round: 4, Arrived: 2, Missing: []int{0, 5}},
		&exitReq{Code: 7},
		&exitAck{Code: 7},
		&bye{},
		&jobEnded{Rank: 2, Code: 7},
	}
}

func TestMessageRoundTrip(t *testing.T) {
	h := newHandle()
	for _, m := range sampleMessages() {
		b, err := encodeMessage(h, m)
		if err != nil {
			t.Fatalf("encode %T: %v", m, err)
		}
		kind, body, err := readFrame(bytes.NewReader(b), MaxFrame)
		if err != nil {
			t.Fatalf("readFrame %T: %v", m, err)
		}
		if kind != m.kind() || frameLen(len(body)) != len(b) {
			t.Fatalf("%T: kind %#02x body %d bytes, frame %d", m, kind, len(body), len(b))
		}
		got, err := decodeMessage(h, kind, body)
		if err != nil {
			t.Fatalf("decode %T: %v", m, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("round trip %T: got %+v, want %+v", m, got, m)
		}
	}
}

// TestKnownBytes pins the encoding of one message byte for byte.
func TestKnownBytes(t *testing.T) {
	want := []byte{
		0, 0, 0, 18, // L = 1 + 17
		kindGather,
		0x82,                                           // map of 2, keys in sorted order
		0xa4, 'd', 'a', 't', 'a', 0xc4, 0x02, 'h', 'i', // "data": bin8 "hi"
		0xa5, 'r', 'o', 'u', 'n', 'd', 0x01, // "round": 1
	}
	h := newHandle()
	got, err := encodeMessage(h, &gather{Round: 1, Data: []byte("hi")})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoding\n got % x\nwant % x", got, want)
	}
	kind, body, err := readFrame(bytes.NewReader(want), MaxFrame)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeMessage(h, kind, body)
	if err != nil {
		t.Fatal(err)
	}
	if g := m.(*gather); g.Round != 1 || string(g.Data) != "hi" {
		t.Fatalf("decoded %+v", g)
	}
}

func TestTruncatedFrames(t *testing.T) {
	h := newHandle()
	for _, m := range sampleMessages() {
		b, _ := encodeMessage(h, m)
		for i := 0; i < len(b); i++ {
			_, _, err := readFrame(bytes.NewReader(b[:i]), MaxFrame)
			if err == nil {
				t.Fatalf("%T: prefix of %d/%d bytes read as a frame", m, i, len(b))
			}
			if i > 0 && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("%T: prefix of %d bytes: %v", m, i, err)
			}
		}
		// A body cut short inside a valid frame is a protocol error.
		kind, body, _ := readFrame(bytes.NewReader(b), MaxFrame)
		for i := 0; i < len(body); i++ {
			if _, err := decodeMessage(h, kind, body[:i]); err == nil {
				if _, ok := m.(*bye); !ok || i != 0 {
					t.Fatalf("%T: body prefix of %d/%d bytes decoded", m, i, len(body))
				}
			} else if !errors.Is(err, errs.Protocol) {
				t.Fatalf("%T: body prefix of %d bytes: %v does not wrap errs.Protocol", m, i, err)
			}
		}
	}
}

func TestFrameLengthBounds(t *testing.T) {
	for _, n := range []uint32{0, MaxFrame + 1, 0xFFFFFFFF} {
		b := binary.BigEndian.AppendUint32(nil, n)
		b = append(b, kindBye, 0x80)
		if _, _, err := readFrame(bytes.NewReader(b), MaxFrame); !errors.Is(err, errs.Protocol) {
			t.Errorf("length %d: %v, want errs.Protocol", n, err)
		}
	}
	b := appendFrame(nil, kindGather, make([]byte, maxHandshakeFrame))
	if _, _, err := readFrame(bytes.NewReader(b), maxHandshakeFrame); !errors.Is(err, errs.Protocol) {
		t.Errorf("handshake frame over its bound: %v", err)
	}
}

func TestDecodeRejects(t *testing.T) {
	h := newHandle()
	enc := func(m message) (byte, []byte) {
		b, err := encodeMessage(h, m)
		if err != nil {
			t.Fatal(err)
		}
		return b[4], b[5:]
	}
	bad := []message{
		&hello{Magic: helloMagic, Version: helloVersion, JobID: string(make([]byte, maxText+1))},
		&join{Rank: -1, Size: 2},
		&join{Rank: 0, Size: 0},
		&gather{Round: 0},
		&gather{Round: 1, Data: make([]byte, MaxGatherData+1)},
		&gatherResult{Round: 0},
		&peerLost{Rank: -3},
		&statusReply{Round: 1, Missing: make([]int, maxMissing+1)},
		&statusReply{Round: 1, Missing: []int{-1}},
		&errorMsg{Msg: string(make([]byte, maxText+1))},
	}
	for _, m := range bad {
		kind, body := enc(m)
		if _, err := decodeMessage(h, kind, body); !errors.Is(err, errs.Protocol) {
			t.Errorf("%T %+v: %v, want errs.Protocol", m, m, err)
		}
	}
	// Unknown kind, trailing bytes, wrong msgpack type.
	if _, err := decodeMessage(h, 0x99, []byte{0x80}); !errors.Is(err, errs.Protocol) {
		t.Errorf("unknown kind: %v", err)
	}
	kind, body := enc(&status{Round: 1})
	if _, err := decodeMessage(h, kind, append(body, 0xc0)); !errors.Is(err, errs.Protocol) {
		t.Errorf("trailing byte: %v", err)
	}
	if _, err := decodeMessage(h, kindStatus, []byte{0x81, 0xa5, 'r', 'o', 'u', 'n', 'd', 0xa1, 'x'}); !errors.Is(err, errs.Protocol) {
		t.Errorf("string round: %v", err)
	}
	// A huge array header in a tiny body must not allocate its claim.
	huge := []byte{0x81, 0xa4, 'd', 'a', 't', 'a', 0xdd, 0xff, 0xff, 0xff, 0xff}
	if _, err := decodeMessage(h, kindGatherResult, huge); !errors.Is(err, errs.Protocol) {
		t.Errorf("huge array: %v", err)
	}
}

// TestFlippedBytes flips every bit of every sample frame: the result is
// an error or a well-formed message, never a panic.
func TestFlippedBytes(t *testing.T) {
	h := newHandle()
	for _, m := range sampleMessages() {
		b, _ := encodeMessage(h, m)
		for i := range b {
			for bit := 0; bit < 8; bit++ {
				c := bytes.Clone(b)
				c[i] ^= 1 << bit
				decodeFrame(h, c)
			}
		}
	}
}

// decodeFrame reads and decodes one frame from b; the fuzz target's body.
func decodeFrame(h *codec.MsgpackHandle, b []byte) (message, error) {
	kind, body, err := readFrame(bytes.NewReader(b), MaxFrame)
	if err != nil {
		return nil, err
	}
	return decodeMessage(h, kind, body)
}

func FuzzDecode(f *testing.F) {
	h := newHandle()
	for _, m := range sampleMessages() {
		b, err := encodeMessage(h, m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{0, 0, 0, 1, 0x99})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeFrame(h, b)
		if err != nil {
			if !errors.Is(err, errs.Protocol) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("error %v is neither errs.Protocol nor EOF", err)
			}
			return
		}
		// What decodes must encode and decode to the same thing.
		b2, err := encodeMessage(h, m)
		if err != nil {
			t.Fatalf("re-encode %T: %v", m, err)
		}
		m2, err := decodeFrame(h, b2)
		if err != nil {
			t.Fatalf("re-decode %T: %v", m, err)
		}
		if m2.kind() != m.kind() {
			t.Fatalf("kind %#02x became %#02x", m.kind(), m2.kind())
		}
	})
}

// The exchange's bound fields are the job id and rank and size as 4
// bytes big-endian each.
func TestBootBound(t *testing.T) {
	got := bootBound("job", 258, 1<<20)
	want := [][]byte{[]byte("job"), {0, 0, 1, 2}, {0, 0x10, 0, 0}}
	if len(got) != len(want) {
		t.Fatalf("%d fields", len(got))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("field %d: % x, want % x", i, got[i], want[i])
		}
	}
}

func TestParseEnv(t *testing.T) {
	good := map[string]string{
		EnvRank: "2", EnvSize: "4", EnvJobID: "j", EnvRendezvous: "127.0.0.1:1",
		EnvKey: "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", EnvHost: "h2",
	}
	lookup := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	env, ok, err := ParseEnv(lookup(good))
	if err != nil || !ok || env.Rank != 2 || env.Size != 4 || len(env.Key) != 32 || env.Key[31] != 0x1f || env.Host != "h2" {
		t.Fatalf("ParseEnv = %+v %v %v", env, ok, err)
	}
	if _, ok, err := ParseEnv(lookup(nil)); ok || err != nil {
		t.Fatalf("empty environment: %v %v", ok, err)
	}
	for _, kv := range [][2]string{{EnvRank, "4"}, {EnvSize, "x"}, {EnvKey, "abcd"}, {EnvJobID, ""},
		{EnvMachinePEs, "0"}, {EnvMachinePEs, "5"}, {EnvMachinePEs, "two"}} {
		bad := maps.Clone(good)
		bad[kv[0]] = kv[1]
		if _, _, err := ParseEnv(lookup(bad)); !errors.Is(err, errs.Invalid) {
			t.Errorf("%s=%q: %v", kv[0], kv[1], err)
		}
	}
	withMachine := maps.Clone(good)
	withMachine[EnvMachinePEs] = "4"
	if env, _, err := ParseEnv(lookup(withMachine)); err != nil || env.MachinePEs != 4 {
		t.Fatalf("%s=4: %+v %v", EnvMachinePEs, env, err)
	}
}
