package netmesh

import (
	"fmt"
	"time"
)

// watchdog is the mesh's one timer goroutine. Every half heartbeat
// interval it looks at each running stream:
//
//   - receive side: if no read returned data for Heartbeat*Misses, the
//     peer is lost (a live peer sends at least a HEARTBEAT per interval);
//   - send side: if no batch was written for one Heartbeat, it queues a
//     HEARTBEAT.
//
// It reads the streams' counters (recvs, activity) and keeps its own
// last-change times, so the data path pays one atomic add per read and
// per batch, and no deadline is set on any socket.
func (m *Mesh) watchdog() {
	defer m.wg.Done()
	t := time.NewTicker(max(m.cfg.Heartbeat/2, time.Millisecond))
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
			for _, st := range l.streams {
				if st != nil && st.started.Load() {
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
