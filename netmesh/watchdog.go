package netmesh

import (
	"fmt"
	"time"
)

// watchdog is the mesh's one timer goroutine. Every half heartbeat
// interval (or an eighth of Config.Timeout, if that is shorter) it looks
// at each running stream (watchTick):
//
//   - receive side: if no read returned data for Heartbeat*Misses (on
//     the watchdog's clock, below), the peer is lost (a live peer sends
//     at least a HEARTBEAT per interval), unless the peer's host has
//     acknowledged this side's bytes within that time (peerHostAcks):
//     then the peer's process holds its socket open and
//     its kernel runs, but the process sends nothing. It is busy in code
//     the Go runtime cannot preempt (a loop of large copy() calls on a
//     PE bound to one CPU starves the PE's timer and writer goroutines:
//     its heartbeats stopped for as long as the loop ran), or stopped in
//     a debugger. Neither is a lost peer; a call waiting on it ends at
//     Config.Timeout (ErrTimeout) as for any slow peer. A host that is
//     gone or cut off acknowledges nothing: this side's heartbeats stay
//     unacknowledged, so silence still means loss there, and
//     TCP_USER_TIMEOUT (the same Heartbeat*Misses) fails the connection
//     too;
//   - send side: if no batch was written for one Heartbeat, it queues a
//     HEARTBEAT;
//   - blocked callers: a caller whose deadline (Config.Timeout) passed is
//     marked expired and woken, or kicked out of its read if it holds
//     the stream's read token (lead.go).
//
// It reads the streams' counters (recvs, activity) and keeps its own
// last-change times, so the data path pays one atomic add per read and
// per batch, sets no timer per call, and no deadline on any socket.
//
// Silence is measured on the watchdog's own clock (watchClock), which
// counts at most two ticks for any gap between two ticks: while this
// process did not run (stopped, descheduled on a loaded machine, a
// long pause of the whole runtime) neither did its reader goroutines,
// so the peer's heartbeats may be queued unread in the socket, and what
// the watchdog saw was its own stall, not the peer's silence. On the
// wall clock a stall of the process as long as Heartbeat*Misses made
// its next tick fail the links whose bytes it had not read yet
// (TestWatchdogStallIsNotSilence; TestChannelStreamHeartbeats failed
// so when its process was stopped for 300 ms, and under heavy load).
// A peer that is really silent is still found lost: the clock advances
// by at least a tick per tick.
func (m *Mesh) watchdog() {
	defer m.wg.Done()
	t := time.NewTicker(m.wclock.tick)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		m.watchTick(time.Now())
	}
}

// watchInterval is the watchdog's tick: every half heartbeat interval,
// or an eighth of the timeout if that is shorter.
func watchInterval(cfg *Config) time.Duration {
	return max(min(cfg.Heartbeat/2, cfg.Timeout/8), time.Millisecond)
}

// watchClock is the watchdog's clock: it advances with the wall clock,
// but by at most two ticks from one tick to the next.
type watchClock struct {
	tick time.Duration
	wall time.Time // the last tick's wall time (zero before the first)
	now  time.Time // the clock's reading at the last tick
}

// advance reads the clock at a tick at wall time wall.
func (c *watchClock) advance(wall time.Time) time.Time {
	if c.wall.IsZero() {
		c.now = wall
	} else {
		c.now = c.now.Add(min(max(wall.Sub(c.wall), 0), 2*c.tick))
	}
	c.wall = wall
	return c.now
}

// watchTick is one tick of the watchdog at wall time wall: it looks at
// every running stream of the links that are up.
func (m *Mesh) watchTick(wall time.Time) {
	now := m.wclock.advance(wall)
	streams := m.watchList[:0]
	m.mu.Lock()
	for _, l := range m.links {
		if l.Err() != nil {
			continue
		}
		for _, st := range l.allLocked() {
			if st.started.Load() {
				streams = append(streams, st)
			}
		}
	}
	m.mu.Unlock()
	for _, st := range streams {
		st.watch(now)
	}
	clear(streams)
	m.watchList = streams
}

func (st *stream) watch(now time.Time) {
	m := st.l.m
	st.expire(mono())
	if r := st.recvs.Load(); r != st.seenRecv || st.recvAt.IsZero() {
		st.seenRecv, st.recvAt, st.busyLogged = r, now, false
	} else if silent := now.Sub(st.recvAt); silent >= m.lossAfter {
		if !m.hostAcks(st, m.lossAfter) {
			st.l.fail(st.l.lostErr(fmt.Errorf("stream %d silent for %v (heartbeat %v, %d missed)", st.idx, silent.Round(time.Millisecond), m.cfg.Heartbeat, m.cfg.Misses)), true)
			return
		}
		if !st.busyLogged {
			st.busyLogged = true
			m.logf("netmesh: PE %d: PE %d has sent nothing on stream %d for %v, but its host acknowledges this side's heartbeats: it is busy or stopped, not lost (calls waiting on it end at the timeout)",
				m.cfg.Rank, st.l.rank, st.idx, silent.Round(time.Millisecond))
		}
	}
	if a := st.q.activity.Load(); a != st.seenSend || st.sendAt.IsZero() {
		st.seenSend, st.sendAt = a, now
	} else if now.Sub(st.sendAt) >= m.cfg.Heartbeat {
		st.q.heartbeat()
		st.sendAt = now
	}
}

// expire marks the blocked calls on st whose deadline is before now as
// expired: a follower leaves the queue and is woken, a holder is kicked.
func (st *stream) expire(now int64) {
	st.rmu.Lock()
	defer st.rmu.Unlock()
	for w := st.tok.whead; w != nil; {
		next := w.next
		if w.deadline < now {
			st.unqueueLocked(w)
			w.expired.Store(true)
			w.signal()
		}
		w = next
	}
	if h := st.tok.holder; h != nil && h.deadline < now && !h.expired.Load() {
		h.expired.Store(true)
		st.kickLocked()
	}
}
