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
//
// It is written from the byte tables of docs/wire.md alone, with their
// numbers typed again here on purpose (type codes, header lengths, field
// offsets, limits) and an atomic of its own: it shares no parser, check
// or constant with the decoder it judges, so a wrong offset or a wrong
// rule in either shows as a difference in the segment.
func modelApply(mem, b []byte) {
	const (
		version     = 0x02
		maxPayload  = 16 << 20
		opFetchXor  = 0x08
		opCSwap     = 0x04
		sigSet      = 0x01
		sigAdd      = 0x02
		statusOKSpc = 0x00
	)
	hdr := map[byte]int{0x01: 14, 0x02: 18, 0x03: 12, 0x04: 32, 0x05: 16, 0x06: 32, 0x07: 8, 0x08: 8, 0x09: 2, 0x0A: 2, 0x0B: 6}
	u16 := func(x []byte) uint64 { return uint64(x[0]) | uint64(x[1])<<8 }
	u32 := func(x []byte) uint64 { return u16(x) | u16(x[2:])<<16 }
	u64 := func(x []byte) uint64 { return u32(x) | u32(x[4:])<<32 }
	size := uint64(len(mem))
	in := func(off, n uint64) bool { return off <= size && n <= size-off }
	word := func(off uint64, w int) uint64 {
		if w == 4 {
			return u32(mem[off:])
		}
		return u64(mem[off:])
	}
	store := func(off uint64, w int, v uint64) {
		for i := 0; i < w; i++ {
			mem[off+uint64(i)] = byte(v >> (8 * i))
		}
	}
	for len(b) >= 2 {
		if b[0] != version {
			return
		}
		t := b[1]
		hl, known := hdr[t]
		if !known || len(b) < hl {
			return
		}
		h, rest := b[:hl], b[hl:]
		payload := func(n uint64) bool { // the payload is all there
			return uint64(len(rest)) >= n
		}
		switch t {
		case 0x01: // PUT: Len at 2, Off at 6
			n, off := u32(h[2:]), u64(h[6:])
			if n == 0 || n > maxPayload || !in(off, n) {
				return
			}
			k := copy(mem[off:off+n], rest)
			if !payload(n) {
				return
			}
			rest = rest[k:]
		case 0x06: // PUT_SIGNAL: op at 2, reserved 3, Len 4, Off 8, SigOff 16, SigV 24
			op, n, off, soff, sv := h[2], u32(h[4:]), u64(h[8:]), u64(h[16:]), u64(h[24:])
			if (op != sigSet && op != sigAdd) || h[3] != 0 || n > maxPayload || !in(off, n) || soff%8 != 0 || !in(soff, 8) {
				return
			}
			k := copy(mem[off:off+n], rest)
			if !payload(n) {
				return
			}
			rest = rest[k:]
			if op == sigAdd {
				sv += word(soff, 8)
			}
			store(soff, 8, sv)
		case 0x02: // GET: ID at 2, Len 6, Off 10; answered, nothing changes
			if u32(h[2:]) == 0 || u32(h[6:]) == 0 || u32(h[6:]) > maxPayload || !in(u64(h[10:]), u32(h[6:])) {
				return
			}
		case 0x04: // ATOMIC: Op 2, Width 3, ID 4, Off 8, V 16, Cond 24
			op, w, off, v, cond := h[2], int(h[3]), u64(h[8:]), u64(h[16:]), u64(h[24:])
			if op < 0x01 || op > opFetchXor || (w != 4 && w != 8) || off%uint64(w) != 0 ||
				(w == 4 && (v>>32 != 0 || cond>>32 != 0)) || (op != opCSwap && cond != 0) || !in(off, uint64(w)) {
				return
			}
			old := word(off, w)
			nv := old
			switch op {
			case 0x02, 0x03: // set, swap
				nv = v
			case opCSwap:
				if old == cond {
					nv = v
				}
			case 0x05:
				nv = old + v
			case 0x06:
				nv = old & v
			case 0x07:
				nv = old | v
			case 0x08:
				nv = old ^ v
			}
			store(off, w, nv)
		case 0x03: // GET_RESP: status 2, reserved 3, ID 4, Len 8; no GET was made: skipped
			n := u32(h[8:])
			if h[3] != 0 || u32(h[4:]) == 0 || n > maxPayload || (h[2] != statusOKSpc && n != 0) || !payload(n) {
				return
			}
			rest = rest[n:]
		case 0x05: // ATOMIC_RESP: reserved 3, ID 4
			if h[3] != 0 || u32(h[4:]) == 0 {
				return
			}
		case 0x07, 0x08: // FLUSH, FLUSH_REPLY: reserved 2-3, ID 4
			if h[2] != 0 || h[3] != 0 || u32(h[4:]) == 0 {
				return
			}
		case 0x09: // HEARTBEAT
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
