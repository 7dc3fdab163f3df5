package netmesh

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// The send side of one stream.
//
// Frames from every goroutine are appended to one batch under q.mu:
// headers and small payloads (up to copyMax) are copied into the batch's
// buffer, larger payloads are kept as references to the caller's slice.
// One goroutine at a time owns the socket for writing (q.busy); it takes
// the whole batch and writes it with one writev (net.Buffers), so small
// frames from many goroutines leave in one system call and large payloads
// are never copied. Frames leave in the order they were appended. A large
// GET reply is a range of the segment, copied only if a later frame of
// the stream writes the segment before the kernel took it (detach).
//
// Who writes:
//   - a blocking operation (Put, Get, Atomic, Flush from a user
//     goroutine) becomes the owner if nobody is, and writes at once: no
//     hand-off to another goroutine on the latency path;
//   - a non-blocking operation (PutNBI ...) only wakes the stream's writer
//     goroutine, so that a burst of them is coalesced into few writes;
//   - whoever reads the stream (the reader goroutine, or a blocked caller
//     leading it: lead.go) sends responses and flush replies with one
//     non-blocking write and hands whatever the socket did not take to
//     the writer goroutine. A reader never blocks on a write: if both
//     peers' readers could, two full send buffers would deadlock them.
//
// A blocking caller whose payload was queued by reference waits until its
// batch is written (written >= its batch number), so its slice may be
// reused when it returns. A non-blocking caller that finds queueHigh bytes
// queued writes (or waits) like a blocking one: back-pressure.

// seg is a piece of a batch: bytes [lo, hi) of the batch buffer, or, when
// ext is not nil, a caller's slice. With mem set, ext is a range of this
// PE's segment: a large GET reply, which must leave with the bytes the
// segment held when the GET was applied (see sendQueue.detach).
type seg struct {
	lo, hi int
	ext    []byte
	mem    bool
}

type batch struct {
	buf    []byte
	segs   []seg
	vecs   [][]byte    // backing store of vec
	vec    net.Buffers // the batch as iovecs, consumed while it is written
	bytes  int         // bytes in the batch
	resps  int         // responses (GET_RESP, ATOMIC_RESP, FLUSH_REPLY) in it
	copied int         // GET_RESP payload bytes copied into buf
	ext    bool        // some piece is a caller's slice
	mem    int         // pieces that are ranges of the segment (seg.mem)
	guard  bool        // set by take when mem > 0: written by nbWriter.guarded
}

// addBuf records that bytes from old to len(b.buf) were appended to the
// buffer, merging with the previous piece when they are contiguous.
func (b *batch) addBuf(old int) {
	n := len(b.buf)
	if k := len(b.segs); k > 0 && b.segs[k-1].ext == nil && b.segs[k-1].hi == old {
		b.segs[k-1].hi = n
	} else {
		b.segs = append(b.segs, seg{lo: old, hi: n})
	}
	b.bytes += n - old
}

// addExt queues p by reference.
func (b *batch) addExt(p []byte) {
	b.segs = append(b.segs, seg{ext: p})
	b.bytes += len(p)
	b.ext = true
}

// addMem queues p, a range of this PE's segment, by reference.
func (b *batch) addMem(p []byte) {
	b.segs = append(b.segs, seg{ext: p, mem: true})
	b.bytes += len(p)
	b.ext = true
	b.mem++
}

// build lays the batch out as iovecs in b.vec.
func (b *batch) build() {
	v := b.vecs[:0]
	for _, s := range b.segs {
		if s.ext != nil {
			v = append(v, s.ext)
		} else {
			v = append(v, b.buf[s.lo:s.hi])
		}
	}
	b.vecs = v
	b.vec = net.Buffers(v)
}

// reset empties the batch and drops its references to callers' slices.
func (b *batch) reset() {
	b.buf = b.buf[:0]
	clear(b.segs)
	b.segs = b.segs[:0]
	clear(b.vecs)
	b.vecs = b.vecs[:0]
	b.vec = nil
	b.bytes, b.resps, b.copied, b.ext, b.mem, b.guard = 0, 0, 0, false, 0, false
}

// write writes what is left of the batch to c, blocking. A batch that is
// all in its buffer (small frames, coalesced) goes out with write(2),
// which the kernel handles faster than writev(2). One that holds callers'
// slices (a PUT's source, a segment range) goes out with writev, which
// the race detector does not instrument: like the kernel's read of a
// segment, the access is ordered by the protocol, not by anything the
// detector sees (see the package doc).
func (b *batch) write(c *net.TCPConn) error {
	if len(b.vec) == 1 && !b.ext {
		p := b.vec[0]
		b.vec = b.vec[:0]
		_, err := c.Write(p)
		return err
	}
	_, err := b.vec.WriteTo(c)
	return err
}

