package netmesh

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goshmem/goshmem/internal/errs"
)

// Link is this PE's connection to one remote PE: Config.Streams TCP
// streams. Small operations, atomics and flushes use stream 0; PUT and GET
// payloads of stripeMin bytes or more are split across all streams, and
// the link keeps its operations in the order they were issued all the
// same (see order). All methods are safe for concurrent use.
type Link struct {
	m       *Mesh
	rank    int
	peerMem uint64 // the peer's segment size, from the handshake

	streams []*stream // the link's own streams, by index; entries set under m.mu before the link is ready
	up      int       // streams started; under m.mu
	ready   bool      // every stream started; under m.mu

	// Context streams (chan.go): every stream of the link, the link's own
	// first, then the context streams, rebuilt under m.mu when one opens
	// or retires; and the context streams by opener and slot.
	all     atomic.Pointer[[]*stream]
	own     chanSlots               // opened by this side; under own.mu
	peerCtx [maxChanStreams]*stream // opened by the peer, by slot; under m.mu
	nextIdx int                     // the next context stream's index; under m.mu

	// Striped operations (see order): how many were queued, and how many
	// of them are known applied (a flush of every link stream that began
	// after they were queued returned).
	striped  atomic.Uint64
	stripeOK atomic.Uint64

	mu    sync.Mutex // protects err's first assignment
	err   atomic.Pointer[error]
	state int // linkUp ... linkLost; under mu
}

// Link states.
const (
	linkUp      = iota
	linkClosing // this side's Close: goodbye sent
	linkGone    // the peer said goodbye
	linkLost    // failed: closed, reset, silent, or a protocol violation
)

func newLink(m *Mesh, rank int, peerMem uint64) *Link {
	return &Link{m: m, rank: rank, peerMem: peerMem, streams: make([]*stream, m.cfg.Streams), nextIdx: m.cfg.Streams}
}

// Err returns nil while the link is up; afterwards an error that wraps
// errs.PeerLost (lost, with errs.Protocol too after a protocol violation)
// or errs.Finalized (a goodbye, or this mesh's Close).
func (l *Link) Err() error {
	if p := l.err.Load(); p != nil {
		return *p
	}
	return nil
}

// RemoteAddr returns the peer's address of stream 0.
func (l *Link) RemoteAddr() string { return l.streams[0].conn.RemoteAddr().String() }

// setDown moves the link out of linkUp and records err. It reports
// whether this call did it.
func (l *Link) setDown(state int, err error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != linkUp {
		return false
	}
	l.state = state
	l.err.Store(&err)
	return true
}

// lostErr is the error of a link lost for cause.
func (l *Link) lostErr(cause error) error {
	return fmt.Errorf("netmesh: link from PE %d to PE %d lost: %v: %w", l.m.cfg.Rank, l.rank, cause, errs.PeerLost)
}

// fail takes the link down for err: OnLost is called when report is set
// and Close has not begun, then every pending operation fails with err,
// later ones fail at once, and every stream closes.
//
// OnLost runs before the pending operations fail, so an operation that
// returns the loss returns after its owner (shmem) has marked the job
// broken: a caller that got errs.PeerLost from a Get finds every later
// wait of its PE ending too. Operations begun meanwhile fail at once:
// setDown stored the link's error first.
//
// On a link that is already down (closing, or the peer said goodbye) it
// still closes every stream and fails what is pending, with the link's
// error, but neither logs nor reports.
func (l *Link) fail(err error, report bool) {
	first := l.setDown(linkLost, err)
	err = l.Err()
	m := l.m
	if first {
		m.mu.Lock()
		closing := m.closing
		m.mu.Unlock()
		m.logf("%v", err)
		if report && !closing && m.cfg.OnLost != nil {
			m.cfg.OnLost(l.rank, err)
		}
	}
	l.failCalls(err)
	l.kickAll()
	m.mu.Lock()
	streams := l.allLocked()
	m.notifyChanged()
	m.mu.Unlock()
	for _, st := range streams {
		if st != nil {
			st.q.fail(err)
			st.closeConn()
		}
	}
}

// failCalls completes every call in flight on the link's streams with
// err and makes their tables refuse new calls. Each stream has a table
// of its own (a context's channel stream shares no lock with another's);
// a stream that joins the link after this look is covered by request's
// check of the link's error, which fail and shutdown store first.
func (l *Link) failCalls(err error) {
	l.m.mu.Lock()
	sts := l.allLocked()
	l.m.mu.Unlock()
	for _, st := range sts {
		if st != nil {
			st.calls.failAll(err, true)
		}
	}
}

