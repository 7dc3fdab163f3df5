package netmesh

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"testing"
	"time"
)

// A goroutine in Mesh.Poll reads the streams itself: the PUT that ends
// its wait is applied by it, a GET from the peer is answered meanwhile,
// and a caller of its own PE that needs the token during the poll gets
// it at once.
func TestPollAppliesAndHandsOver(t *testing.T) {
	pes := newJob(t, 2, 1<<16, "127.0.0.1", func(c *Config) { c.Spin = SpinOn; c.Heartbeat = time.Hour })
	p0, p1 := pes[0], pes[1]
	copy(p0.mem[4096:4104], []byte("from-pe0"))
	copy(p1.mem[4096:4104], []byte("from-pe1"))
	to0, to1 := link(t, pes, 1, 0), link(t, pes, 0, 1)

	// PE 1's Notify counts applied writes; the poller waits for the one
	// PUT sent to PE 1 below.
	base := p1.applied.Load()
	done := func() bool { return p1.applied.Load() > base }
	polled := make(chan bool, 1)
	go func() {
		// Poll may give up when polling does not pay (a loaded machine
		// deschedules it): then poll again, as a wait would after a nap.
		deadline := time.Now().Add(10 * time.Second)
		for !p1.m.Poll(10*time.Second, done) {
			if time.Now().After(deadline) {
				polled <- false
				return
			}
			resetSpin()
			runtime.Gosched()
		}
		polled <- true
	}()

	// PE 1's own Get needs the stream the poller may hold.
	got := make([]byte, 8)
	if err := to0.Get(got, 4096); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, []byte("from-pe0")) {
		t.Fatalf("PE 1 got %q", got)
	}
	// PE 0's Get is answered by whoever reads PE 1's end: the poller.
	if err := to1.Get(got, 4096); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, []byte("from-pe1")) {
		t.Fatalf("PE 0 got %q", got)
	}
	var v [8]byte
	binary.LittleEndian.PutUint64(v[:], 42)
	if err := to1.Put(0, v[:]); err != nil {
		t.Fatal(err)
	}
	// PE 0 waits below, so it pushes its corked put as a wait does
	// (Mesh.Push), rather than leaving it to the cork timer (off under
	// GOSHMEM_TEST_NONAP).
	p0.m.Push()
	select {
	case ok := <-polled:
		if !ok {
			t.Fatal("Poll gave up")
		}
		p1.sync()
		if w := binary.LittleEndian.Uint64(p1.mem[0:8]); w != 42 {
			t.Fatalf("word %d after the PUT", w)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Poll did not return after the PUT it waited for")
	}
	// The streams work as before: the reader goroutines took them back.
	binary.LittleEndian.PutUint64(v[:], 7)
	if err := to1.Put(8, v[:]); err != nil {
		t.Fatal(err)
	}
	if err := to1.Flush(); err != nil {
		t.Fatal(err)
	}
	p1.sync()
	if binary.LittleEndian.Uint64(p1.mem[8:16]) != 7 {
		t.Fatal("a PUT after the poll was not applied")
	}
}

// Poll does not poll when the policy says it does not pay (SpinOff, or
// a pause after misses): it reports false at once. SpinAuto on an
// oversubscribed machine polls, yielding after every look.
func TestPollPolicy(t *testing.T) {
	for _, c := range []struct {
		name    string
		mode    SpinMode
		oversub bool
		want    bool
	}{
		{"off", SpinOff, false, false},
		{"off-oversubscribed", SpinOff, true, false},
		{"auto-oversubscribed", SpinAuto, true, true},
		{"on-oversubscribed", SpinOn, true, true},
		{"auto", SpinAuto, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			pes := newJob(t, 2, 1<<16, "127.0.0.1", func(cfg *Config) { cfg.Spin = c.mode })
			m := pes[0].m
			m.SetOversubscribed(c.oversub)
			resetSpin() // no pause or costs left by other tests
			calls := 0
			got := m.Poll(time.Second, func() bool { calls++; return true })
			if got != c.want || (calls > 0) != c.want {
				t.Fatalf("Poll = %v after %d checks, want %v", got, calls, c.want)
			}
			// Paused: no poll at all, in any mode.
			spinOff.Store(mono() + int64(time.Hour))
			defer spinOff.Store(0)
			if m.Poll(time.Second, func() bool { calls++; return true }) {
				t.Fatal("Poll polled while polling was paused")
			}
			// Callers measured parking cheaper: only SpinOn polls.
			resetSpin()
			costs.record(true, false, int64(300*time.Microsecond), mono())
			costs.record(false, false, int64(50*time.Microsecond), mono())
			defer resetSpin()
			if got := m.Poll(time.Second, func() bool { return true }); got != (c.mode == SpinOn) {
				t.Fatalf("with parking measured cheaper, Poll = %v", got)
			}
		})
	}
}

