package netmesh

import (
	"errors"
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
//     pending, else frees it; a caller or poller done with it leaves it
//     lingering instead (lingerLocked, spin.go), free but still quiet,
//     unless a wait of the PE is parked (Mesh.Park): a parked wait is
//     woken only by whoever reads its write, so then nobody may leave a
//     socket quiet and unread.
//   - While the token is free the stream's reader goroutine watches the
//     socket: it sleeps in the netpoller on the stream's own epoll set
//     (watch.go), which arrivals signal while the socket is not quiet:
//     while the token is free (not lingering) or held by the reader
//     goroutine. Bytes that arrive then wake it; it takes the token,
//     applies what the socket holds, and frees the token again when a
//     read finds nothing (or hands it to a follower). A caller or poller
//     that takes the token makes the socket quiet, so its reply wakes
//     nobody else: no goroutine wake-up, which matters because readying a
//     goroutine on an otherwise idle process wakes a second thread
//     (wakep) that then takes the network wake-ups away from the first.
//     One that takes a lingering token, as in a loop of calls or waits,
//     makes no system call for it at all.
//
// While the spin policy allows it (spin.go), a holder waiting for bytes
// polls the socket with non-blocking reads before it parks in the
// netpoller (a caller for up to busySpin; with SpinOn the reader
// goroutine too, for busyIdle after the last bytes), a follower polls its
// call for up to followSpin before it sleeps, and a goroutine waiting for
// its segment to change (Mesh.Poll) takes the free tokens of every stream
// and polls them all.
//
// A caller holder parks in conn.Read; it is kicked out of it with a read
// deadline in the past (or, when it polls, a flag) when its call was
// completed by the link's failure or its deadline passed. Deadlines are
// checked by the watchdog (watchdog.go), so no timer is set per call.

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
	start := mono()
	c.deadline = start + int64(timeout)
	for {
		switch awaitStep(st.tok.holder == c, c.done(), c.expired.Load(), st.tok.ended, st.tok.free()) {
		case awaitRelease:
			// Handed the token, or took it below, with no need to lead
			// any more.
			if st.lingerLocked() {
				st.l.m.lingerArm()
			}
		case awaitLead:
			c.granted.Store(false)
			st.rmu.Unlock()
			err := st.serve(c, nil)
			st.rmu.Lock()
			if err != errYield {
				st.endLocked(err)
			}
		case awaitDone:
			st.unqueueLocked(c)
			st.rmu.Unlock()
			if c.way != wayNone && !c.followed && c.err == nil && c.small() {
				now := mono()
				costs.record(c.way == wayPolled, c.explore, now-start, now)
			}
			return c.err
		case awaitExpired:
			st.unqueueLocked(c)
			st.rmu.Unlock()
			if st.calls.removeIf(c) {
				return errWaitTimeout
			}
			// A holder took the reply and is applying it, or the link's
			// failure path completes it: either way it completes.
			c.block()
			return c.err
		case awaitTake:
			st.takeLocked(heldCaller, c)
		case awaitFollow:
			// Not the holder, so a granted flag is stale: the token was
			// handed to c and then lost to the stream's end (endLocked from
			// the reader goroutine whose set failed) before c woke. Left
			// set, woken would hold and c would loop here without sleeping
			// until the stream's calls are failed (TestTokenMessages).
			c.granted.Store(false)
			if !c.queued {
				st.queueLocked(c)
			}
			c.followed = true
			st.rmu.Unlock()
			if now := mono(); st.l.spinOK(now) {
				// Poll for up to followSpin, then sleep: followers that
				// yield forever keep the run queues full, and then the
				// scheduler no longer polls the network for the leader.
				for end := now + int64(followSpin); !c.woken() && mono() < end; {
					runtime.Gosched()
				}
			}
			c.sleep((*call).woken)
			st.rmu.Lock()
		}
	}
}

// What a blocked caller does next on one pass of await.
type awaitAction uint8

const (
	awaitRelease awaitAction = iota // it holds the token but needs it no more: release (or linger) it
	awaitLead                       // it holds the token and waits for its reply: read the stream
	awaitDone                       // its call completed: return its result
	awaitExpired                    // its deadline passed: take the call back, or wait for its completion
	awaitTake                       // the token is free: take it
	awaitFollow                     // another holds the token: queue and sleep until woken
)

// awaitStep is await's decision, a pure function of what the caller sees
// under the stream's lock: whether it holds the token, whether its call
// is done or expired, whether the stream ended, whether the token is
// free. TestTokenMessages' model of a caller takes its decisions here
// too, so the model and await cannot drift apart.
func awaitStep(holder, done, expired, ended, free bool) awaitAction {
	switch {
	case holder && (done || expired || ended):
		return awaitRelease
	case holder:
		return awaitLead
	case done:
		return awaitDone
	case expired:
		return awaitExpired
	case free:
		return awaitTake
	}
	return awaitFollow
}