// opErr turns a send-queue error into the error an operation returns.
func (l *Link) opErr(err error) error {
	if err == nil {
		return nil
	}
	if e := l.Err(); e != nil {
		return e
	}
	if err == errShut || err == errChanClosed {
		return fmt.Errorf("netmesh: link to PE %d closing: %w", l.rank, errs.Finalized)
	}
	return l.lostErr(err)
}

func (l *Link) checkRange(what string, off uint64, n int) error {
	if err := l.Err(); err != nil {
		return err
	}
	if !inBounds(off, uint64(n), l.peerMem) {
		return fmt.Errorf("netmesh: %s of %d bytes at offset %d on PE %d: past its %d-byte segment: %w", what, n, off, l.rank, l.peerMem, errs.OutOfBounds)
	}
	return nil
}

// part is one piece of a transfer and the stream it goes on.
type part struct {
	st  *stream
	off uint64 // offset in the peer's segment
	lo  int    // offset in the caller's slice
	n   int
}

// plan splits a transfer of n bytes at off: on stream 0 when it is small
// or there is one stream, else in len(streams) contiguous parts, split on
// stripeAlign boundaries. Parts longer than MaxPayload become several
// frames on their stream.
func plan(sts []*stream, off uint64, n int, buf *[maxStreams]part) []part {
	ps := buf[:0]
	k := len(sts)
	if !striped(sts, n) {
		return append(ps, part{st: sts[0], off: off, n: n})
	}
	per := ((n+k-1)/k + stripeAlign - 1) / stripeAlign * stripeAlign // k*per >= n
	for i, lo := 0, 0; lo < n; i++ {
		sz := min(per, n-lo)
		ps = append(ps, part{st: sts[i], off: off + uint64(lo), lo: lo, n: sz})
		lo += sz
	}
	return ps
}

// striped reports whether a transfer of n bytes on the streams sts is
// split across them (plan). The callers test it before they call plan,
// so that the common transfer on one stream does not zero plan's
// maxStreams-long array on every call (2.5 KiB: about 60 ns a call, a
// fifth of an 8-byte PutNBI's CPU time).
func striped(sts []*stream, n int) bool { return len(sts) > 1 && n >= stripeMin }

// order keeps the link's own streams sts (more than one) as ordered as
// one stream: a transfer split across them must not overtake, nor be
// overtaken by, the operations issued before it. Before a striped
// operation (wide) it waits until everything queued earlier on any of
// the streams is applied; before any other operation on the link's
// streams, until the parts that earlier striped operations sent on
// streams other than 0 are applied (stream 0 is ordered anyway). Both are
// flushes of the streams that have something outstanding, and cost
// nothing when there is nothing (put + Quiet, a blocking Get). A channel
// (one stream) needs none of it.
func (l *Link) order(sts []*stream, wide bool) error {
	if len(sts) == 1 {
		return nil
	}
	gen := l.striped.Load()
	switch {
	case wide && outstanding(sts):
	case gen > l.stripeOK.Load():
		sts = sts[1:]
	default:
		return nil
	}
	if err := l.flush(sts); err != nil {
		return err
	}
	l.stripesApplied(gen)
	return nil
}

// stripesApplied records that the first gen striped operations are
// applied (a flush of every link stream that began after they were
// queued returned).
func (l *Link) stripesApplied(gen uint64) {
	for ok := l.stripeOK.Load(); ok < gen && !l.stripeOK.CompareAndSwap(ok, gen); ok = l.stripeOK.Load() {
	}
}

// Put writes src at off of the peer's segment. It returns when src may be
// reused, not when the data has arrived (that is Flush's job). A small
// src (up to 2 KiB) is copied and leaves with the next frame sent on the
// stream, or within corkDelay (writer.go).
func (l *Link) Put(off uint64, src []byte) error { return l.put(l.streams, off, src, true) }

// PutNBI is Put without waiting: src must not change until the next
// Flush returns.
func (l *Link) PutNBI(off uint64, src []byte) error { return l.put(l.streams, off, src, false) }

// put is Put (blocking) or PutNBI on the streams sts: the link's own, or
// a channel's one (chan.go). So are the other unexported operations that
// take sts.
func (l *Link) put(sts []*stream, off uint64, src []byte, blocking bool) error {
	if err := l.checkRange("put", off, len(src)); err != nil || len(src) == 0 {
		return err
	}
	if !striped(sts, len(src)) {
		if err := l.order(sts, false); err != nil {
			return err
		}
		mode := sendLater
		switch {
		case len(src) <= copyMax:
			mode = sendSoon // copied: written with the next frame (see corkDelay)
		case blocking:
			mode = sendNow
		}
		_, err := l.putOn(sts[0], off, src, mode, blocking && len(src) > copyMax)
		return err
	}
	return l.putStriped(sts, off, src, blocking)
}