// write writes what is left of b, blocking: a batch that holds ranges of
// the segment with nbWriter.guarded (see detach), any other with
// batch.write.
func (q *sendQueue) write(b *batch) error {
	if b.guard {
		return q.nb.guarded(&b.vec)
	}
	if len(b.vec) == 1 && !b.ext && q.nb.rawOK != nil && q.nb.rawOK.Load() {
		// A small batch (a barrier's flag, a put + quiet's frames) on an
		// oversubscribed machine: one raw write(2) (rawSyscalls),
		// blocking only for a rest that the socket did not take.
		n, err := q.nb.writev(b.vec)
		if err != nil {
			return err
		}
		consume(&b.vec, n)
		if len(b.vec) == 0 {
			return nil
		}
	}
	return b.write(q.conn)
}

// consume drops the first n bytes of v.
func consume(v *net.Buffers, n int) {
	for len(*v) > 0 {
		l := len((*v)[0])
		if l > n {
			(*v)[0] = (*v)[0][n:]
			return
		}
		n -= l
		(*v)[0] = nil
		*v = (*v)[1:]
	}
}

// Modes of commit.
const (
	sendNow   = iota // blocking caller: write now if nobody else is
	sendLater        // non-blocking caller: wake the writer goroutine
	sendTry          // a stream's reader: try without blocking, else hand off
	sendSoon         // a small blocking put, copied: write with the next frame, or after corkDelay
)

// corkDelay bounds how long a small blocking put waits in the batch for
// company (sendSoon). A blocking put returns once its bytes are copied;
// it is written with the next frame anyone sends on the stream (the
// Quiet's FLUSH, a GET, a barrier's flag, a reply), by a wait of this PE
// before it polls or sleeps (Mesh.Push), or, if none comes, by the writer
// goroutine after corkDelay. So Put + Quiet costs one write, not two,
// and a run of blocking puts leaves in few writes.
const corkDelay = 20 * time.Microsecond

// noCork is the cork delay under GOSHMEM_TEST_NONAP (testhook.NoNap):
// longer than any test, so the timer never sends what a wait should
// have pushed.
const noCork = 24 * time.Hour

var errShut = errors.New("netmesh: stream closing")

type sendQueue struct {
	conn  *net.TCPConn
	nb    *nbWriter
	onErr func(error) // told the first write error, outside q.mu

	mu       sync.Mutex // protects everything below, and the batches' contents
	cond     sync.Cond  // on mu: a batch was written, the owner left, or err was set
	fill     *batch     // frames appended since the last take
	spare    *batch     // an empty batch; nil while inflight holds it
	inflight *batch     // the batch being written
	busy     bool       // a goroutine owns the socket for writing
	handoff  bool       // busy is held for the writer goroutine, which finishes inflight
	taken    uint64     // batches taken; the batch in fill will be number taken+1
	written  uint64     // batches written in full (or failed: then err is set)
	err      error      // the first write error; nothing is sent after it
	shut     bool       // GOODBYE or ERROR queued: nothing more is appended
	resps    int        // responses queued or being written
	copied   int        // GET_RESP payload bytes copied into queued batches (replyCopyMax)

	// segMu is held around each system call that writes a batch holding
	// ranges of the segment (batch.guard), and by detach while it swaps
	// those ranges for copies. Taken after mu, never before it.
	segMu sync.Mutex
	// refs counts the ranges of the segment queued or in flight. Only the
	// stream's applier adds to it (applyGet) and reads it without mu
	// (detach), so it never reads 0 while one of its own is queued.
	refs atomic.Int64

	kick     chan struct{} // capacity 1: wakes the writer goroutine
	corkT    *time.Timer   // sendSoon's deadline: wakes the writer goroutine
	corked   bool          // under mu: corkT is armed
	cork     time.Duration // under mu: how long a sendSoon waits (corkDelay; a test stretches it)
	waiting  atomic.Bool   // sendSoon frames may wait in fill (Mesh.Push writes them)
	activity atomic.Uint64 // batches taken: the watchdog's send clock
	sent     atomic.Uint64 // frames that Flush covers, counted under mu after their append
	flushed  atomic.Uint64 // the largest sent value a completed Flush covered
}

func newSendQueue(c *net.TCPConn, onErr func(error)) (*sendQueue, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	q := &sendQueue{conn: c, onErr: onErr, fill: new(batch), spare: new(batch), kick: make(chan struct{}, 1), cork: corkDelay}
	q.nb = newNBWriter(raw, &q.segMu)
	q.cond.L = &q.mu
	q.corkT = time.AfterFunc(time.Hour, q.uncork)
	q.corkT.Stop()
	return q, nil
}

