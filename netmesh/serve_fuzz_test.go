package netmesh

import (
	"bytes"
	"io"
	"testing"
	"time"
)

// The real decoder (serve and the per-type apply functions, fed through
// a socket) against a model written from the frame definitions: whatever
// bytes a peer sends, the receiver never panics, always ends the stream
// once the peer closes it, and leaves its segment exactly as applying the
// well-formed, in-bounds frames in order would (a payload cut short by
// the end of the stream is written as far as it came).
func FuzzServe(f *testing.F) {
	var all []byte
	for _, fr := range sampleFrames() {
		b := encode(fr)
		f.Add(b)
		f.Add(b[:len(b)-1])
		all = append(all, b...)
	}
	f.Add(all)
	f.Add(append(encode(Frame{Type: typePut, Off: 100, Payload: bytes.Repeat([]byte{7}, 300)}),
		encode(Frame{Type: typeAtomic, Op: byte(OpFetchAdd), Width: 8, Off: 64, V: 3})...))
	f.Add(encode(Frame{Type: typePut, Off: 1<<16 - 2, Payload: []byte{1, 2, 3}})) // past the segment
	f.Fuzz(func(t *testing.T, in []byte) {
		const size = 1 << 16
		p, r := rawJob(t, size, func(c *Config) { c.Heartbeat = time.Hour })
		st := p.m.Link(0).streams[0]
		drained := make(chan struct{})
		go func() { io.Copy(io.Discard, r.c); close(drained) }()
		if len(in) > 0 {
			r.send(in)
		}
		r.c.CloseWrite()
		select {
		case <-st.gone:
		case <-time.After(10 * time.Second):
			t.Fatalf("the stream did not end after the peer closed it; input %x", in)
		}
		want := make([]byte, size)
		modelApply(want, in)
		if !bytes.Equal(p.mem, want) {
			for i := range want {
				if p.mem[i] != want[i] {
					t.Fatalf("segment byte %d is %#x, the model says %#x; input %x", i, p.mem[i], want[i], in)
				}
			}
		}
		r.c.Close()
		<-drained
	})
}

// modelApply applies to mem what a receiver must apply of the byte stream
// b: frame by frame, until the first one that is cut short, malformed or
// out of bounds, or that ends the stream (GOODBYE, ERROR). Replies to
// requests this side never made are skipped, as serve skips them.
func modelApply(mem, b []byte) {
	size := uint64(len(mem))
	for len(b) >= prefixLen {
		t, hl, err := parsePrefix(b)
		if err != nil || len(b) < hl {
			return
		}
		hdr, rest := b[:hl], b[hl:]
		switch t {
		case typePut:
			h, err := parsePut(hdr)
			if err == nil {
				err = checkPut(h, size)
			}
			if err != nil {
				return
			}
			n := copy(mem[h.off:h.off+uint64(h.n)], rest)
			if n < int(h.n) {
				return
			}
			rest = rest[n:]
		case typePutSignal:
			h, err := parsePutSignal(hdr)
			if err == nil {
				err = checkPutSignal(h, size)
			}
			if err != nil {
				return
			}
			n := copy(mem[h.off:h.off+uint64(h.n)], rest)
			if n < int(h.n) {
				return
			}
			rest = rest[n:]
			op := OpSet
			if h.sigOp == signalAdd {
				op = OpFetchAdd
			}
			heapAtomics(mem).Atomic(h.sigOff, 8, op, h.sigV, 0)
		case typeGet:
			h, err := parseGet(hdr)
			if err == nil {
				err = checkGet(h, size)
			}
			if err != nil {
				return
			}
		case typeAtomic:
			h, err := parseAtomic(hdr)
			if err == nil {
				err = checkAtomic(h, size)
			}
			if err != nil {
				return
			}
			heapAtomics(mem).Atomic(h.off, int(h.width), h.op, h.v, h.cond)
		case typeGetResp:
			h, err := parseGetResp(hdr)
			if err != nil || len(rest) < int(h.n) {
				return
			}
			rest = rest[h.n:]
		case typeAtomicResp:
			if _, err := parseAtomicResp(hdr); err != nil {
				return
			}
		case typeFlush:
			if _, err := parseFlush(hdr); err != nil {
				return
			}
		case typeFlushReply:
			if _, err := parseFlushReply(hdr); err != nil {
				return
			}
		case typeHeartbeat:
			if parseHeartbeat(hdr) != nil {
				return
			}
		default: // GOODBYE, ERROR: the stream ends
			return
		}
		b = rest
	}
}

// Every payload length is read where the encoders put it: payloadLen and
// frameBuffered agree with the encoding of every kind of frame.
func TestPayloadLenMatchesEncoders(t *testing.T) {
	for _, fr := range sampleFrames() {
		b := encode(fr)
		hl := hdrLen(fr.Type)
		if got := payloadLen(fr.Type, b[:hl]); got != len(fr.Payload) {
			t.Fatalf("%s: payloadLen %d, payload %d bytes", typeName(fr.Type), got, len(fr.Payload))
		}
		st := &stream{buf: make([]byte, len(b))}
		for n := 0; n <= len(b); n++ {
			st.r, st.w = 0, copy(st.buf, b[:n])
			if got, want := st.frameBuffered(), n == len(b); got != want {
				t.Fatalf("%s: frameBuffered with %d of %d bytes = %v", typeName(fr.Type), n, len(b), got)
			}
		}
	}
}