// woken reports whether a follower has something to do.
func (c *call) woken() bool { return c.done() || c.granted.Load() || c.expired.Load() }

// The stream's side of its token (token.go): each transition under
// st.rmu, then what it asks for. The socket is quiet exactly when the
// token wants it (wantQuiet).

// takeLocked gives the free token to a holder of kind k (c for a caller)
// and reports whether it was free. st.rmu is held.
func (st *stream) takeLocked(k holderKind, c *call) bool {
	if !st.tok.take(k, c) {
		return false
	}
	st.watchLocked() // a caller's or poller's reply wakes nobody else (quiet)
	return true
}

// watchLocked makes the socket quiet or not as the token wants it. It
// reports false if the mark could not be set (a closed socket). st.rmu
// is held.
func (st *stream) watchLocked() bool {
	return st.w8.setQuiet(st, st.tok.wantQuiet())
}

// queueLocked appends c to the followers, kicking a reader goroutine or
// poller that holds the token so that it hands it over. st.rmu is held.
func (st *stream) queueLocked(c *call) {
	if st.tok.queue(c) {
		st.kickLocked()
	}
	st.nwait.Store(int32(st.tok.queued))
}

// unqueueLocked removes c from the followers if it is queued. st.rmu is
// held.
func (st *stream) unqueueLocked(c *call) {
	st.tok.unqueue(c)
	st.nwait.Store(int32(st.tok.queued))
}

// pendingCall reports whether a follower still wants the token.
func pendingCall(c *call) bool { return !c.done() && !c.expired.Load() }

// releaseLocked hands the token on: to the first follower still waiting
// for its reply, else it frees it and the socket stops being quiet.
// Lowering the mark signals the watch if bytes are already queued.
// st.rmu is held.
//
// A freed token with a whole frame in the read buffer wakes the reader
// goroutine: the socket's readiness cannot announce it. A holder that
// yields to followers at a frame boundary leaves what it read ahead, and
// the follower it meant to hand over to may have been completed
// meanwhile (its reply was among the frames the holder applied). Nobody
// would read the stream until the peer sent more, and the peer may be
// waiting for exactly this frame (a FLUSH). A partial frame needs no
// wake: the rest of it is still to come through the socket, and arming
// reports bytes that are already there.
func (st *stream) releaseLocked() {
	w, wake := st.tok.release(pendingCall, st.frameBuffered(), st.l.Err() != nil)
	st.handedLocked(w, wake)
}

// unlingerLocked frees the token if it lingers (token.unlinger), as
// releaseLocked does. st.rmu is held.
func (st *stream) unlingerLocked() {
	if w, wake, freed := st.tok.unlinger(pendingCall, st.frameBuffered, st.l.Err() != nil); freed {
		st.handedLocked(w, wake)
	}
}

// handedLocked carries out what a release or linger of the token asked
// for: the socket's watch as the token now wants it, the follower
// granted the token (w) signalled, the reader goroutine woken (wake).
// st.rmu is held.
func (st *stream) handedLocked(w *call, wake bool) {
	if !st.watchLocked() && !st.tok.ended {
		wake = true // a closed socket has left the set: the reader finds the end
	}
	st.nwait.Store(int32(st.tok.queued))
	if w != nil {
		w.granted.Store(true)
		w.signal()
	}
	if wake {
		st.w8.wake()
	}
}

// lingerLocked ends the holding of a caller whose call is done or of a
// Poll whose wait was satisfied (token.linger): to a pending follower,
// else freed but kept quiet for the next caller or poller, which then
// takes it without a system call (a barrier's rounds, a loop of waits or
// of calls come back within microseconds). It reports whether the token
// lingers: then the caller arms the mesh's linger timer, which frees it
// (Mesh.lingerArm). st.rmu is held.
//
// While a wait of the PE is parked (Mesh.Park) the token is freed
// instead: a quiet socket signals nobody, and the write the parked wait
// needs would sit unread until the timer. parked is read under st.rmu
// and Park raises it before it takes every st.rmu to free what lingers,
// so either this linger sees the count, or Park's freeing comes after it
// and frees the token.
func (st *stream) lingerLocked() bool {
	w, wake, lingers := st.tok.linger(pendingCall, st.frameBuffered(), st.l.Err() != nil, st.l.m.parked.Load() > 0)
	st.handedLocked(w, wake)
	return lingers && st.tok.kind == heldLinger
}

