package netmesh

import (
	"fmt"

	"github.com/goshmem/goshmem/internal/errs"
)

// Applying frames: one function per frame type, in the order of the
// frame_*.go files that encode them. Each is called by serve (reader.go)
// with the frame's whole header, hdr (which aliases st.buf at st.r), by
// the holder of the stream's read token c (nil: the reader goroutine or
// a Mesh.Poll). Each judges the header (parse, then check against this
// PE's segment) before it touches anything, moves st.r past the header,
// reads the payload, if any, straight to its destination, and returns
// nil to go on with the next frame, or why the stream ends.

// apply applies the frame of type t whose header is hdr.
func (st *stream) apply(t byte, hdr []byte, c *call) error {
	switch t {
	case typePut:
		return st.applyPut(hdr)
	case typeGet:
		return st.applyGet(hdr)
	case typeGetResp:
		return st.applyGetResp(hdr)
	case typeAtomic:
		return st.applyAtomic(hdr)
	case typeAtomicResp:
		return st.applyAtomicResp(hdr)
	case typePutSignal:
		return st.applyPutSignal(hdr)
	case typeFlush:
		return st.applyFlush(hdr)
	case typeFlushReply:
		return st.applyFlushReply(hdr)
	case typeHeartbeat:
		return st.applyHeartbeat(hdr)
	case typeGoodbye:
		return st.applyGoodbye(hdr)
	case typeError:
		return st.applyError(hdr, c)
	}
	// parsePrefix admits only the types above.
	panic(fmt.Sprintf("netmesh: apply of frame type 0x%02x that parsePrefix admitted", t))
}

// applyPut writes the payload into the segment (frame_put.go).
func (st *stream) applyPut(hdr []byte) error {
	mem := st.l.m.cfg.Mem
	h, err := parsePut(hdr)
	if err == nil {
		err = checkPut(h, uint64(len(mem)))
	}
	if err != nil {
		return err
	}
	st.r += len(hdr)
	st.q.detach()
	if err := st.payload(mem[h.off : h.off+uint64(h.n)]); err != nil {
		return err
	}
	st.notify(h.off, uint64(h.n))
	return nil
}

// applyGet answers a GET from the segment (frame_get.go). A small reply
// is copied into the batch with its header (one write(2)); a large one,
// and a small one while the stream's queue holds replyCopyMax copied
// bytes, is written from the segment by reference: the kernel reads it
// during writev, no copy is made, unless a later frame of the stream
// writes the segment before the kernel took it all: then that frame's
// applier copies what is left first (sendQueue.detach).
func (st *stream) applyGet(hdr []byte) error {
	mem := st.l.m.cfg.Mem
	h, err := parseGet(hdr)
	if err == nil {
		err = checkGet(h, uint64(len(mem)))
	}
	if err != nil {
		return err
	}
	st.r += len(hdr)
	q := st.q
	return st.reply(func(b *batch) {
		old := len(b.buf)
		b.buf = appendGetResp(b.buf, h.id, statusOK, h.n)
		if h.n <= copyMax && q.copied+int(h.n) <= replyCopyMax { // q.mu is held
			b.buf = appendSegment(b.buf, mem[h.off:h.off+uint64(h.n)])
			b.addBuf(old)
			b.copied += int(h.n)
			q.copied += int(h.n)
			return
		}
		b.addBuf(old)
		b.addMem(mem[h.off : h.off+uint64(h.n)])
		q.refs.Add(1)
	})
}

// applyGetResp completes the GET it answers, reading the payload straight
// into the caller's slice (frame_get.go).
func (st *stream) applyGetResp(hdr []byte) error {
	h, err := parseGetResp(hdr)
	if err != nil {
		return err
	}
	st.r += len(hdr)
	c := st.calls.remove(h.id)
	if c == nil {
		// A reply to a request whose caller timed out.
		return st.discard(int(h.n))
	}
	if c.kind != typeGet || (h.status == statusOK && int(h.n) != len(c.dst)) {
		err := malformed(codeResponse, "GET_RESP %d of %d bytes on stream %d answers a %s of %d bytes",
			h.id, h.n, st.idx, typeName(c.kind), len(c.dst))
		c.complete(st.l.violationErr(st.idx, err))
		return err
	}
	if h.status != statusOK {
		c.complete(fmt.Errorf("netmesh: PE %d refused a get (status 0x%02x): %w", st.l.rank, h.status, errs.Protocol))
		return nil
	}
	if err := st.payload(c.dst); err != nil {
		c.complete(st.l.lostErr(err))
		return err
	}
	c.complete(nil)
	return nil
}

