package netmesh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goshmem/goshmem/internal/errs"
)

// Channels: independent completion streams over one link.
//
// A link's own streams are ordered: a Flush waits for every frame queued
// before it on a stream, whoever queued it. A Channel is a completion
// stream of its own: its operations travel on a TCP connection of their
// own (a channel stream), opened on demand by OpenChannel with the usual
// authenticated handshake (HELLO stream kind 0x01, handshake.go), and
// its Flush covers that connection only. So a goroutine that flushes its
// channel never waits behind another channel's bytes, nor behind the
// link's own streams, and two channels share no lock on the data path.
//
// A channel stream is a stream like the link's own: the same send queue,
// reader goroutine, read token, spinning policy (it is on Mesh.Poll's
// list), heartbeats and watchdog. Its loss (silence, a reset, a protocol
// violation) is the link's loss, ErrPeerLost, exactly as for the link's
// own streams. Either side may open channel streams, in slots 0 to
// Config.ChanStreams-1 of its own; the stream index in HELLO is the
// slot, and the acceptor refuses a second stream in a slot that is open.
//
// The bound: one side opens at most Config.ChanStreams (default and at
// most 64) channel streams per link. A channel opened beyond that shares
// the open channel stream with the fewest channels. Channels that share a
// stream are ordered with each other, and a Flush of one waits for what
// the others queued on it before the Flush; they are still independent of
// every other channel and of the link's own streams. A channel that
// cannot get a stream of its own (the peer's address is unknown, or the
// dial failed while the link is up) shares one already open, or else
// uses the link's own streams, and the mesh logs why: it is then a view
// of the link, as correct but not independent.
//
// Closing: Channel.Close flushes the channel; the last channel on a
// stream then sends GOODBYE on it. On a channel stream GOODBYE ends that
// stream only, never the link: the receiver retires the stream (it leaves
// Poll's list and the watchdog's), answers GOODBYE and closes it; the
// closer waits (at most goodbyeWait) for that answer before the slot is
// free again.

// chanSlots are the channel streams one side opened on a link.
type chanSlots struct {
	mu   sync.Mutex // held while a stream is opened or closed
	st   [maxChanStreams]*stream
	refs [maxChanStreams]int // channels on each stream
}

// allStreams returns every stream of the link: its own, then its channel
// streams.
func (l *Link) allStreams() []*stream {
	if p := l.all.Load(); p != nil {
		return *p
	}
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	return l.allLocked()
}

// allLocked is allStreams under m.mu; before the link is ready it has the
// own streams registered so far.
func (l *Link) allLocked() []*stream {
	if p := l.all.Load(); p != nil {
		return *p
	}
	var sts []*stream
	for _, st := range l.streams {
		if st != nil {
			sts = append(sts, st)
		}
	}
	return sts
}

// setAllLocked replaces the list of every stream. m.mu is held; the list
// is never changed in place, so readers may keep an old one.
func (l *Link) setAllLocked(sts []*stream) { l.all.Store(&sts) }

// Channel is an independent completion stream over a link (see above):
// it has the link's operations, and its Flush and Fence cover only what
// was issued through it. All methods are safe for concurrent use.
type Channel struct {
	l      *Link
	sts    []*stream // its channel stream, or the link's own streams
	slot   int       // its slot; -1 when it uses the link's own streams
	closed atomic.Bool
}

// OpenChannel opens a channel on the link: it takes a free slot and opens
// a channel stream in it (one handshake, a round trip and a half), or
// shares an open channel stream when all Config.ChanStreams slots are in
// use. It fails only when the link is down.
func (l *Link) OpenChannel() (*Channel, error) {
	if err := l.Err(); err != nil {
		return nil, err
	}
	o := &l.own
	o.mu.Lock()
	defer o.mu.Unlock()
	for s := 0; s < l.m.cfg.ChanStreams; s++ {
		if o.st[s] != nil {
			continue
		}
		st, err := l.openStream(s)
		if err != nil {
			if lerr := l.Err(); lerr != nil {
				return nil, lerr
			}
			l.m.logf("netmesh: PE %d: no channel stream to PE %d: %v; the channel shares a stream", l.m.cfg.Rank, l.rank, err)
			break
		}
		o.st[s], o.refs[s] = st, 1
		return &Channel{l: l, sts: []*stream{st}, slot: s}, nil
	}
	best := -1
	for s := 0; s < maxChanStreams; s++ {
		if o.st[s] != nil && (best < 0 || o.refs[s] < o.refs[best]) {
			best = s
		}
	}
	if best < 0 {
		return &Channel{l: l, sts: l.streams, slot: -1}, nil
	}
	o.refs[best]++
	return &Channel{l: l, sts: []*stream{o.st[best]}, slot: best}, nil
}