// The spin policy as a table: off or paused parks; auto spins unless the
// machine is oversubscribed, where it polls yielding after every look;
// on spins even when oversubscribed.
func TestSpinPolicy(t *testing.T) {
	for _, c := range []struct {
		mode            SpinMode
		oversub, paused bool
		want            waitWay
	}{
		{SpinAuto, false, false, waitSpin},
		{SpinAuto, true, false, waitYield},
		{SpinAuto, false, true, waitPark},
		{SpinAuto, true, true, waitPark},
		{SpinOn, false, false, waitSpin},
		{SpinOn, true, false, waitSpin},
		{SpinOn, true, true, waitPark},
		{SpinOff, false, false, waitPark},
		{SpinOff, true, false, waitPark},
	} {
		if got := spinPolicy(c.mode, c.oversub, c.paused); got != c.want {
			t.Errorf("spinPolicy(mode %d, oversubscribed %v, paused %v) = %d, want %d", c.mode, c.oversub, c.paused, got, c.want)
		}
	}
}

// On an oversubscribed machine a blocking caller polls for its reply
// (yielding after every look) rather than parking at once: its small
// calls are the cost controller's polled samples.
func TestOversubscribedCallerPolls(t *testing.T) {
	pes := newJob(t, 2, 1<<16, "127.0.0.1", func(c *Config) { c.Heartbeat = time.Hour })
	pes[0].m.SetOversubscribed(true)
	pes[1].m.SetOversubscribed(true)
	resetSpin()
	defer resetSpin()
	l := link(t, pes, 0, 1)
	got := make([]byte, 8)
	// A Get that follows another reader (the reader goroutine held the
	// token) makes no sample; one that polls does, unless polling was
	// paused meanwhile (a loaded machine): look for one of many.
	for i := 0; i < 200 && costs.polled.Load() == 0; i++ {
		if err := l.Get(got, 4096); err != nil {
			t.Fatal(err)
		}
	}
	if costs.polled.Load() == 0 {
		t.Fatalf("200 Gets on an oversubscribed machine: none polled (parked average %d ns)", costs.parked.Load())
	}
}

// resetSpin clears the process-wide polling state (the pause, the
// misses, the cost controller) that other tests may have left.
func resetSpin() {
	spinOff.Store(0)
	spinMisses.Store(0)
	costs.polled.Store(0)
	costs.parked.Store(0)
}

// A Poll that ends at once allocates nothing.
func TestPollAllocs(t *testing.T) {
	pes := newJob(t, 2, 1<<16, "127.0.0.1", func(c *Config) { c.Spin = SpinOn })
	m := pes[0].m
	done := func() bool { return true }
	if n := testing.AllocsPerRun(100, func() {
		if !m.Poll(time.Second, done) {
			t.Fatal("Poll gave up")
		}
	}); n != 0 {
		t.Fatalf("Poll allocates %v times per call", n)
	}
}