// endLocked records that reading the stream failed with err (or ended
// with the peer's goodbye): nobody reads it again, and the reader
// goroutine reports it. st.rmu is held.
func (st *stream) endLocked(err error) {
	if !st.tok.ended {
		st.rerr = err
	}
	st.tok.end()
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
	streams := l.allLocked()
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
	return len(b)-hl >= payloadLen(b[1], b[:hl])
}

// readIdle reads what arrives into st.buf[st.w:] for the holder at a
// frame boundary, or returns errYield when it should hand the token on.
//
// A reader without a call (c == nil: the reader goroutine, or a
// Mesh.Poll) never waits: a read that finds nothing (for the reader
// goroutine with SpinOn, after busyIdle of polling) yields, and the watch
// or the poller's loop takes over. A caller waits for its reply: while
// the spin policy allows, polling for up to busySpin, then parked in
// conn.Read (its quiet socket made loud first, watch.go), from which a
// kick (a read deadline in the past) gets it out.
func (st *stream) readIdle(c *call) (int, error) {
	if c == nil {
		st.kick.Store(false)
		if st.yield(nil) {
			return 0, errYield
		}
		var budget int64 = -1 // one read
		if now := mono(); st.tok.kind != heldPoller && st.l.m.cfg.Spin == SpinOn && st.l.spinOK(now) {
			budget = now + int64(busyIdle)
		}
		k, err := st.poll(budget, false)
		if k == 0 && err == nil {
			return 0, errYield
		}
		return k, err
	}
	var spinUntil int64
	yield := false // poll giving the processor away after every look
	if now := mono(); st.callerPolls(c, now) {
		yield = st.l.m.policy(now) == waitYield
		spinUntil = now + int64(busySpin)
		if yield {
			spinUntil = now + int64(yieldSpin)
		}
	}
	for {
		st.rmu.Lock()
		st.kick.Store(false)
		if st.yield(c) {
			st.rmu.Unlock()
			return 0, errYield
		}
		if spinUntil != 0 && st.l.Err() == nil {
			if now := mono(); now >= spinUntil {
				spinMissed(now) // polling did not pay: sleep
				spinUntil = 0
			} else if now < spinOff.Load() {
				spinUntil = 0 // paused meanwhile
			} else {
				st.rmu.Unlock()
				k, err := st.poll(spinUntil, yield)
				if k > 0 {
					spinPaid()
				}
				if k > 0 || err != nil {
					return k, err
				}
				continue // kicked, or the budget is spent: look again
			}
		}
		st.loudLocked() // a quiet socket would not wake the netpoller
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

// callerPolls reports whether caller c, about to wait for bytes as the
// stream's holder, polls for them first: the spin policy (on an
// oversubscribed machine, polling that yields after every look), and
// the cost controller's choice, made once per call (spin.go).
func (st *stream) callerPolls(c *call, now int64) bool {
	m := st.l.m
	if m.policy(now) == waitPark {
		if c.way == wayNone {
			c.way = wayParked // what it costs is still the parked way's sample
		}
		return false
	}
	if m.cfg.Spin == SpinOn {
		c.way = wayPolled
		return true
	}
	if c.way == wayNone {
		// Only a small call's wait is a sample, so only a small call
		// explores; the others go the preferred way.
		poll, explore := costs.preferPoll(now), false
		if c.small() {
			poll, explore = costs.choose(now)
		}
		c.way, c.explore = wayParked, explore
		if poll {
			c.way = wayPolled
		}
	}
	return c.way == wayPolled
}

// small reports whether c's reply is small: a GET of at most copyMax
// bytes, or an atomic. Only their waits are the cost controller's
// samples: what a large reply or a Flush waits for depends on the bytes
// before it.
func (c *call) small() bool {
	return c.kind == typeAtomic || (c.kind == typeGet && len(c.dst) <= copyMax)
}

// poll reads the socket without waiting, into st.buf[st.w:]: once for
// budget -1, else over and over until bytes arrive, the read fails, the
// stream is kicked (a follower waiting behind the reader goroutine kicks
// it), the link is down, or mono() passes budget; with yield, giving the
// processor away after every read that finds nothing. (0, nil) means
// nothing arrived.
func (st *stream) poll(budget int64, yield bool) (int, error) {
	return st.pollInto(st.buf[st.w:], budget, yield)
}

// pollInto is poll into p.
func (st *stream) pollInto(p []byte, budget int64, yield bool) (int, error) {
	sp := &st.sp
	sp.p, sp.budget, sp.yield = p, budget, yield
	sp.n, sp.err = 0, nil
	err := st.raw.Read(sp.fn)
	sp.p = nil
	if err != nil {
		return 0, err
	}
	return sp.n, sp.err
}
