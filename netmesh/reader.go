package netmesh

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/goshmem/goshmem/heap"
	"github.com/goshmem/goshmem/internal/errs"
)

// The receive side of one stream: whoever holds the stream's read token
// (the reader goroutine, or a caller blocked for its reply: lead.go)
// reads frames in order and applies each before it reads the next, so a
// FLUSH is answered only after everything before it was applied.
//
// Headers are read through a small read-ahead buffer (readBuf bytes), so
// that many small frames cost one system call. A payload is copied out of
// that buffer only for the bytes that arrived together with its header;
// the rest is read from the socket straight into its destination (the
// segment for PUT, the caller's slice for GET_RESP). Every offset and
// length is judged before the first payload byte is read. The token
// changes hands only at frame boundaries.

const readBuf = 64 << 10

var errGoodbye = errors.New("netmesh: peer said goodbye")

// peerError is an ERROR frame from the peer.
type peerError struct {
	code uint16
	text string
}

func (e *peerError) Error() string {
	return fmt.Sprintf("netmesh: peer reported a protocol violation (code %d): %s", e.code, e.text)
}

// fill makes at least n bytes (n <= readBuf) available at st.buf[st.r:].
// At a frame boundary (nothing buffered) a clean end of stream returns
// io.EOF; inside a frame it returns io.ErrUnexpectedEOF. With at set,
// st.r is at the start of a frame and the holder c (nil: the reader
// goroutine) may be told to stop waiting: errYield (see readIdle).
func (st *stream) fill(n int, c *call, at bool) error {
	if st.w-st.r >= n {
		return nil
	}
	if len(st.buf)-st.r < n {
		st.w = copy(st.buf, st.buf[st.r:st.w])
		st.r = 0
	}
	for st.w-st.r < n {
		var k int
		var err error
		if at {
			k, err = st.readIdle(c)
		} else {
			k, err = st.conn.Read(st.buf[st.w:])
		}
		if k > 0 {
			st.recvs.Add(1)
			st.w += k
			continue
		}
		if err == errYield {
			return err
		}
		if err == io.EOF && st.w != st.r {
			err = io.ErrUnexpectedEOF
		}
		if err == nil {
			err = io.ErrNoProgress
		}
		return err
	}
	return nil
}