// putStriped is put of a transfer split across the streams sts: it
// queues the other streams' parts for their writer goroutines, writes
// stream 0's part here, then waits for the others if blocking.
func (l *Link) putStriped(sts []*stream, off uint64, src []byte, blocking bool) error {
	var buf [maxStreams]part
	ps := plan(sts, off, len(src), &buf)
	if err := l.order(sts, true); err != nil {
		return err
	}
	var seqs [maxStreams]uint64
	for i := len(ps) - 1; i >= 0; i-- {
		p := ps[i]
		mode, wait := sendLater, false
		if i == 0 && blocking {
			mode, wait = sendNow, true
		}
		seq, err := l.putOn(p.st, p.off, src[p.lo:p.lo+p.n], mode, wait)
		if err != nil {
			return err
		}
		seqs[i] = seq
	}
	l.striped.Add(1) // after the parts are queued: see order
	if blocking {
		for i := 1; i < len(ps); i++ {
			if err := l.opErr(ps[i].st.q.wait(seqs[i])); err != nil {
				return err
			}
		}
	}
	return nil
}

// putOn queues src as PUT frames on st and commits them. It returns the
// number of the batch that carries them.
func (l *Link) putOn(st *stream, off uint64, src []byte, mode int, wait bool) (uint64, error) {
	q := st.q
	b, err := q.open()
	if err != nil {
		return 0, l.opErr(err)
	}
	for len(src) > 0 {
		n := min(len(src), MaxPayload)
		old := len(b.buf)
		b.buf = appendPut(b.buf, off, uint32(n))
		if n <= copyMax {
			b.buf = append(b.buf, src[:n]...)
			b.addBuf(old)
		} else {
			b.addBuf(old)
			b.addExt(src[:n])
		}
		q.sent.Add(1)
		off += uint64(n)
		src = src[n:]
	}
	seq := q.taken + 1
	return seq, l.opErr(q.commit(mode, wait))
}

// stridedBatch bounds the bytes of PUT frames PutBlocks queues before it
// commits them (one write when nobody else is writing).
const stridedBatch = 64 << 10

// PutBlocks writes n blocks of width bytes: block k is
// src[k*srcStride:][:width] and goes to off+k*dstStride of the peer's
// segment (strides in bytes, at least 1; blocks are applied in order, so
// where destination blocks overlap the later one wins). It is Put for a
// block-strided pattern (shmem's IPut and IBPut): blocks of up to copyMax
// bytes are copied into PUT frames that leave together, about
// stridedBatch bytes per write, instead of one write each; larger blocks
// are Puts of their own. It returns when src may be reused. Every block's
// range is checked, without overflow, before anything is queued.
func (l *Link) PutBlocks(off uint64, dstStride int, src []byte, srcStride, width, n int) error {
	return l.putBlocks(l.streams, off, dstStride, src, srcStride, width, n)
}

func (l *Link) putBlocks(sts []*stream, off uint64, dstStride int, src []byte, srcStride, width, n int) error {
	switch {
	case n == 0 || width == 0:
		return nil
	case n < 0 || width < 0 || dstStride < 1 || srcStride < 1:
		return fmt.Errorf("netmesh: block-strided put of %d blocks of %d bytes, strides %d and %d: %w", n, width, dstStride, srcStride, errs.Invalid)
	}
	// Both extents without overflow: a stride is compared with the space
	// before it is multiplied.
	srcOK := len(src) >= width && (n == 1 || uint64(n-1) <= uint64(len(src)-width)/uint64(srcStride))
	if !srcOK {
		return fmt.Errorf("netmesh: block-strided put of %d blocks of %d bytes with stride %d from a %d-byte source: %w", n, width, srcStride, len(src), errs.OutOfBounds)
	}
	dstOK := uint64(width) <= l.peerMem && (n == 1 || uint64(n-1) <= (l.peerMem-uint64(width))/uint64(dstStride))
	if !dstOK {
		return fmt.Errorf("netmesh: block-strided put of %d blocks of %d bytes with stride %d at offset %d on PE %d: past its %d-byte segment: %w", n, width, dstStride, off, l.rank, l.peerMem, errs.OutOfBounds)
	}
	span := uint64(dstStride)
	if err := l.checkRange("block-strided put", off, int(span*uint64(n-1))+width); err != nil {
		return err
	}
	if width > copyMax {
		for k := 0; k < n; k++ {
			e := k * srcStride
			if err := l.put(sts, off+uint64(k)*span, src[e:e+width], true); err != nil {
				return err
			}
		}
		return nil
	}
	if err := l.order(sts, false); err != nil {
		return err
	}
	q := sts[0].q
	for k := 0; k < n; {
		b, err := q.open()
		if err != nil {
			return l.opErr(err)
		}
		start := len(b.buf)
		for ; k < n && len(b.buf)-start < stridedBatch; k++ {
			old := len(b.buf)
			b.buf = appendPut(b.buf, off+uint64(k)*span, uint32(width))
			e := k * srcStride
			b.buf = append(b.buf, src[e:e+width]...)
			b.addBuf(old)
			q.sent.Add(1)
		}
		if err := l.opErr(q.commit(sendNow, false)); err != nil {
			return err
		}
	}
	return nil
}