// openStream dials the peer and opens a channel stream in slot.
// l.own.mu is held.
func (l *Link) openStream(slot int) (*stream, error) {
	m := l.m
	m.mu.Lock()
	addr := m.addrs[l.rank]
	m.mu.Unlock()
	if addr == "" {
		return nil, fmt.Errorf("PE %d's address is unknown (Connect was given none)", l.rank)
	}
	ctx, cancel := context.WithTimeout(m.ctx, m.hsTimeout)
	defer cancel()
	d := net.Dialer{Control: sockBufControl(m.cfg.SockBuf)}
	return m.dialOnce(ctx, &d, l.rank, addr, slot, hsKindChan)
}

// Close completes the channel's operations (Flush) and releases it; the
// last channel on a channel stream closes the stream. Operations through
// the channel fail with errs.Finalized afterwards. Close is idempotent.
func (ch *Channel) Close() error {
	if ch.closed.Swap(true) {
		return nil
	}
	err := ch.l.flush(ch.sts)
	if ch.slot < 0 {
		return err
	}
	o := &ch.l.own
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.refs[ch.slot]--; o.refs[ch.slot] > 0 {
		return err
	}
	st := o.st[ch.slot]
	o.st[ch.slot] = nil
	st.close()
	return err
}

// close ends the channel stream st that this side opened: GOODBYE, then
// wait (bounded) for the peer's answer, which retires the stream
// (streamEnded), then close the socket.
func (st *stream) close() {
	st.closing.Store(true)
	deadline := time.Now().Add(goodbyeWait)
	st.q.last(appendGoodbye(nil), deadline)
	if st.started.Load() {
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-st.gone:
		case <-t.C:
		}
		t.Stop()
	}
	st.closeConn()
}

// retire takes the ended channel stream st out of the link's lists: the
// watchdog and Poll stop looking at it, a link-wide Flush skips it, and
// its slot at the acceptor is free.
func (l *Link) retire(st *stream) {
	m := l.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if !st.dialled && l.peerCtx[st.chanSlot] == st {
		l.peerCtx[st.chanSlot] = nil
	}
	old := l.allLocked()
	sts := make([]*stream, 0, len(old))
	for _, x := range old {
		if x != st {
			sts = append(sts, x)
		}
	}
	l.setAllLocked(sts)
	m.updatePollList()
}

// chanEnded handles the GOODBYE that ends a channel stream: retire it,
// fail what is pending on it, answer (unless this side said goodbye
// first) and close.
func (l *Link) chanEnded(st *stream) {
	l.retire(st)
	err := fmt.Errorf("netmesh: channel stream %d to PE %d closed: %w", st.idx, l.rank, errs.Finalized)
	if e := l.Err(); e != nil {
		err = e
	}
	st.calls.failAll(err, false)
	st.q.last(appendGoodbye(nil), time.Now().Add(goodbyeWait))
	st.q.fail(errChanClosed)
	st.closeConn()
	close(st.stop)
}

var errChanClosed = errors.New("netmesh: channel stream closed")

func (ch *Channel) check() error {
	if ch.closed.Load() {
		return fmt.Errorf("netmesh: channel to PE %d is closed: %w", ch.l.rank, errs.Finalized)
	}
	return nil
}

// Link returns the channel's link.
func (ch *Channel) Link() *Link { return ch.l }

// Own reports whether the channel has a channel stream (shared with
// other channels or not), rather than using the link's own streams.
func (ch *Channel) Own() bool { return ch.slot >= 0 }

// Slot is the channel's slot among the channel streams this side opened
// on the link (-1 when it uses the link's own streams).
func (ch *Channel) Slot() int { return ch.slot }