// payload reads len(dst) bytes into dst: first what is buffered, then
// straight from the socket.
func (st *stream) payload(dst []byte) error {
	k := copy(dst, st.buf[st.r:st.w])
	st.r += k
	for rest := dst[k:]; len(rest) > 0; {
		n, err := st.conn.Read(rest)
		if n > 0 {
			st.recvs.Add(1)
			rest = rest[n:]
			continue
		}
		if err == io.EOF || err == nil {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	return nil
}

// discard skips n payload bytes (a reply nobody waits for any more).
func (st *stream) discard(n int) error {
	for n > 0 {
		if st.r == st.w {
			if err := st.fill(1, nil, false); err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return err
			}
		}
		k := min(n, st.w-st.r)
		st.r += k
		n -= k
	}
	return nil
}

func (st *stream) notify(off, n uint64) {
	if f := st.l.m.cfg.Notify; f != nil {
		f(off, n)
	}
}

// serve reads and applies frames for the holder of the read token, c
// (nil: the reader goroutine), until the holder should hand the token on
// (errYield: see stream.yield) or the stream ends. It then returns
// errGoodbye, a *wireError (this side found a violation), a *peerError,
// or the read error.
func (st *stream) serve(c *call) error {
	mem := st.l.m.cfg.Mem
	size := uint64(len(mem))
	for {
		if st.yield(c) {
			return errYield
		}
		if err := st.fill(prefixLen, c, true); err != nil {
			return err
		}
		t, hl, err := parsePrefix(st.buf[st.r : st.r+prefixLen])
		if err != nil {
			return err
		}
		if err := st.fill(hl, c, true); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		hdr := st.buf[st.r : st.r+hl]
		switch t {
		case typePut:
			h, err := parsePut(hdr)
			if err == nil {
				err = checkPut(h, size)
			}
			if err != nil {
				return err
			}
			st.r += hl
			if err := st.payload(mem[h.off : h.off+uint64(h.n)]); err != nil {
				return err
			}
			st.notify(h.off, uint64(h.n))

		case typePutSignal:
			h, err := parsePutSignal(hdr)
			if err == nil {
				err = checkPutSignal(h, size)
			}
			if err != nil {
				return err
			}
			st.r += hl
			if h.n > 0 {
				if err := st.payload(mem[h.off : h.off+uint64(h.n)]); err != nil {
					return err
				}
				st.notify(h.off, uint64(h.n))
			}
			op := heap.OpSet
			if h.sigOp == signalAdd {
				op = heap.OpFetchAdd
			}
			heap.AtomicAt(mem, h.sigOff, 8, op, h.sigV, 0)
			st.notify(h.sigOff, 8)

		case typeGet:
			h, err := parseGet(hdr)
			if err == nil {
				err = checkGet(h, size)
			}
			if err != nil {
				return err
			}
			st.r += hl
			// A small reply is copied into the batch with its header (one
			// write(2)); a large one is written from the segment by
			// reference: the kernel reads it during writev, no copy is made.
			if err := st.reply(func(b *batch) {
				old := len(b.buf)
				b.buf = appendGetResp(b.buf, h.id, statusOK, h.n)
				if h.n <= copyMax {
					b.buf = appendSegment(b.buf, mem[h.off:h.off+uint64(h.n)])
					b.addBuf(old)
					return
				}
				b.addBuf(old)
				b.addExt(mem[h.off : h.off+uint64(h.n)])
			}); err != nil {
				return err
			}

		case typeAtomic:
			h, err := parseAtomic(hdr)
			if err == nil {
				err = checkAtomic(h, size)
			}
			if err != nil {
				return err
			}
			st.r += hl
			old := heap.AtomicAt(mem, h.off, int(h.width), h.op, h.v, h.cond)
			if h.op != heap.OpFetch {
				st.notify(h.off, uint64(h.width))
			}
			if h.id != 0 {
				if err := st.reply(func(b *batch) {
					o := len(b.buf)
					b.buf = appendAtomicResp(b.buf, h.id, statusOK, old)
					b.addBuf(o)
				}); err != nil {
					return err
				}
			}

		case typeFlush:
			id, err := parseFlush(hdr)
			if err != nil {
				return err
			}
			st.r += hl
			if err := st.reply(func(b *batch) {
				o := len(b.buf)
				b.buf = appendFlushReply(b.buf, id)
				b.addBuf(o)
			}); err != nil {
				return err
			}

		case typeGetResp:
			h, err := parseGetResp(hdr)
			if err != nil {
				return err
			}
			st.r += hl
			c := st.l.calls.remove(h.id)
			if c == nil {
				// A reply to a request whose caller timed out.
				if err := st.discard(int(h.n)); err != nil {
					return err
				}
				continue
			}
			if c.kind != typeGet || c.stream != st.idx || (h.status == statusOK && int(h.n) != len(c.dst)) {
				err := malformed(codeResponse, "GET_RESP %d of %d bytes on stream %d answers a %s of %d bytes on stream %d",
					h.id, h.n, st.idx, typeName(c.kind), len(c.dst), c.stream)
				c.complete(st.l.violationErr(st.idx, err))
				return err
			}
			if h.status != statusOK {
				c.complete(fmt.Errorf("netmesh: PE %d refused a get (status 0x%02x): %w", st.l.rank, h.status, errs.Protocol))
				continue
			}
			if err := st.payload(c.dst); err != nil {
				c.complete(st.l.lostErr(err))
				return err
			}
			c.complete(nil)

		case typeAtomicResp:
			h, err := parseAtomicResp(hdr)
			if err != nil {
				return err
			}
			st.r += hl
			c := st.l.calls.remove(h.id)
			if c == nil {
				continue
			}
			if c.kind != typeAtomic || c.stream != st.idx || (c.width == 4 && h.old>>32 != 0) {
				err := malformed(codeResponse, "ATOMIC_RESP %d on stream %d answers a %s on stream %d", h.id, st.idx, typeName(c.kind), c.stream)
				c.complete(st.l.violationErr(st.idx, err))
				return err
			}
			if h.status != statusOK {
				c.complete(fmt.Errorf("netmesh: PE %d refused an atomic (status 0x%02x): %w", st.l.rank, h.status, errs.Protocol))
				continue
			}
			c.val = h.old
			if c.old != nil {
				*c.old = h.old
			}
			c.complete(nil)

		case typeFlushReply:
			id, err := parseFlushReply(hdr)
			if err != nil {
				return err
			}
			st.r += hl
			c := st.l.calls.remove(id)
			if c == nil {
				continue
			}
			if c.kind != typeFlush || c.stream != st.idx {
				err := malformed(codeResponse, "FLUSH_REPLY %d on stream %d answers a %s on stream %d", id, st.idx, typeName(c.kind), c.stream)
				c.complete(st.l.violationErr(st.idx, err))
				return err
			}
			c.complete(nil)

		case typeHeartbeat:
			if err := parseHeartbeat(hdr); err != nil {
				return err
			}
			st.r += hl

		case typeGoodbye:
			if err := parseGoodbye(hdr); err != nil {
				return err
			}
			st.r += hl
			return errGoodbye

		case typeError:
			code, n, err := parseError(hdr)
			if err != nil {
				return err
			}
			if err := st.fill(hl+n, c, true); err != nil {
				return err
			}
			text := string(st.buf[st.r+hl : st.r+hl+n])
			st.r += hl + n
			return &peerError{code: code, text: text}
		}
	}
}

// reply queues a response that enc appends and tries to send it without
// blocking. A stream that is closing drops it (nobody will read it).
func (st *stream) reply(enc func(*batch)) error {
	q := st.q
	b, err := q.open()
	if err != nil {
		return nil // the stream is going down; its end is reported elsewhere
	}
	if q.resps >= MaxOutstanding {
		q.mu.Unlock()
		return malformed(codeOutstanding, "PE %d has %d requests unanswered on stream %d", st.l.rank, MaxOutstanding, st.idx)
	}
	enc(b)
	b.resps++
	q.resps++
	q.commit(sendTry, false) // a write error is reported through q.onErr
	return nil
}

// violationErr is the link error for a protocol violation this side
// found in what the peer sent on stream s.
func (l *Link) violationErr(s int, err error) error {
	return fmt.Errorf("netmesh: PE %d sent a bad frame on stream %d to PE %d: %v: %w: %w", l.rank, s, l.m.cfg.Rank, err, errs.Protocol, errs.PeerLost)
}

// streamEnded handles the end of a stream's reader.
func (l *Link) streamEnded(st *stream, err error) {
	var we *wireError
	var pe *peerError
	switch {
	case err == errGoodbye:
		gone := fmt.Errorf("netmesh: PE %d said goodbye: %w", l.rank, errs.Finalized)
		if l.setDown(linkGone, gone) {
			l.m.mu.Lock()
			l.m.notifyChanged()
			l.m.mu.Unlock()
		}
		// The peer sends nothing more on this stream: what is pending on it
		// will not be answered. Answer its goodbye (unless ours went out).
		l.calls.failStream(st.idx, l.Err(), true)
		st.q.last(appendGoodbye(nil), time.Now().Add(goodbyeWait))
	case errors.As(err, &we):
		// Tell the peer why, then close.
		st.q.last(appendError(nil, we.code, we.msg), time.Now().Add(time.Second))
		verr := l.violationErr(st.idx, err)
		l.m.logf("netmesh: PE %d: closing the link to PE %d at %s: %v", l.m.cfg.Rank, l.rank, st.conn.RemoteAddr(), verr)
		l.fail(verr, true)
	case errors.As(err, &pe):
		l.fail(fmt.Errorf("netmesh: link from PE %d to PE %d: %v: %w: %w", l.m.cfg.Rank, l.rank, err, errs.Protocol, errs.PeerLost), true)
	default:
		l.fail(l.lostErr(err), true)
	}
	l.calls.failStream(st.idx, l.Err(), false)
	st.q.fail(l.Err())
	st.closeConn()
	close(st.stop)
}
