package netmesh

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/goshmem/goshmem/internal/errs"
	"github.com/goshmem/goshmem/internal/testhook"
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
			st.loud() // a quiet poller's wait must wake (watch.go)
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
	spin := len(dst) <= payloadSpinMax
	for rest := dst[k:]; len(rest) > 0; {
		n, err := st.readPayload(rest, spin)
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

// payloadSpin bounds how long the reader of a payload that has begun
// to arrive polls for its next bytes before it parks in the netpoller.
// A payload comes at stream speed, but the reader drains the socket as
// fast as the sender fills it; parked, it waits for a wake-up each time
// it runs dry, and on the test machine (2 vCPUs) such a wake-up of a
// large transfer cost about 100 µs: a plain Go ping-pong of 1 MiB took
// 300-313 µs with blocking reads and 192-206 µs when the reader polled
// inside the message (docs/performance.md, "What bounds 1 MiB on one
// stream").
const payloadSpin = 200 * time.Microsecond

// payloadSpinMax: only payloads of up to this many bytes are polled
// for. Polling made 4 and 16 MiB transfers no faster and their bandwidth
// lower (put-bw and get-bw 0.75-0.89 of the parked reader's, where 1 MiB
// ones went 1.3-1.4 times as fast), and 2 MiB ones could not be told
// from the noise (docs/performance.md), perhaps because a reader that
// polls takes each segment as it comes, in many small reads, where a
// parked one wakes to a large read.
const payloadSpinMax = 1 << 20

// readPayload reads the next bytes of a payload into p: with spin,
// polling for up to payloadSpin while the spin policy allows (spin.go:
// never on an oversubscribed machine, nor while polling is paused or
// measured dearer than parking), then parked in conn.Read. Only the
// parked read needs a quiet socket made loud (watch.go): a non-blocking
// read returns whatever bytes are queued, whatever the mark says. So a
// payload read by polling costs no setsockopt: lowering the mark before
// every read of a payload and raising it after the frame took two per
// frame (8 per 1 MiB rendezvous message of ring.Comm over TCP, counted
// with perf's syscall tracepoints).
func (st *stream) readPayload(p []byte, spin bool) (int, error) {
	if now := mono(); spin && st.l.m.spinOK(now) {
		k, err := st.pollInto(p, now+int64(payloadSpin), false)
		if k > 0 || err != nil {
			return k, err
		}
	}
	st.loud()
	return st.conn.Read(p)
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
// (nil: the reader goroutine, or a Mesh.Poll), until the holder should
// hand the token on (errYield: see stream.yield) or the stream ends. It
// then returns errGoodbye, a *wireError (this side found a violation), a
// *peerError, or the read error. Each frame is applied by the function
// of its type (apply.go) before the next is read. A Mesh.Poll passes its
// condition as done: once it holds, serve stops (errYield) at the next
// frame boundary where no whole frame is buffered, instead of reading
// the socket again, which would most often find it empty. done is only
// called, never kept (a closure kept in the stream would be allocated by
// every wait that polls).
func (st *stream) serve(c *call, done func() bool) error {
	for {
		st.quietAgain() // at a frame boundary: a poller's socket is quiet again
		if st.yield(c) || (done != nil && !st.frameBuffered() && done()) {
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
		if h := testhook.Apply.Load(); h != nil {
			slot, idx := -1, st.idx
			if st.chanSlot >= 0 {
				idx = -1
				if !st.dialled {
					slot = st.chanSlot
				}
			}
			(*h)(st.l.m.cfg.Rank, st.l.rank, slot, idx)
		}
		if err := st.apply(t, st.buf[st.r:st.r+hl], c); err != nil {
			return err
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
	if st.chanSlot >= 0 && err == errGoodbye {
		l.chanEnded(st) // a channel stream's goodbye ends that stream only
		return
	}
	var we *wireError
	var pe *peerError
	switch {
	case err == errGoodbye:
		gone := fmt.Errorf("netmesh: PE %d said goodbye: %w", l.rank, errs.Finalized)
		if l.setDown(linkGone, gone) {
			l.m.mu.Lock()
			closing := l.m.closing
			l.m.notifyChanged()
			l.m.mu.Unlock()
			if f := l.m.cfg.OnGoodbye; f != nil && !closing {
				f(l.rank)
			}
		}
		// The peer sends nothing more on this stream: what is pending on it
		// will not be answered. Answer its goodbye (unless ours went out).
		st.calls.failAll(l.Err(), true)
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
	st.calls.failAll(l.Err(), false)
	st.q.fail(l.Err())
	st.closeConn()
	close(st.stop)
}