// uncork runs when corkDelay passed after a sendSoon: what is still
// waiting in fill goes to the writer goroutine.
func (q *sendQueue) uncork() {
	q.mu.Lock()
	q.corked = false
	if !q.busy && q.fill.bytes > 0 && q.err == nil {
		q.wake()
	}
	q.mu.Unlock()
}

// push writes what sendSoon left waiting in fill, unless someone is
// writing already (then it leaves with their batch).
func (q *sendQueue) push() {
	if !q.waiting.Load() {
		return
	}
	q.mu.Lock()
	if q.fill.bytes == 0 || q.err != nil {
		q.mu.Unlock()
		return
	}
	q.commit(sendNow, false) // unlocks q.mu; an error reaches q.onErr
}

// open locks q and returns the batch to append to, or the reason nothing
// may be appended. On success the caller appends and then calls commit
// (or unlocks q.mu itself).
func (q *sendQueue) open() (*batch, error) {
	q.mu.Lock()
	switch {
	case q.err != nil:
		err := q.err
		q.mu.Unlock()
		return nil, err
	case q.shut:
		q.mu.Unlock()
		return nil, errShut
	}
	return q.fill, nil
}

// commit sends what the caller appended according to mode and unlocks
// q.mu. With wait, it returns only once the caller's frames are written
// (their referenced payloads may be reused).
func (q *sendQueue) commit(mode int, wait bool) error {
	seq := q.taken + 1 // the caller's frames are in fill, which is batch taken+1
	var err error
	switch mode {
	case sendSoon:
		if !q.busy {
			q.waiting.Store(true)
			if !q.corked {
				q.corked = true
				q.corkT.Reset(q.cork)
			}
		}
	case sendTry:
		if !q.busy {
			err = q.tryFlush()
		}
	case sendLater:
		if q.fill.bytes >= queueHigh {
			err = q.waitWritten(seq)
		} else if wait {
			err = q.waitWritten(seq)
		} else if !q.busy {
			q.wake()
		}
	default:
		if wait {
			err = q.waitWritten(seq)
		} else if !q.busy {
			q.busy = true
			err = q.writeUntil(seq)
			q.release()
		}
	}
	q.mu.Unlock()
	if err != nil {
		q.onErr(err)
	}
	return err
}

// waitWritten returns once batch seq is written, writing it itself when
// nobody owns the socket. q.mu is held.
func (q *sendQueue) waitWritten(seq uint64) error {
	for q.written < seq && q.err == nil {
		if !q.busy {
			q.busy = true
			err := q.writeUntil(seq)
			q.release()
			return err
		}
		q.cond.Wait()
	}
	return q.err
}

// writeUntil writes batches until batch seq is written. The caller owns
// the socket and holds q.mu, which is released around each write.
func (q *sendQueue) writeUntil(seq uint64) error {
	for q.written < seq && q.err == nil && q.fill.bytes > 0 {
		b := q.take()
		q.mu.Unlock()
		err := q.write(b)
		q.mu.Lock()
		q.done(b, err)
	}
	return q.err
}

// take moves the fill batch in flight. q.mu is held by the owner.
func (q *sendQueue) take() *batch {
	if q.waiting.Load() {
		q.waiting.Store(false)
		if q.corked && q.corkT.Stop() {
			q.corked = false // what it waited for leaves now: no goroutine for the timer
		}
	}
	b := q.fill
	q.fill, q.spare, q.inflight = q.spare, nil, b
	q.taken++
	q.activity.Add(1)
	b.build()
	b.guard = b.mem > 0
	return b
}

// done records that batch b was written (or failed with err).
func (q *sendQueue) done(b *batch, err error) {
	q.written++
	q.resps -= b.resps
	q.copied -= b.copied
	if b.mem > 0 {
		q.refs.Add(-int64(b.mem))
	}
	b.reset()
	q.spare, q.inflight = b, nil
	if err != nil && q.err == nil {
		q.err = err
	}
	q.cond.Broadcast()
}

// release gives up ownership of the socket; frames appended meanwhile go
// to the writer goroutine (or to a waiter that takes over).
func (q *sendQueue) release() {
	q.busy = false
	if q.fill.bytes > 0 && q.err == nil {
		q.wake()
	}
	q.cond.Broadcast()
}

func (q *sendQueue) wake() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// tryFlush writes what the socket takes without blocking and hands the
// rest to the writer goroutine. q.mu is held and nobody owns the socket.
func (q *sendQueue) tryFlush() error {
	q.busy = true
	for q.fill.bytes > 0 && q.err == nil {
		b := q.take()
		q.mu.Unlock()
		if b.guard {
			q.segMu.Lock()
		}
		n, err := q.nb.writev(b.vec)
		consume(&b.vec, n)
		if b.guard {
			q.segMu.Unlock()
		}
		q.mu.Lock()
		if err == nil && len(b.vec) > 0 {
			q.handoff = true // busy stays set: the writer goroutine owns the socket now
			q.wake()
			return nil
		}
		q.done(b, err)
	}
	q.release()
	return q.err
}

