package netmesh

import (
	"fmt"
	"time"
)

// watchdog is the mesh's one timer goroutine. Every half heartbeat
// interval (or an eighth of Config.Timeout, if that is shorter) it looks
// at each running stream:
//
//   - receive side: if no read returned data for Heartbeat*Misses, the
//     peer is lost (a live peer sends at least a HEARTBEAT per interval);
//   - send side: if no batch was written for one Heartbeat, it queues a
//     HEARTBEAT;
//   - blocked callers: a caller whose deadline (Config.Timeout) passed is
//     marked expired and woken, or kicked out of its read if it holds
//     the stream's read token (lead.go).
//
// It reads the streams' counters (recvs, activity) and keeps its own
// last-change times, so the data path pays one atomic add per read and
// per batch, sets no timer per call, and no deadline on any socket.
func (m *Mesh) watchdog() {
	defer m.wg.Done()
	t := time.NewTicker(max(min(m.cfg.Heartbeat/2, m.cfg.Timeout/8), time.Millisecond))
	defer t.Stop()
	var streams []*stream
	for {
		var now time.Time
		select {
		case <-m.ctx.Done():
			return
		case now = <-t.C:
		}
		streams = streams[:0]
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
	}
}

func (st *stream) watch(now time.Time) {
	m := st.l.m
	st.expire(mono())
	if r := st.recvs.Load(); r != st.seenRecv || st.recvAt.IsZero() {
		st.seenRecv, st.recvAt = r, now
	} else if silent := now.Sub(st.recvAt); silent >= m.lossAfter {
		st.l.fail(st.l.lostErr(fmt.Errorf("stream %d silent for %v (heartbeat %v, %d missed)", st.idx, silent.Round(time.Millisecond), m.cfg.Heartbeat, m.cfg.Misses)), true)
		return
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
