package netmesh

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// The read token driven message by message: callers that start calls,
// take the token or queue for it, have their replies applied by whoever
// holds it, expire, or wake late (a wake-up delayed past the release that
// passed them over); a reader goroutine and a poller that take and free
// it, callers and the poller also leaving it to linger, waits that park
// (and must find no token lingering), and the linger timer that frees a
// lingering token; frames left in the buffer; the stream's end. After every step the
// invariants of token.go hold, and each release does what it must.
func TestTokenRandom(t *testing.T) {
	tokenRuns(t, 0, tokenRun)
}

const tokenCallers = 4

// modelCall is a caller's view: whether it has a call in flight, and
// whether that call was completed or expired (what pendingCall reads).
type modelCall struct {
	c       call
	active  bool // a call is in flight
	done    bool
	expired bool
}

func tokenRun(rng *rand.Rand, log *[]string, fail func(string, ...any)) {
	var tk token
	cs := make([]*modelCall, tokenCallers)
	for i := range cs {
		cs[i] = &modelCall{}
	}
	byCall := map[*call]*modelCall{}
	for _, m := range cs {
		byCall[&m.c] = m
	}
	pending := func(c *call) bool {
		m := byCall[c]
		return m.active && !m.done && !m.expired
	}
	step := func(s string, args ...any) {
		*log = append(*log, fmt.Sprintf(s, args...))
	}
	idx := func(c *call) int {
		for i, m := range cs {
			if &m.c == c {
				return i
			}
		}
		return -1
	}
	timer := false // the linger timer is pending (Mesh.lingerArm)
	parked := 0    // waits parked (Mesh.Park)
	// release as a holder does (or a poller's linger), checking what it
	// hands over.
	release := func(who string) {
		fb, down := rng.IntN(3) == 0, rng.IntN(10) == 0
		lingering := (tk.kind == heldPoller || tk.kind == heldCaller) && rng.IntN(2) == 0
		var want *call
		if !tk.ended {
			for w := tk.whead; w != nil; w = w.next {
				if pending(w) {
					want = w
					break
				}
			}
		}
		wasEnded := tk.ended
		var grant *call
		var wake bool
		if lingering {
			var lingers bool
			grant, wake, lingers = tk.linger(pending, fb, down, parked > 0)
			step("%s lingers (frame buffered %v, link down %v, %d parked): grant %d, wake %v, lingers %v", who, fb, down, parked, idx(grant), wake, lingers)
			if lingers != (grant == nil && !wasEnded && !fb && !down && parked == 0) {
				fail("linger with grant %d, ended %v, frame buffered %v, link down %v, %d parked: lingers %v", idx(grant), wasEnded, fb, down, parked, lingers)
			}
			if lingers != (tk.kind == heldLinger) || (lingers && wake) {
				fail("linger reported lingers %v, wake %v with kind %v", lingers, wake, tk.kind)
			}
			if lingers {
				timer = true // the stream arms the timer (Poll: m.lingerArm)
			}
		} else {
			grant, wake = tk.release(pending, fb, down)
			step("%s releases (frame buffered %v, link down %v): grant %d, wake %v", who, fb, down, idx(grant), wake)
		}
		if grant != want {
			fail("release granted caller %d, want %d (the first pending follower)", idx(grant), idx(want))
		}
		if grant == nil && !wasEnded && wake != (fb || down) {
			fail("release freed the token with frame buffered %v and link down %v but wake %v", fb, down, wake)
		}
		if grant != nil && (tk.kind != heldCaller || tk.holder != grant || grant.queued) {
			fail("granted caller %d does not hold the token alone", idx(grant))
		}
	}
	for n := 0; n < 60; n++ {
		switch r := rng.IntN(10); {
		case r < 3: // a caller starts a call and takes the token or queues
			i := rng.IntN(tokenCallers)
			m := cs[i]
			if m.active {
				continue
			}
			m.active, m.done, m.expired = true, false, false
			if tk.take(heldCaller, &m.c) {
				step("caller %d takes the free token", i)
				continue
			}
			kind := tk.kind
			kick := tk.queue(&m.c)
			step("caller %d queues behind %v (kick %v)", i, kind, kick)
			if kick != (kind == heldReader || kind == heldPoller) {
				fail("queue behind %v kicked %v", kind, kick)
			}
		case r < 5: // the holder applies some caller's reply
			if !tk.held() {
				continue
			}
			i := rng.IntN(tokenCallers)
			if m := cs[i]; m.active && !m.done {
				m.done = true
				step("the holder applies caller %d's reply", i)
			}
		case r == 5: // a caller's deadline passes (the watchdog unqueues it)
			i := rng.IntN(tokenCallers)
			m := cs[i]
			if m.active && !m.done && !m.expired {
				m.expired = true
				tk.unqueue(&m.c)
				step("caller %d expires", i)
			}
		case r == 6: // a caller that holds the token or was woken acts
			i := rng.IntN(tokenCallers)
			m := cs[i]
			if !m.active {
				continue
			}
			if tk.holder == &m.c {
				if m.done || m.expired || rng.IntN(2) == 0 {
					release("caller " + strconv.Itoa(i))
				}
				continue
			}
			if m.done || m.expired { // woken late: leaves the queue, returns
				tk.unqueue(&m.c)
				m.active = false
				step("caller %d returns", i)
			}
		case r == 7: // the reader goroutine
			switch {
			case tk.kind == heldReader:
				release("the reader goroutine")
			case tk.take(heldReader, nil):
				step("the reader goroutine takes the free token")
			}
		case r == 8: // a poller
			switch {
			case tk.kind == heldPoller:
				release("the poller")
			case tk.take(heldPoller, nil):
				step("a poller takes the free token")
			}
		case r == 9 && rng.IntN(3) == 0: // a wait parks (Mesh.Park) or one ends (Unpark)
			if parked > 0 && rng.IntN(2) == 0 {
				parked--
				step("a parked wait ends (%d parked)", parked)
				continue
			}
			parked++
			if tk.kind == heldLinger { // Park's freeLingering
				release("a wait that parks")
			} else {
				step("a wait parks (%d parked)", parked)
			}
		case r == 9 && rng.IntN(2) == 0: // the linger timer fires
			if !timer {
				continue
			}
			timer = false
			was := tk.kind
			fb := rng.IntN(3) == 0
			grant, wake, freed := tk.unlinger(pending, func() bool { return fb }, false)
			step("the linger timer runs (frame buffered %v): freed %v, grant %d, wake %v", fb, freed, idx(grant), wake)
			if freed != (was == heldLinger) || (!freed && tk.kind != was) || tk.kind == heldLinger {
				fail("the linger timer with the token %v: freed %v, now %v", was, freed, tk.kind)
			}
			if freed && (grant != nil || wake != fb) {
				fail("the linger timer freed a lingering token with grant %d, wake %v, frame buffered %v", idx(grant), wake, fb)
			}
		default:
			if rng.IntN(8) == 0 && !tk.ended {
				tk.end()
				step("the stream ends")
			}
		}
		if err := tokenInvariants(&tk, pending); err != nil {
			fail("%v (holder caller %d)", err, idx(tk.holder))
		}
		if tk.kind == heldLinger && (!timer || !tk.free() || tk.held() || !tk.wantQuiet()) {
			fail("a lingering token: timer pending %v, free %v, held %v, quiet %v", timer, tk.free(), tk.held(), tk.wantQuiet())
		}
		if tk.kind == heldLinger && parked > 0 {
			fail("a token lingers while %d waits are parked: arrivals would wait for the timer", parked)
		}
	}
}