// detach makes every GET reply queued by reference to the segment (or
// in flight) independent of it: the bytes the kernel has not taken yet
// are copied, and the copy is sent instead. The stream's applier calls it
// before a frame that writes the segment (PUT, PUT_SIGNAL, a modifying
// ATOMIC), so a reply carries the bytes as they were when its GET was
// applied, after every earlier frame of the stream and before every later
// one. A reply the kernel took before the write needs no copy, and
// neither does one while no such frame follows it: a blocking get, a run
// of gets, gets and puts to other targets keep the zero-copy path.
//
// It never waits for the peer: the applier must not block on a write
// (see the top of this file), so it copies rather than waits. A writer
// in the middle of a system call holds segMu for that call only (its
// socket is non-blocking), so detach waits at most for one writev. What
// it copies is bounded by the GET replies queued on the stream, which the
// peer asked for and waits to receive into its own memory.
func (q *sendQueue) detach() {
	if q.refs.Load() == 0 {
		return
	}
	q.mu.Lock()
	if b := q.fill; b.mem > 0 {
		for i := range b.segs {
			if s := &b.segs[i]; s.mem {
				s.ext, s.mem = cloneSegment(s.ext), false
			}
		}
		q.refs.Add(-int64(b.mem))
		b.mem = 0
	}
	if b := q.inflight; b != nil && b.mem > 0 {
		q.segMu.Lock()
		// b.vec is what is left of b.vecs (consume drops whole slices
		// from its front), and b.vecs[i] is b.segs[i]. Pieces written in
		// full are no longer in b.vec; they count in b.mem all the same.
		at := len(b.vecs) - len(b.vec)
		for j := range b.vec {
			if s := &b.segs[at+j]; s.mem {
				b.vec[j], s.ext, s.mem = cloneSegment(b.vec[j]), nil, false
			}
		}
		q.refs.Add(-int64(b.mem))
		b.mem = 0
		q.segMu.Unlock()
	}
	q.mu.Unlock()
}

// run is the stream's writer goroutine: it writes what non-blocking
// callers queued and finishes what the reader could not write, until
// stop is closed.
func (q *sendQueue) run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-q.kick:
		}
		q.mu.Lock()
		switch {
		case q.handoff:
			q.handoff = false
			b := q.inflight
			q.mu.Unlock()
			err := q.write(b)
			q.mu.Lock()
			q.done(b, err)
		case q.busy || q.fill.bytes == 0 || q.err != nil:
			q.mu.Unlock()
			continue
		default:
			q.busy = true
		}
		for q.fill.bytes > 0 && q.err == nil {
			b := q.take()
			q.mu.Unlock()
			err := q.write(b)
			q.mu.Lock()
			q.done(b, err)
		}
		q.release()
		err := q.err
		q.mu.Unlock()
		if err != nil {
			q.onErr(err)
		}
	}
}

// last queues a final frame (GOODBYE or ERROR), refuses every later
// append, and waits until the frame is written or the deadline passes.
// It reports whether the frame was queued by this call.
func (q *sendQueue) last(frame []byte, deadline time.Time) (bool, error) {
	q.mu.Lock()
	if q.shut || q.err != nil {
		err := q.err
		q.mu.Unlock()
		return false, err
	}
	b := q.fill
	old := len(b.buf)
	b.buf = append(b.buf, frame...)
	b.addBuf(old)
	q.shut = true
	q.conn.SetWriteDeadline(deadline)
	err := q.waitWritten(q.taken + 1)
	q.mu.Unlock()
	return true, err
}

// fail sets err (if none is set) and wakes every waiter.
func (q *sendQueue) fail(err error) {
	q.mu.Lock()
	if q.err == nil {
		q.err = err
	}
	q.cond.Broadcast()
	q.mu.Unlock()
}

// heartbeat queues a HEARTBEAT for the writer goroutine.
func (q *sendQueue) heartbeat() {
	b, err := q.open()
	if err != nil {
		return
	}
	old := len(b.buf)
	b.buf = appendHeartbeat(b.buf)
	b.addBuf(old)
	if !q.busy {
		q.wake()
	}
	q.mu.Unlock()
}

// wait returns once batch seq is written (see waitWritten).
func (q *sendQueue) wait(seq uint64) error {
	q.mu.Lock()
	err := q.waitWritten(seq)
	q.mu.Unlock()
	if err != nil {
		q.onErr(err)
	}
	return err
}
