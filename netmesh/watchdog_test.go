package netmesh

import (
	"errors"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/errs"
)

func TestWatchClock(t *testing.T) {
	c := watchClock{tick: 10 * time.Millisecond}
	t0 := time.Unix(1000, 0)
	steps := []struct {
		wall time.Duration // since t0
		want time.Duration // the clock, since t0
	}{
		{0, 0},                          // the first tick reads the wall clock
		{10 * time.Millisecond, 10e6},   // on time
		{25 * time.Millisecond, 25e6},   // late by half a tick: counted
		{45 * time.Millisecond, 45e6},   // two ticks: counted
		{1045 * time.Millisecond, 65e6}, // a stall of a second: two ticks
		{1055 * time.Millisecond, 75e6}, // on time again
		{1050 * time.Millisecond, 75e6}, // the wall clock went back: no time passed
		{1060 * time.Millisecond, 85e6},
	}
	for i, s := range steps {
		if got := c.advance(t0.Add(s.wall)).Sub(t0); got != s.want {
			t.Fatalf("step %d (wall %v): clock %v, want %v", i, s.wall, got, s.want)
		}
	}
}

// A stall of the PE's own process (stopped, or starved on a loaded
// machine) longer than Heartbeat*Misses is not the peer's silence: its
// heartbeats may be waiting unread in the socket, since the reader
// goroutines did not run either. The watchdog is driven here tick by
// tick with made-up wall times (its goroutine's first tick is 15 minutes
// away): after a stall of three hours the link is up, and a peer that
// then stays silent is still found lost, as soon as the watchdog's clock
// has counted Heartbeat*Misses.
func TestWatchdogStallIsNotSilence(t *testing.T) {
	pes := newJob(t, 2, 1<<16, "127.0.0.1", func(c *Config) {
		c.Heartbeat, c.Misses, c.Timeout = time.Hour, 2, 2*time.Hour
	})
	m := pes[1].m
	// PE 0's host is played as one that acknowledges nothing (gone, or
	// cut off): its real kernel answers within the test's milliseconds,
	// which would make the silence a busy peer's (TestBusyPeerIsNotLost).
	m.hostAcks = func(*stream, time.Duration) bool { return false }
	l := link(t, pes, 1, 0)
	tick := watchInterval(&m.cfg)
	if tick != 15*time.Minute || m.lossAfter != 2*time.Hour {
		t.Fatalf("tick %v, loss after %v: the test assumes 15m and 2h", tick, m.lossAfter)
	}
	wall := time.Now()
	m.watchTick(wall) // the first look records every stream's counters
	wall = wall.Add(tick)
	m.watchTick(wall)
	wall = wall.Add(3 * time.Hour) // the process did not run
	m.watchTick(wall)
	if err := l.Err(); err != nil {
		t.Fatalf("the link failed after its own process stalled: %v", err)
	}
	// Silent so far on the watchdog's clock: the tick before the stall and
	// two ticks for the stall. PE 0 sends nothing meanwhile (its watchdog
	// does not tick), so the link is lost once the silence reaches 2h.
	silent := 3 * tick
	for silent+tick < m.lossAfter {
		wall = wall.Add(tick)
		silent += tick
		m.watchTick(wall)
		if err := l.Err(); err != nil {
			t.Fatalf("the link failed after %v of silence on the watchdog's clock, before %v: %v", silent, m.lossAfter, err)
		}
	}
	m.watchTick(wall.Add(tick))
	if err := l.Err(); !errors.Is(err, errs.PeerLost) {
		t.Fatalf("after %v of silence the link is %v, want lost", silent+tick, err)
	}
}