// PutSignal writes src at off and then updates the 8-byte signal word at
// sigOff of the peer's segment (adds v when add is set, else stores v).
// The peer applies the data before the signal. It returns when src may be
// reused. The data always travels on stream 0, with the signal.
func (l *Link) PutSignal(off uint64, src []byte, sigOff uint64, add bool, v uint64) error {
	return l.putSignal(l.streams, off, src, sigOff, add, v, true)
}

// PutSignalNBI is PutSignal without waiting: src must not change until
// the next Flush returns. A small one (up to 2 KiB of data, copied) is
// corked as a small Put or PutNBI is: it leaves with the next frame
// written on stream 0, a wait's Push, or within corkDelay (writer.go);
// a larger one leaves with the link's writer goroutine or the next write
// on stream 0.
func (l *Link) PutSignalNBI(off uint64, src []byte, sigOff uint64, add bool, v uint64) error {
	return l.putSignal(l.streams, off, src, sigOff, add, v, false)
}

func (l *Link) putSignal(sts []*stream, off uint64, src []byte, sigOff uint64, add bool, v uint64, blocking bool) error {
	if err := l.checkRange("put-signal data", off, len(src)); err != nil {
		return err
	}
	if err := l.checkRange("put-signal signal", sigOff, 8); err != nil {
		return err
	}
	if sigOff%8 != 0 {
		return fmt.Errorf("netmesh: put-signal signal at offset %d on PE %d: not 8-byte aligned: %w", sigOff, l.rank, errs.Invalid)
	}
	if err := l.order(sts, false); err != nil {
		return err
	}
	op := byte(signalSet)
	if add {
		op = signalAdd
	}
	q := sts[0].q
	b, err := q.open()
	if err != nil {
		return l.opErr(err)
	}
	// Every chunk but the last is a PUT; the last rides in the PUT_SIGNAL.
	ext := false
	for len(src) > MaxPayload {
		old := len(b.buf)
		b.buf = appendPut(b.buf, off, MaxPayload)
		b.addBuf(old)
		b.addExt(src[:MaxPayload])
		q.sent.Add(1)
		off += MaxPayload
		src, ext = src[MaxPayload:], true
	}
	old := len(b.buf)
	b.buf = appendPutSignal(b.buf, off, uint32(len(src)), sigOff, op, v)
	if len(src) <= copyMax {
		b.buf = append(b.buf, src...)
		b.addBuf(old)
	} else {
		b.addBuf(old)
		b.addExt(src)
		ext = true
	}
	q.sent.Add(1)
	if !blocking {
		if !ext {
			// Copied whole: corked, as a small PutNBI (the window's frames
			// leave with its Quiet's FLUSH, waking no writer goroutine).
			return l.opErr(q.commit(sendSoon, false))
		}
		return l.opErr(q.commit(sendLater, false))
	}
	return l.opErr(q.commit(sendNow, ext))
}

// Get reads len(dst) bytes at off of the peer's segment into dst. The
// reply is read from the socket straight into dst.
func (l *Link) Get(dst []byte, off uint64) error { return l.get(l.streams, dst, off, true) }

// GetNBI is Get without waiting: dst holds the data after the next Flush.
func (l *Link) GetNBI(dst []byte, off uint64) error { return l.get(l.streams, dst, off, false) }