// The cost controller goes the cheaper way, follows the machine when
// the costs change, explores the other way exactly once every
// exploreEvery calls, and forgets what it measured when the samples stop.
func TestCostControllerFollowsCosts(t *testing.T) {
	var s spinCosts
	now := int64(time.Hour)                             // a mono() clock that each call advances by its cost
	cost := map[bool]int64{true: 10_000, false: 50_000} // polled, parked (ns)
	// run makes n calls at the current costs and returns how many polled.
	run := func(n int) (polled, explored int) {
		for range n {
			poll, explore := s.choose(now)
			if poll {
				polled++
			}
			if explore {
				explored++
			}
			now += cost[poll]
			s.record(poll, explore, cost[poll], now)
		}
		return polled, explored
	}
	if p, e := run(10 * exploreEvery); p != 10*exploreEvery-10 || e != 10 {
		t.Fatalf("polling cheaper: %d of %d calls polled, %d explored; want all but the %d explorers", p, 10*exploreEvery, e, 10)
	}
	// The machine fills up: polling now costs six times parking.
	cost[true] = 300_000
	if p, _ := run(20); p > 10 {
		t.Fatalf("polling became dearer: %d of the first 20 calls still polled", p)
	}
	if p, e := run(10 * exploreEvery); p != e {
		t.Fatalf("parking cheaper: %d of %d calls polled, want only the %d explorers", p, 10*exploreEvery, e)
	}
	// The process stops making small calls (it only puts and flushes):
	// once the samples are stale, polling is the default again.
	if s.preferPoll(now + costStale/2) {
		t.Fatal("parking measured cheaper is forgotten too soon")
	}
	if !s.preferPoll(now + costStale + 1) {
		t.Fatalf("parking measured cheaper is still preferred %v after the last sample", time.Duration(costStale))
	}
	// The other job ends: a few explorations bring polling back.
	cost[true] = 10_000
	run(4 * exploreEvery)
	if p, e := run(exploreEvery); p != exploreEvery-e {
		t.Fatalf("polling cheaper again after 4 explorations: %d of %d calls polled", p, exploreEvery)
	}
	// One stall is clipped: it does not turn the choice.
	s.record(true, false, int64(time.Second), now)
	if !s.preferPoll(now) {
		t.Fatalf("one 1 s stall turned the choice: polled %d ns, parked %d ns", s.polled.Load(), s.parked.Load())
	}
}

// A PollFrom waiting on one link still reads the others (every
// pollOthers): PE 0 polls for a frame from PE 1, and PE 2's flag, which
// arrives on a socket the poller holds quiet (nobody else reads it), is
// applied by that poll, which then returns true. Were the other links
// never read, the poll would return false: when its time since the last
// bytes ran out, or earlier when the machine deschedules it; then the
// flag is applied by the reader goroutine once the poll gives the token
// back, and the test tries again with another flag.
func TestPollFromReadsOtherLinks(t *testing.T) {
	pes := newJob(t, 3, 1<<16, "127.0.0.1", func(c *Config) { c.Spin = SpinOn; c.Heartbeat = time.Hour })
	p0 := pes[0]
	st := link(t, pes, 0, 2).streams[0]
	defer resetSpin()
	polled := make(chan bool)
	// held waits until the poller holds PE 2's stream (it takes every
	// free token as it starts), so that only the poller can read it; false
	// if the poll returned first.
	held := func() bool {
		for {
			st.rmu.Lock()
			k := st.tok.kind
			st.rmu.Unlock()
			if k == heldPoller {
				return true
			}
			select {
			case ok := <-polled:
				if ok {
					t.Fatal("PollFrom reported done before anything was sent")
				}
				return false
			default:
				runtime.Gosched()
			}
		}
	}
	sent := p0.applied.Load()
	// Only a try whose poll held PE 2's stream counts: a poll that gave up
	// at once (polling paused after a descheduled look, or no stream
	// listed yet) says nothing, and under load that can happen many times
	// in a row within a millisecond; those are retried until a deadline.
	giveUp := time.Now().Add(30 * time.Second)
	for try := 0; try < 20; {
		if time.Now().After(giveUp) {
			t.Fatalf("in 30 s, only %d of PE 0's PollFrom calls held PE 2's stream; none applied PE 2's flag", try)
		}
		// Every flag sent before was applied (by the reader goroutine, if
		// the poll gave up), so only this try's flag ends this poll.
		for deadline := time.Now().Add(10 * time.Second); p0.applied.Load() < sent; {
			if time.Now().After(deadline) {
				t.Fatal("an earlier flag was never applied")
			}
			runtime.Gosched()
		}
		resetSpin()
		base := p0.applied.Load()
		go func() {
			polled <- p0.m.PollFrom(100*time.Millisecond, 1, func() bool { return p0.applied.Load() > base })
		}()
		if !held() {
			runtime.Gosched()
			continue // it gave up at once (polling paused): again, uncounted
		}
		try++
		if err := link(t, pes, 2, 0).Signal(64, uint64(try)); err != nil {
			t.Fatal(err)
		}
		sent = base + 1
		if <-polled {
			return
		}
	}
	t.Fatal("in 20 tries, no PollFrom(from 1) applied PE 2's flag")
}
