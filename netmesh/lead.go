package netmesh

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"time"
)

// Who reads a stream: leader/follower.
//
// A stream has one read token. Whoever holds it reads frames from the
// socket and applies them in order (serve in reader.go): PUTs into the
// segment, GETs and atomics answered, replies handed to their calls. The
// state it reads with (the read-ahead buffer) belongs to the stream, so
// the token changes hands at frame boundaries.
//
//   - A blocked caller (Get, Atomic or Flush waiting for its reply) that
//     finds the token free takes it and reads until its own reply has
//     arrived: the reply wakes, through the netpoller, the goroutine that
//     waits for it, with no hand-off through the scheduler. Then it hands
//     the token on.
//   - A blocked caller that finds the token held queues as a follower and
//     sleeps. It wakes when the holder applied its reply, when the token
//     is handed to it, or when its deadline passes.
//   - A holder hands the token to the first follower whose call is still
//     pending, else frees it.
//   - While the token is free the stream's reader goroutine watches the
//     socket: it sleeps in the netpoller on the stream's own epoll set
//     (watch.go), in which the socket is armed (one-shot) only while the
//     token is free. Bytes that arrive then wake it; it takes the token,
//     applies what the socket holds, and frees the token again when a
//     read finds nothing (or hands it to a follower). A caller that takes
//     the free token disarms the socket first, so its own reply wakes
//     nobody else: a caller's round trip costs two epoll_ctl calls and no
//     goroutine wake-up, which matters because readying a goroutine on an
//     otherwise idle process wakes a second thread (wakep) that then
//     takes the network wake-ups away from the first.
//
// With Config.BusyPoll a holder waiting for bytes polls the socket with
// non-blocking reads before it parks in the netpoller (a caller for up to
// busySpin; the reader goroutine for busyIdle after the last bytes, then
// it frees the token), and a follower polls its call for up to busySpin
// before it sleeps.
//
// A caller holder parks in conn.Read; it is kicked out of it with a read
// deadline in the past (or, when it polls, a flag) when its call was
// completed by the link's failure or its deadline passed. Deadlines are
// checked by the watchdog (watchdog.go), so no timer is set per call.

// With BusyPoll, a caller polls for its reply for at most busySpin before
// it sleeps in the netpoller as without BusyPoll, and the reader goroutine
// polls an idle socket for busyIdle before it frees the token and sleeps.
// Both are bounded because polling pays only while the peer's poller
// runs too: on a machine with more runnable threads than cores the OS
// deschedules a thread that polls for whole time slices, and polling
// without a bound made round trips five times slower than sleeping.
const (
	busySpin = 100 * time.Microsecond
	busyIdle = time.Millisecond
)

// spinCheck: a busy poller checks the clock and the link once every
// spinCheck polls.
const spinCheck = 32

// spinYield: a busy poller yields its processor (runtime.Gosched) once
// every spinYield polls (a poll that finds nothing costs about half a
// microsecond). Often is costly: a Gosched with a processor idle wakes a
// thread to take it (wakep). Seldom lets goroutines queued behind the
// poller wait: 32 made two single-PE processes on two cores more than
// twice as slow; 4096 stalled some operations for a millisecond.
var spinYield = envInt("DBG_SPINYIELD", 256)

func envInt(k string, d int) int {
	if v := os.Getenv(k); v != "" {
		var n int
		fmt.Sscan(v, &n)
		return n
	}
	return d
}

var (
	errYield  = errors.New("netmesh: read token handed on")
	pastTime  = time.Unix(1, 0)
	monoEpoch = time.Now()
)

// mono returns a monotonic clock reading in nanoseconds.
func mono() int64 { return int64(time.Since(monoEpoch)) }