func (l *Link) get(sts []*stream, dst []byte, off uint64, blocking bool) error {
	if err := l.checkRange("get", off, len(dst)); err != nil || len(dst) == 0 {
		return err
	}
	if !striped(sts, len(dst)) && len(dst) <= MaxPayload {
		// The common case: one request, one reply.
		if err := l.order(sts, false); err != nil {
			return err
		}
		c := getCall()
		c.kind, c.dst, c.nbi = typeGet, dst, !blocking
		c.on(sts[0])
		if err := l.request(c, func(b []byte) []byte { return appendGet(b, c.id, off, uint32(len(dst))) }, blocking); err != nil {
			return err
		}
		if !blocking {
			return nil
		}
		err := l.wait(c)
		putCall(c)
		return l.waitErr(err, "get", len(dst), off)
	}
	return l.getParts(sts, dst, off, blocking)
}

// getParts is get of a transfer split across the streams sts, or longer
// than one reply's payload: a GET per part and per MaxPayload.
func (l *Link) getParts(sts []*stream, dst []byte, off uint64, blocking bool) error {
	var buf [maxStreams]part
	ps := plan(sts, off, len(dst), &buf)
	if err := l.order(sts, len(ps) > 1); err != nil {
		return err
	}
	var calls []*call
	var first error
	for _, p := range ps {
		for lo := 0; lo < p.n; lo += MaxPayload {
			n := min(MaxPayload, p.n-lo)
			c := getCall()
			c.kind, c.nbi = typeGet, !blocking
			c.on(p.st)
			c.dst = dst[p.lo+lo : p.lo+lo+n]
			coff := p.off + uint64(lo)
			if err := l.request(c, func(b []byte) []byte { return appendGet(b, c.id, coff, uint32(n)) }, blocking); err != nil {
				first = err
				break
			}
			if blocking {
				calls = append(calls, c)
			}
		}
		if first != nil {
			break
		}
	}
	if len(ps) > 1 && !blocking {
		l.striped.Add(1) // a blocking one is complete when it returns
	}
	for _, c := range calls {
		q, mark := c.st.q, c.mark
		err := l.wait(c)
		putCall(c)
		if err != nil {
			if first == nil {
				first = l.waitErr(err, "get", len(dst), off)
			}
			continue
		}
		// The reply came after every frame queued before the GET on its
		// stream was applied: as good as a flush of them, so the next
		// striped operation need not flush them (order).
		markFlushed(q, mark)
	}
	return first
}

// markFlushed records that the peer applied the first mark frames
// counted on q.
func markFlushed(q *sendQueue, mark uint64) {
	for f := q.flushed.Load(); f < mark && !q.flushed.CompareAndSwap(f, mark); f = q.flushed.Load() {
	}
}

// request enters c in the call table and queues the request frame that
// enc appends (enc sees c.id). Blocking requests are written at once on
// c's stream, non-blocking ones by the writer goroutine. On an error the
// call is finished (and recycled) before request returns.
func (l *Link) request(c *call, enc func([]byte) []byte, blocking bool) error {
	if err := c.st.calls.add(c); err != nil {
		putCall(c)
		return l.opErr(err)
	}
	q := c.st.q
	b, err := q.open()
	if err == nil && l.Err() != nil {
		// The link went down: its failure refuses calls on the streams
		// it knew, and one that joined the link after that (a channel
		// stream opened meanwhile) is caught here, since the link's
		// error is stored before failCalls looks at the streams.
		q.mu.Unlock()
		err = l.Err()
	}
	if err != nil {
		// Nothing was queued, so no reply can come: the call is ours again
		// unless the link's failure already completed it.
		if c.st.calls.removeIf(c) {
			putCall(c)
		} else if !c.nbi {
			c.block()
			putCall(c)
		}
		return l.opErr(err)
	}
	old := len(b.buf)
	b.buf = enc(b.buf)
	b.addBuf(old)
	c.mark = 0
	if c.kind != typeFlush {
		c.mark = q.sent.Add(1) // a FLUSH is not itself something to flush
	}
	mode := sendLater
	if blocking {
		mode = sendNow
	}
	if err := q.commit(mode, false); err != nil {
		// commit told the link, whose failure completes every call.
		if !c.nbi {
			c.block()
			putCall(c)
		}
		return l.opErr(err)
	}
	return nil
}

var errWaitTimeout = errors.New("netmesh: wait timed out")

// wait waits for the blocking call c (see stream.await) for at most
// Config.Timeout.
func (l *Link) wait(c *call) error { return c.st.await(c, l.m.cfg.Timeout) }

func (l *Link) waitErr(err error, what string, n int, off uint64) error {
	if err == errWaitTimeout {
		return fmt.Errorf("netmesh: %s of %d bytes at offset %d on PE %d: no reply after %v: %w", what, n, off, l.rank, l.m.cfg.Timeout, errs.Timeout)
	}
	return err
}