// applyAtomic applies the operation to the segment with the same
// hardware atomics that same-host PEs use, and answers it when the
// requester asked for the old value (frame_atomic.go).
func (st *stream) applyAtomic(hdr []byte) error {
	mem := st.l.m.cfg.Mem
	h, err := parseAtomic(hdr)
	if err == nil {
		err = checkAtomic(h, uint64(len(mem)))
	}
	if err != nil {
		return err
	}
	st.r += len(hdr)
	if h.op != OpFetch {
		st.q.detach()
	}
	old := st.l.m.cfg.Atomics.Atomic(h.off, int(h.width), h.op, h.v, h.cond)
	if h.op != OpFetch {
		st.notify(h.off, uint64(h.width))
	}
	if h.id == 0 {
		return nil
	}
	return st.reply(func(b *batch) {
		o := len(b.buf)
		b.buf = appendAtomicResp(b.buf, h.id, statusOK, old)
		b.addBuf(o)
	})
}

// applyAtomicResp completes the atomic it answers (frame_atomic.go).
func (st *stream) applyAtomicResp(hdr []byte) error {
	h, err := parseAtomicResp(hdr)
	if err != nil {
		return err
	}
	st.r += len(hdr)
	c := st.calls.remove(h.id)
	if c == nil {
		return nil
	}
	if c.kind != typeAtomic || (c.width == 4 && h.old>>32 != 0) {
		err := malformed(codeResponse, "ATOMIC_RESP %d on stream %d answers a %s", h.id, st.idx, typeName(c.kind))
		c.complete(st.l.violationErr(st.idx, err))
		return err
	}
	if h.status != statusOK {
		c.complete(fmt.Errorf("netmesh: PE %d refused an atomic (status 0x%02x): %w", st.l.rank, h.status, errs.Protocol))
		return nil
	}
	c.val = h.old
	if c.old != nil {
		*c.old = h.old
	}
	c.complete(nil)
	return nil
}

// applyPutSignal writes the payload, then updates the signal word
// atomically (frame_signal.go).
func (st *stream) applyPutSignal(hdr []byte) error {
	mem := st.l.m.cfg.Mem
	h, err := parsePutSignal(hdr)
	if err == nil {
		err = checkPutSignal(h, uint64(len(mem)))
	}
	if err != nil {
		return err
	}
	st.r += len(hdr)
	st.q.detach() // the signal word is written even without a payload
	if h.n > 0 {
		if err := st.payload(mem[h.off : h.off+uint64(h.n)]); err != nil {
			return err
		}
		st.notify(h.off, uint64(h.n))
	}
	op := OpSet
	if h.sigOp == signalAdd {
		op = OpFetchAdd
	}
	st.l.m.cfg.Atomics.Atomic(h.sigOff, 8, op, h.sigV, 0)
	st.notify(h.sigOff, 8)
	return nil
}

// applyFlush answers a FLUSH: every frame before it was applied
// (frame_control.go).
func (st *stream) applyFlush(hdr []byte) error {
	id, err := parseFlush(hdr)
	if err != nil {
		return err
	}
	st.r += len(hdr)
	return st.reply(func(b *batch) {
		o := len(b.buf)
		b.buf = appendFlushReply(b.buf, id)
		b.addBuf(o)
	})
}

// applyFlushReply completes the Flush it answers (frame_control.go).
func (st *stream) applyFlushReply(hdr []byte) error {
	id, err := parseFlushReply(hdr)
	if err != nil {
		return err
	}
	st.r += len(hdr)
	c := st.calls.remove(id)
	if c == nil {
		return nil
	}
	if c.kind != typeFlush {
		err := malformed(codeResponse, "FLUSH_REPLY %d on stream %d answers a %s", id, st.idx, typeName(c.kind))
		c.complete(st.l.violationErr(st.idx, err))
		return err
	}
	c.complete(nil)
	return nil
}

// applyHeartbeat only proves the peer alive: the read itself bumped the
// stream's receive clock (frame_control.go).
func (st *stream) applyHeartbeat(hdr []byte) error {
	if err := parseHeartbeat(hdr); err != nil {
		return err
	}
	st.r += len(hdr)
	return nil
}

// applyGoodbye ends the stream: the peer sends nothing more
// (frame_control.go).
func (st *stream) applyGoodbye(hdr []byte) error {
	if err := parseGoodbye(hdr); err != nil {
		return err
	}
	st.r += len(hdr)
	return errGoodbye
}

// applyError ends the stream with the peer's reason (frame_control.go).
// The text is at most MaxErrorText bytes, so it fits the read buffer.
func (st *stream) applyError(hdr []byte, c *call) error {
	code, n, err := parseError(hdr)
	if err != nil {
		return err
	}
	hl := len(hdr)
	if err := st.fill(hl+n, c, true); err != nil {
		return err
	}
	text := string(st.buf[st.r+hl : st.r+hl+n]) // fill may have moved the buffer
	st.r += hl + n
	return &peerError{code: code, text: text}
}