// await waits for the blocking call c on its stream st: it leads the
// stream when the token is free or handed to it, else it sleeps as a
// follower. It returns c's error, or errWaitTimeout once c is removed
// after its deadline. c may be reused when await returns.
func (st *stream) await(c *call, timeout time.Duration) error {
	st.rmu.Lock()
	c.deadline = mono() + int64(timeout)
	for {
		switch {
		case st.holder == c:
			// Handed the token, or took it below: lead unless there is
			// no need any more.
			if c.done() || c.expired.Load() || st.ended {
				st.releaseLocked()
				continue
			}
			c.granted.Store(false)
			st.rmu.Unlock()
			err := st.serve(c)
			st.rmu.Lock()
			if err != errYield {
				st.endLocked(err)
			}
		case c.done():
			st.unqueueLocked(c)
			st.rmu.Unlock()
			return c.err
		case c.expired.Load():
			st.unqueueLocked(c)
			st.rmu.Unlock()
			if st.l.calls.removeIf(c) {
				return errWaitTimeout
			}
			// A holder took the reply and is applying it, or the link's
			// failure path completes it: either way it completes.
			c.block()
			return c.err
		case !st.held && !st.ended:
			st.held, st.holder = true, c
			st.w8.disarm(st)
		default:
			if !c.queued {
				st.queueLocked(c)
				if st.holder == nil {
					st.kickLocked() // a busy-polling reader goroutine: hand over
				}
			}
			st.rmu.Unlock()
			if st.busy {
				// Poll for up to busySpin, then sleep: followers that
				// yield forever keep the run queues full, and then the
				// scheduler no longer polls the network for the leader.
				for end := mono() + int64(busySpin); !c.woken() && mono() < end; {
					runtime.Gosched()
				}
			}
			c.sleep((*call).woken)
			st.rmu.Lock()
		}
	}
}

// woken reports whether a follower has something to do.
func (c *call) woken() bool { return c.done() || c.granted.Load() || c.expired.Load() }

// queueLocked appends c to the followers. st.rmu is held.
func (st *stream) queueLocked(c *call) {
	c.queued, c.prev, c.next = true, st.wtail, nil
	if st.wtail != nil {
		st.wtail.next = c
	} else {
		st.whead = c
	}
	st.wtail = c
	st.nwait.Add(1)
}

// unqueueLocked removes c from the followers if it is queued. st.rmu is
// held.
func (st *stream) unqueueLocked(c *call) {
	if !c.queued {
		return
	}
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		st.whead = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		st.wtail = c.prev
	}
	c.queued, c.prev, c.next = false, nil, nil
	st.nwait.Add(-1)
}

// releaseLocked hands the token on: to the first follower still waiting
// for its reply, else it frees it and arms the watch. st.rmu is held.
func (st *stream) releaseLocked() {
	for w := st.whead; w != nil && !st.ended; w = st.whead {
		st.unqueueLocked(w)
		if w.done() || w.expired.Load() {
			continue // already woken for that
		}
		st.w8.disarm(st)
		st.held, st.holder = true, w
		w.granted.Store(true)
		w.signal()
		return
	}
	st.held, st.holder = false, nil
	if st.ended {
		return
	}
	switch {
	case !st.w8.arm(st) || st.l.Err() != nil:
		// A closed socket has left the set: the reader goroutine must
		// look for itself, and find the stream's end.
		st.w8.wake()
	case st.frameBuffered():
		// A whole frame is already in the read buffer, where the socket's
		// readiness cannot announce it: a holder that yields to followers
		// at a frame boundary leaves what it read ahead, and the follower
		// it meant to hand over to may have been completed meanwhile (its
		// reply was among the frames the holder applied). Nobody would
		// read the stream until the peer sent more, and the peer may be
		// waiting for exactly this frame (a FLUSH), so wake the reader
		// goroutine to apply it. A partial frame needs no wake: the rest
		// of it is still to come through the socket, and arming reports
		// bytes that are already there.
		st.w8.wake()
	}
}

// endLocked records that reading the stream failed with err (or ended
// with the peer's goodbye): nobody reads it again, and the reader
// goroutine reports it. st.rmu is held.
func (st *stream) endLocked(err error) {
	if !st.ended {
		st.ended, st.rerr = true, err
	}
	st.held, st.holder = false, nil
	st.w8.wake()
}

// kickLocked makes the token's holder look up from a wait for bytes:
// its call needs attention, or a follower waits behind a busy-polling
// reader goroutine. st.rmu is held.
func (st *stream) kickLocked() {
	st.kick.Store(true)
	if st.inRead && !st.kicked {
		st.kicked = true
		st.conn.SetReadDeadline(pastTime)
	}
}