// checkAtomic checks an atomic's arguments and returns the operands as
// they go on the wire (cut to 32 bits at width 4; cond only for
// compare-swap).
func (l *Link) checkAtomic(width int, op AtomicOp, off, v, cond uint64) (uint64, uint64, error) {
	switch {
	case !op.Valid():
		return 0, 0, fmt.Errorf("netmesh: atomic op 0x%02x: %w", byte(op), errs.Invalid)
	case width != 4 && width != 8:
		return 0, 0, fmt.Errorf("netmesh: atomic %s of width %d: %w", op, width, errs.Invalid)
	case off%uint64(width) != 0:
		return 0, 0, fmt.Errorf("netmesh: atomic %s of width %d at offset %d on PE %d: not aligned: %w", op, width, off, l.rank, errs.Invalid)
	}
	if err := l.Err(); err != nil {
		return 0, 0, err
	}
	if !inBounds(off, uint64(width), l.peerMem) {
		return 0, 0, fmt.Errorf("netmesh: atomic %s of width %d at offset %d on PE %d: past its %d-byte segment: %w", op, width, off, l.rank, l.peerMem, errs.OutOfBounds)
	}
	if op != OpCSwap {
		cond = 0
	}
	if width == 4 {
		v, cond = uint64(uint32(v)), uint64(uint32(cond))
	}
	return v, cond, nil
}

// Atomic applies op to the width-byte word (4 or 8) at off of the peer's
// segment and returns the old value (zero-extended at width 4; 0 for
// set). cond is the compare value of compare-swap. It returns when the
// peer has applied it.
func (l *Link) Atomic(width int, op AtomicOp, off, v, cond uint64) (uint64, error) {
	return l.atomic(l.streams, width, op, off, v, cond)
}

func (l *Link) atomic(sts []*stream, width int, op AtomicOp, off, v, cond uint64) (uint64, error) {
	v, cond, err := l.checkAtomic(width, op, off, v, cond)
	if err != nil {
		return 0, err
	}
	if err := l.order(sts, false); err != nil {
		return 0, err
	}
	c := getCall()
	c.kind, c.width = typeAtomic, byte(width)
	c.on(sts[0])
	if err := l.request(c, func(b []byte) []byte { return appendAtomic(b, c.id, byte(op), byte(width), off, v, cond) }, true); err != nil {
		return 0, err
	}
	err = l.wait(c)
	old := c.val
	putCall(c)
	if err != nil {
		return 0, l.waitErr(err, "atomic "+op.String(), width, off)
	}
	return old, nil
}

// AtomicNBI is Atomic without waiting. A fetching op stores the old value
// in *dst, valid after the next Flush; with dst nil the old value is not
// sent back at all.
func (l *Link) AtomicNBI(width int, op AtomicOp, off, v, cond uint64, dst *uint64) error {
	return l.atomicNBI(l.streams, width, op, off, v, cond, dst)
}

func (l *Link) atomicNBI(sts []*stream, width int, op AtomicOp, off, v, cond uint64, dst *uint64) error {
	v, cond, err := l.checkAtomic(width, op, off, v, cond)
	if err != nil {
		return err
	}
	if err := l.order(sts, false); err != nil {
		return err
	}
	if dst != nil {
		c := getCall()
		c.kind, c.width, c.old, c.nbi = typeAtomic, byte(width), dst, true
		c.on(sts[0])
		return l.request(c, func(b []byte) []byte { return appendAtomic(b, c.id, byte(op), byte(width), off, v, cond) }, false)
	}
	// No reply, so nobody waits for it: like a small blocking put it
	// leaves with the next frame sent on the stream, a wait's Push, or
	// within corkDelay, and wakes no writer goroutine.
	return l.atomicNoReply(sts[0], width, op, off, v, cond, true, sendSoon)
}

// atomicNoReply queues an ATOMIC that asks for no reply on st and
// commits it with mode; counted says whether Flush must cover it.
func (l *Link) atomicNoReply(st *stream, width int, op AtomicOp, off, v, cond uint64, counted bool, mode int) error {
	q := st.q
	b, err := q.open()
	if err != nil {
		return l.opErr(err)
	}
	old := len(b.buf)
	b.buf = appendAtomic(b.buf, 0, byte(op), byte(width), off, v, cond)
	b.addBuf(old)
	if counted {
		q.sent.Add(1)
	}
	return l.opErr(q.commit(mode, false))
}