// tokenInvariants checks the invariants of token.go that hold after
// every transition, whoever drives it.
func tokenInvariants(tk *token, pending func(*call) bool) error {
	if (tk.kind == heldCaller) != (tk.holder != nil) {
		return fmt.Errorf("kind %v with a holder %v", tk.kind, tk.holder != nil)
	}
	seen := map[*call]bool{}
	count := 0
	for w := tk.whead; w != nil; w = w.next {
		if seen[w] || !w.queued || w == tk.holder {
			return fmt.Errorf("a follower queued twice, unmarked, or while holding")
		}
		seen[w] = true
		count++
	}
	if count != tk.queued {
		return fmt.Errorf("%d followers counted, %d queued", count, tk.queued)
	}
	// An arrival signals the reader goroutine's watch (the socket is not
	// quiet) exactly when nobody else reads it.
	signals := !tk.ended && !tk.wantQuiet()
	if signals != (!tk.ended && (tk.kind == heldNone || tk.kind == heldReader)) {
		return fmt.Errorf("arrivals signal the watch %v (quiet %v) with kind %v, ended %v", signals, tk.wantQuiet(), tk.kind, tk.ended)
	}
	if tk.kind == heldLinger && (!tk.free() || tk.held() || !tk.wantQuiet()) {
		return fmt.Errorf("a lingering token: free %v, held %v, quiet %v", tk.free(), tk.held(), tk.wantQuiet())
	}
	if tk.ended && tk.wantQuiet() {
		return fmt.Errorf("an ended stream wants its socket quiet")
	}
	if tk.free() {
		for w := tk.whead; w != nil; w = w.next {
			if pending(w) {
				return fmt.Errorf("the token is free while a follower waits for it")
			}
		}
	}
	if tk.ended {
		var c call
		if tk.take(heldCaller, &c) || tk.take(heldReader, nil) {
			return fmt.Errorf("the token was taken after the stream ended")
		}
	}
	return nil
}

func (k holderKind) String() string {
	switch k {
	case heldNone:
		return "nobody"
	case heldCaller:
		return "a caller"
	case heldReader:
		return "the reader goroutine"
	case heldPoller:
		return "a poller"
	case heldLinger:
		return "nobody (lingering)"
	}
	return "?"
}

func joinLines(l []string) string {
	s := ""
	for i, x := range l {
		s += "  " + strconv.Itoa(i+1) + ". " + x + "\n"
	}
	return s
}

// tokenRuns drives one of the two token models (run) 3000 times (300
// with -short) from one seed: the clock's or GOSHMEM_TOKEN_SEED's,
// logged, so a failure replays; the generator's stream tells the models
// apart. A run records its steps in log; fail ends the test with the
// seed, the run and those steps.
func tokenRuns(t *testing.T, stream uint64, run func(rng *rand.Rand, log *[]string, fail func(string, ...any))) {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("GOSHMEM_TOKEN_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d (GOSHMEM_TOKEN_SEED replays it)", seed)
	rng := rand.New(rand.NewPCG(seed, stream))
	runs := 3000
	if testing.Short() {
		runs = 300
	}
	for r := 0; r < runs; r++ {
		var log []string
		run(rng, &log, func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d (GOSHMEM_TOKEN_SEED replays it), run %d: "+format+"\nsteps:\n%s",
				append(append([]any{seed, r}, args...), joinLines(log))...)
		})
	}
}