// closeConn closes the stream's socket and wakes its reader goroutine,
// which a closed socket does not wake by itself (closing a descriptor
// removes it from an epoll set silently).
func (st *stream) closeConn() {
	st.conn.Close()
	st.rmu.Lock()
	st.kickLocked()
	st.w8.wake()
	st.rmu.Unlock()
}

// kickAll kicks every stream's holder, after the link's calls were
// failed, so that a caller blocked reading sees its call completed.
func (l *Link) kickAll() {
	l.m.mu.Lock()
	streams := l.streams
	l.m.mu.Unlock()
	for _, st := range streams {
		if st != nil {
			st.rmu.Lock()
			st.kickLocked()
			st.rmu.Unlock()
		}
	}
}

// yield reports whether the holder (c, or the reader goroutine for
// c == nil) should hand the token on at this frame boundary: a follower
// waits behind the reader goroutine, or c is done (and the next frame is
// not already buffered) or expired. The holder's own state is read
// atomically; a follower that queues later kicks.
func (st *stream) yield(c *call) bool {
	if c == nil {
		return st.nwait.Load() > 0
	}
	return c.expired.Load() || (c.done() && !st.frameBuffered())
}

// frameBuffered reports whether the next frame is whole in the read
// buffer, so that a holder whose call is done applies it before handing
// on (no read can block on it).
func (st *stream) frameBuffered() bool {
	b := st.buf[st.r:st.w]
	if len(b) < prefixLen {
		return false
	}
	hl := hdrLen(b[1])
	if hl == 0 {
		return true // an unknown type: serve judges it without reading more
	}
	if len(b) < hl {
		return false
	}
	var n int
	switch b[1] {
	case typePut:
		n = int(le.Uint32(b[2:6]))
	case typePutSignal:
		n = int(le.Uint32(b[4:8]))
	case typeGetResp:
		n = int(le.Uint32(b[8:12]))
	case typeError:
		n = int(le.Uint16(b[4:6]))
	}
	return len(b)-hl >= n
}

// readIdle reads what arrives into st.buf[st.w:] for the holder at a
// frame boundary, or returns errYield when it should hand the token on.
//
// The reader goroutine (c == nil) never waits: a read that finds nothing
// (after busyIdle of polling with BusyPoll) yields, and the watch takes
// over. A caller waits for its reply: with BusyPoll polling for up to
// busySpin, then parked in conn.Read, from which a kick (a read deadline
// in the past) gets it out.
func (st *stream) readIdle(c *call) (int, error) {
	if c == nil {
		st.kick.Store(false)
		if st.yield(nil) {
			return 0, errYield
		}
		var budget int64 = -1 // one read
		if st.busy {
			budget = mono() + int64(busyIdle)
		}
		k, err := st.poll(budget)
		if k == 0 && err == nil {
			return 0, errYield
		}
		return k, err
	}
	var spinUntil int64
	if st.busy {
		spinUntil = math.MaxInt64 // until the reply, a kick or the link's end
	}
	for {
		st.rmu.Lock()
		st.kick.Store(false)
		if st.yield(c) {
			st.rmu.Unlock()
			return 0, errYield
		}
		if spinUntil != 0 && st.l.Err() == nil && mono() < spinUntil {
			st.rmu.Unlock()
			k, err := st.poll(spinUntil)
			if k > 0 || err != nil {
				return k, err
			}
			continue // kicked, or the budget is spent: look again
		}
		st.inRead = true
		st.rmu.Unlock()
		k, err := st.conn.Read(st.buf[st.w:])
		st.rmu.Lock()
		st.inRead = false
		if st.kicked {
			st.kicked = false
			st.conn.SetReadDeadline(time.Time{})
		}
		st.rmu.Unlock()
		if k > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			return k, err
		}
		// Kicked: look again.
	}
}

// poll reads the socket without waiting, into st.buf[st.w:]: once for
// budget -1, else over and over until bytes arrive, the read fails, the
// stream is kicked (a follower waiting behind the reader goroutine kicks
// it), the link is down, or mono() passes budget. (0, nil) means nothing
// arrived.
func (st *stream) poll(budget int64) (int, error) {
	sp := &st.sp
	sp.p, sp.budget = st.buf[st.w:], budget
	sp.n, sp.err = 0, nil
	err := st.raw.Read(sp.fn)
	sp.p = nil
	if err != nil {
		return 0, err
	}
	return sp.n, sp.err
}