// Signal stores v into the 8-byte word at off of the peer's segment (an
// ATOMIC set that asks for no reply) and returns without waiting for the
// peer. It is for the runtime's own control words, whose only reader
// waits for them to arrive (a barrier's flags): it is written at once
// rather than by the writer goroutine, so it costs no goroutine wake-up,
// and Flush does not wait for it (it is not counted by Outstanding),
// though like every frame it is applied after what was queued before it
// on stream 0.
func (l *Link) Signal(off, v uint64) error {
	if _, _, err := l.checkAtomic(8, OpSet, off, v, 0); err != nil {
		return err
	}
	if err := l.order(l.streams, false); err != nil {
		return err
	}
	return l.atomicNoReply(l.streams[0], 8, OpSet, off, v, 0, false, sendNow)
}

// Flush returns once the peer has applied every frame this side queued on
// the link's own streams before the call (the operations of the link,
// not those of its channels: chan.go), and every reply to a GET or
// atomic queued before it has arrived. Only streams with something new
// since their last flush are flushed; with nothing outstanding Flush
// returns at once. FlushAll covers the channels' streams too.
//
// A FLUSH left unanswered for Config.Timeout fails with errs.Timeout and
// takes the link down (errs.PeerLost) before Flush returns: the
// non-blocking GETs and fetching atomics it was to complete fail, and no
// reply is written into their destinations after Flush returned.
func (l *Link) Flush() error {
	gen := l.striped.Load()
	if err := l.flush(l.streams); err != nil {
		return err
	}
	l.stripesApplied(gen)
	return nil
}

// FlushAll is Flush for the link's own streams and every channel's.
func (l *Link) FlushAll() error {
	gen := l.striped.Load()
	if err := l.flush(l.allStreams()); err != nil {
		return err
	}
	l.stripesApplied(gen)
	return nil
}

// flush is Flush for the streams sts.
func (l *Link) flush(sts []*stream) error {
	if err := l.Err(); err != nil {
		return err
	}
	var (
		callBuf [maxStreams]*call
		markBuf [maxStreams]uint64
		calls   = callBuf[:]
		marks   = markBuf[:]
		first   error
	)
	if len(sts) > maxStreams {
		calls, marks = make([]*call, len(sts)), make([]uint64, len(sts))
	}
	for i, st := range sts {
		mark := st.q.sent.Load()
		if mark <= st.q.flushed.Load() {
			continue
		}
		c := getCall()
		c.kind = typeFlush
		c.on(st)
		if err := l.request(c, func(b []byte) []byte { return appendFlush(b, c.id) }, true); err != nil {
			if st.closing.Load() && l.Err() == nil {
				continue // see below
			}
			first = err
			break
		}
		calls[i], marks[i] = c, mark
	}
	timedOut := false
	for i, c := range calls[:len(sts)] {
		if c == nil {
			continue
		}
		err := l.wait(c)
		putCall(c)
		if err != nil && sts[i].closing.Load() && l.Err() == nil {
			// A channel stream that its last channel's Close ended while
			// this (link-wide) Flush ran: that Close flushed it first, so
			// what was queued on it before this Flush is complete.
			continue
		}
		if err != nil {
			if first == nil {
				first = l.waitErr(err, "flush", 0, 0)
			}
			timedOut = timedOut || err == errWaitTimeout
			continue
		}
		markFlushed(sts[i].q, marks[i])
	}
	if timedOut {
		// The non-blocking GETs and fetching atomics that this Flush was
		// to complete write into memory the caller owns again once Flush
		// returns, and their replies may still come. So a peer that leaves
		// a FLUSH unanswered for Config.Timeout is lost: every pending
		// call fails, the streams close, and Flush returns only once no
		// reader is left applying a frame.
		l.fail(l.lostErr(fmt.Errorf("no FLUSH_REPLY within %v", l.m.cfg.Timeout)), true)
		l.quiesce()
	}
	return first
}

// quiesce returns once no stream of the failed link has a reader left:
// every stream ended and nobody holds its read token, so nothing more is
// applied to the segment or written into a caller's memory. The streams'
// sockets are closed, so a holder's read fails at once; the wait is
// bounded all the same (goodbyeWait), so that it cannot hang.
func (l *Link) quiesce() {
	deadline := time.Now().Add(goodbyeWait)
	for _, st := range l.allStreams() {
		for {
			st.rmu.Lock()
			done := st.tok.ended && !st.tok.held()
			st.rmu.Unlock()
			if done || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Microsecond)
		}
	}
}

// Outstanding reports whether anything was queued on the link's own
// streams since their last completed flush.
func (l *Link) Outstanding() bool { return outstanding(l.streams) }