// Put is Link.Put through the channel.
func (ch *Channel) Put(off uint64, src []byte) error {
	if err := ch.check(); err != nil {
		return err
	}
	return ch.l.put(ch.sts, off, src, true)
}

// PutNBI is Link.PutNBI through the channel: src must not change until
// the channel's next Flush returns.
func (ch *Channel) PutNBI(off uint64, src []byte) error {
	if err := ch.check(); err != nil {
		return err
	}
	return ch.l.put(ch.sts, off, src, false)
}

// PutBlocks is Link.PutBlocks through the channel.
func (ch *Channel) PutBlocks(off uint64, dstStride int, src []byte, srcStride, width, n int) error {
	if err := ch.check(); err != nil {
		return err
	}
	return ch.l.putBlocks(ch.sts, off, dstStride, src, srcStride, width, n)
}

// PutSignal is Link.PutSignal through the channel.
func (ch *Channel) PutSignal(off uint64, src []byte, sigOff uint64, add bool, v uint64) error {
	if err := ch.check(); err != nil {
		return err
	}
	return ch.l.putSignal(ch.sts, off, src, sigOff, add, v, true)
}

// PutSignalNBI is Link.PutSignalNBI through the channel.
func (ch *Channel) PutSignalNBI(off uint64, src []byte, sigOff uint64, add bool, v uint64) error {
	if err := ch.check(); err != nil {
		return err
	}
	return ch.l.putSignal(ch.sts, off, src, sigOff, add, v, false)
}

// Get is Link.Get through the channel.
func (ch *Channel) Get(dst []byte, off uint64) error {
	if err := ch.check(); err != nil {
		return err
	}
	return ch.l.get(ch.sts, dst, off, true)
}

// GetNBI is Link.GetNBI through the channel: dst holds the data after
// the channel's next Flush.
func (ch *Channel) GetNBI(dst []byte, off uint64) error {
	if err := ch.check(); err != nil {
		return err
	}
	return ch.l.get(ch.sts, dst, off, false)
}

// Atomic is Link.Atomic through the channel.
func (ch *Channel) Atomic(width int, op AtomicOp, off, v, cond uint64) (uint64, error) {
	if err := ch.check(); err != nil {
		return 0, err
	}
	return ch.l.atomic(ch.sts, width, op, off, v, cond)
}

// AtomicNBI is Link.AtomicNBI through the channel: *dst is valid after
// the channel's next Flush.
func (ch *Channel) AtomicNBI(width int, op AtomicOp, off, v, cond uint64, dst *uint64) error {
	if err := ch.check(); err != nil {
		return err
	}
	return ch.l.atomicNBI(ch.sts, width, op, off, v, cond, dst)
}

// Signal is Link.Signal on the channel's stream.
func (ch *Channel) Signal(off, v uint64) error {
	if err := ch.check(); err != nil {
		return err
	}
	if _, _, err := ch.l.checkAtomic(8, OpSet, off, v, 0); err != nil {
		return err
	}
	return ch.l.atomicNoReply(ch.sts[0], 8, OpSet, off, v, 0, false, sendNow)
}

// Flush returns once the peer has applied every frame queued through the
// channel before the call (and through the channels sharing its stream),
// and every reply to a GET or atomic queued through it has arrived. It
// does not wait for the link's own streams nor for other channel streams.
// A FLUSH left unanswered for Config.Timeout takes the link down, as
// Link.Flush does.
func (ch *Channel) Flush() error {
	if err := ch.check(); err != nil {
		return err
	}
	return ch.l.flush(ch.sts)
}

// Fence orders the channel's operations: free, since a channel stream is
// ordered (a Flush for a channel on the link's own streams when there
// are several).
func (ch *Channel) Fence() error {
	if err := ch.check(); err != nil {
		return err
	}
	return ch.l.fence(ch.sts)
}

// Outstanding reports whether anything was queued on the channel's
// stream since its last completed Flush.
func (ch *Channel) Outstanding() bool { return outstanding(ch.sts) }

// Err is the link's error (see Link.Err).
func (ch *Channel) Err() error { return ch.l.Err() }