// OutstandingAll is Outstanding for the link's own streams and every
// channel's.
func (l *Link) OutstandingAll() bool { return outstanding(l.allStreams()) }

func outstanding(sts []*stream) bool {
	for _, st := range sts {
		if st.q.sent.Load() > st.q.flushed.Load() {
			return true
		}
	}
	return false
}

// Fence orders the operations queued before it before those queued after
// it. It is free: a stream is ordered, and the link keeps striped
// transfers in order with everything else (see order).
func (l *Link) Fence() error { return l.fence(l.streams) }

func (l *Link) fence(sts []*stream) error { return l.Err() }

// shutdown is the link's part of Close: goodbye on every stream, wait
// (bounded) for the peer's goodbye or end of stream, close. Without
// goodbye (Abort) it closes every stream at once.
func (l *Link) shutdown(goodbye bool) {
	err := fmt.Errorf("netmesh: link from PE %d to PE %d: mesh closed: %w", l.m.cfg.Rank, l.rank, errs.Finalized)
	l.setDown(linkClosing, err)
	l.failCalls(l.Err())
	l.kickAll()
	l.m.mu.Lock()
	streams := l.allLocked()
	l.m.mu.Unlock()
	if !goodbye {
		for _, st := range streams {
			st.closeConn()
		}
		return
	}
	deadline := time.Now().Add(goodbyeWait)
	for _, st := range streams {
		st.q.last(appendGoodbye(nil), deadline)
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for _, st := range streams {
		if !st.started.Load() {
			st.closeConn()
			continue
		}
		select {
		case <-st.gone:
		case <-t.C:
			for _, st := range streams {
				st.closeConn()
			}
		}
	}
	for _, st := range streams {
		st.closeConn()
	}
}

// stream is one TCP connection of a link.
type stream struct {
	l       *Link
	idx     int
	conn    *net.TCPConn
	q       *sendQueue
	calls   callTable     // the calls whose requests went on this stream (their replies come back on it)
	stop    chan struct{} // closed when the reader ends: stops the writer goroutine
	gone    chan struct{} // closed when the reader has ended
	started atomic.Bool
	recvs   atomic.Uint64 // reads that returned data: the watchdog's receive clock

	// A channel stream (chan.go) has the dialler's slot (-1: one of the
	// link's own streams); dialled says this side opened it.
	chanSlot int
	dialled  bool
	closing  atomic.Bool // this side's Channel.Close is ending it (after a flush)

	// Read state, owned by whoever holds the read token (lead.go).
	buf     []byte
	r, w    int
	raw     syscall.RawConn
	sp      spinState
	w8      watcher // the reader goroutine's watch on the socket (watch.go)
	watchFn func(uintptr) bool

	// The read token (lead.go, token.go).
	rmu    sync.Mutex   // protects the fields below, and hands the read state over
	tok    token        // who holds the token, the followers, whether the stream ended
	inRead bool         // the holder waits in conn.Read at a frame boundary
	kicked bool         // a read deadline in the past is set to end that wait
	rerr   error        // why the stream ended, for the reader goroutine to report
	nwait  atomic.Int32 // followers queued
	kick   atomic.Bool  // the holder should look up (a polling holder checks it)

	// Watchdog state, owned by the watchdog goroutine.
	seenRecv, seenSend uint64
	recvAt, sendAt     time.Time
	busyLogged         bool // this silence is logged as a busy peer (watchdog.go)
}

func newStream(l *Link, idx int, c *net.TCPConn) (*stream, error) {
	st := &stream{l: l, idx: idx, conn: c, stop: make(chan struct{}), gone: make(chan struct{}),
		buf: make([]byte, readBuf), chanSlot: -1}
	st.calls.init()
	q, err := newSendQueue(c, func(err error) {
		if err != errChanClosed { // a retired channel stream: not a loss
			l.fail(l.lostErr(err), true)
		}
	})
	if err != nil {
		return nil, err
	}
	st.q = q
	if l.m.noNap {
		// GOSHMEM_TEST_NONAP: no cork timer. A corked put leaves with the
		// stream's next frame or a wait's Mesh.Push, so a wait of this PE
		// that forgot to push hangs a test instead of passing corkDelay
		// late.
		q.cork = noCork
	}
	q.nb.rawOK = &l.m.oversub
	if st.raw, err = c.SyscallConn(); err != nil {
		return nil, err
	}
	st.sp.st = st
	st.sp.fn = st.sp.poll
	st.watchFn = st.onWatch
	if err := st.w8.init(st); err != nil {
		return nil, err
	}
	return st, nil
}
