package netmesh

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/goshmem/goshmem/verify/explore"
)

// Quiet over TCP, explored over every interleaving: a Flush (what Quiet
// does on a link) after non-blocking puts and a non-blocking GET on two
// streams, beside another goroutine's blocking GET on stream 0 that
// waits for the same read token, against the peer's in-order serving,
// the reader goroutines, and a watchdog that may expire either
// goroutine's call at any moment (once per run). The read token (token.go), the call table and the calls
// (calls.go) are the real ones; around them the model follows, step by
// step, what stream.await, serve/apply, Link.Flush and its failure path
// (fail, then quiesce) do with them. Applying a reply is two steps, as
// in apply.go: remove the call from the table, then write its
// destination and complete it.
//
// Properties:
//   - the token's invariants (token.go) hold in every state;
//   - a Flush that returns nil returns after the peer applied every put
//     queued before it and after every earlier GET's destination was
//     written;
//   - nothing is written into a call's destination after Flush returned
//     (a failed Flush included), nor into the blocking GET's after it
//     returned; that GET returns nil only with its destination written;
//   - both goroutines always return, and no token is left held.
//
// The failure path closes the sockets (Link.fail): a holder's next read
// fails and it ends the stream (endLocked), a free token's reader
// goroutine finds the end. Left out: read-ahead of several frames at once (a frame is read whole
// by the holder that applies it), so release's frameBuffered wake is not
// exercised here (TestTokenRandom drives it); the writer side (frames
// are on the wire from the start).

const qStreams = 2

type qFrame struct {
	kind byte // typePut, typeGet, typeFlush: requests; replies carry the call
	call int  // index into qWorld.calls, for GET and FLUSH (and their replies)
	put  int  // index of the put, for PUT
}

// qWorld is one run.
type qWorld struct {
	tok      [qStreams]token
	table    [2]callTable // each stream's
	calls    []*call      // the GET (nbi), the two FLUSH calls, the other goroutine's blocking GET
	toPeer   [qStreams][]qFrame
	toUs     [qStreams][]qFrame // replies on the wire to this side, in order
	applied  [2]bool            // the peer applied put i
	written  []bool             // call i's destination was written
	flushPC  int                // which FLUSH the Flush goroutine waits for (qStreams: done waiting)
	timedOut bool
	first    error
	failed   bool // the link's failure path ran
	returned bool // Flush returned
	result   error
	// The other goroutine: a blocking GET (call 3) on stream 0, waiting
	// beside the Flush for the same read token.
	getDone  bool
	getErr   error
	applying [qStreams]int // the holder of stream s has removed call applying-1 and is to write it
	expired  int
	grants   int // releases that handed the token to a follower
	bad      string
	mutant   string // "no-quiesce": Flush returns without waiting for holders
}

func newQWorld(mutant string) *qWorld {
	w := &qWorld{mutant: mutant}
	w.table[0].init()
	w.table[1].init()
	get := &call{kind: typeGet, nbi: true, wake: make(chan struct{}, 1)}
	f0 := &call{kind: typeFlush, wake: make(chan struct{}, 1)}
	f1 := &call{kind: typeFlush, wake: make(chan struct{}, 1)}
	bget := &call{kind: typeGet, wake: make(chan struct{}, 1)}
	w.calls = []*call{get, f0, f1, bget}
	w.written = make([]bool, len(w.calls))
	for _, c := range w.calls {
		if err := w.table[w.streamOf(c)].add(c); err != nil {
			panic(err)
		}
	}
	w.toPeer[0] = []qFrame{{kind: typePut, put: 0}, {kind: typeGet, call: 0}, {kind: typeGet, call: 3}, {kind: typeFlush, call: 1}}
	w.toPeer[1] = []qFrame{{kind: typePut, put: 1}, {kind: typeFlush, call: 2}}
	return w
}

// flushCall is the FLUSH the Flush goroutine waits for now.
func (w *qWorld) flushCall() *call {
	if w.flushPC >= qStreams {
		return nil
	}
	return w.calls[1+w.flushPC]
}

type qMove struct {
	actor int // 0 the peer, 1+s stream s's holder or reader goroutine, 3 the watchdog, 4 the Flush goroutine, 5 the blocking GET's
	label string
	do    func()
}

func (w *qWorld) idx(c *call) int {
	for i, x := range w.calls {
		if x == c {
			return i
		}
	}
	return -1
}

// moves lists what may happen next; each applies to w.
func (w *qWorld) moves() []qMove {
	var ms []qMove
	actor := 0
	add := func(label string, do func()) { ms = append(ms, qMove{actor, label, do}) }
	// The peer serves each stream in order.
	for s := 0; s < qStreams; s++ {
		if len(w.toPeer[s]) == 0 {
			continue
		}
		f := w.toPeer[s][0]
		add(fmt.Sprintf("peer applies stream %d's next frame (%s)", s, qKind(f.kind)), func() {
			w.toPeer[s] = w.toPeer[s][1:]
			if f.kind == typePut {
				w.applied[f.put] = true
				return
			}
			w.toUs[s] = append(w.toUs[s], f) // the reply
		})
	}
	// Holders on this side apply replies; reader goroutines take free tokens.
	for s := 0; s < qStreams; s++ {
		actor = 1 + s
		tk := &w.tok[s]
		if a := w.applying[s]; a != 0 {
			c := w.calls[a-1]
			add(fmt.Sprintf("stream %d's holder writes the reply of call %d and completes it", s, a-1), func() {
				if a-1 == 3 && w.getDone {
					w.bad = fmt.Sprintf("the blocking GET's destination written after it returned (%v)", w.getErr)
				} else if a-1 != 3 && w.returned {
					w.bad = fmt.Sprintf("call %d's destination written after Flush returned (%v)", a-1, w.result)
				}
				w.written[a-1] = true
				w.applying[s] = 0
				if !c.nbi {
					// A non-blocking call's completion only recycles it
					// (putCall), into the pool other tests draw from.
					c.complete(nil)
				}
			})
			continue
		}
		if w.failed && !tk.ended && (tk.kind == heldReader || tk.free()) {
			// The socket is closed: the reader goroutine's read (or its
			// watch, for a free token) fails, and it ends the stream.
			add(fmt.Sprintf("stream %d's reader goroutine finds the socket closed and ends the stream", s), func() { tk.end() })
			continue
		}
		if w.failed && tk.kind == heldCaller && !tk.holder.done() && !tk.holder.expired.Load() {
			// A caller serving: its read fails, serve returns the error,
			// and await ends the stream (endLocked).
			add(fmt.Sprintf("stream %d's holder (call %d's goroutine) finds the socket closed and ends the stream", s, w.idx(tk.holder)), func() { tk.end() })
			continue
		}
		if tk.held() && len(w.toUs[s]) > 0 && !w.failed {
			f := w.toUs[s][0]
			add(fmt.Sprintf("stream %d's holder (%v) reads the reply of call %d", s, tk.kind, f.call), func() {
				w.toUs[s] = w.toUs[s][1:]
				if c := w.table[s].remove(w.calls[f.call].id); c != nil {
					w.applying[s] = w.idx(c) + 1
				}
			})
		}
		switch {
		case tk.kind == heldReader && (len(w.toUs[s]) == 0 || tk.queued > 0):
			add(fmt.Sprintf("stream %d's reader goroutine releases the token", s), func() { w.release(s) })
		case tk.free() && len(w.toUs[s]) > 0:
			add(fmt.Sprintf("stream %d's reader goroutine takes the free token", s), func() { tk.take(heldReader, nil) })
		}
	}
	// The watchdog expires the FLUSH being waited for (once per run).
	actor = 3
	for _, c := range []*call{w.flushCall(), w.getCall()} {
		if c != nil && !c.done() && !c.expired.Load() && w.expired == 0 {
			add(fmt.Sprintf("the watchdog expires call %d", w.idx(c)), func() {
				w.expired++
				c.expired.Store(true)
				w.tok[w.streamOf(c)].unqueue(c)
				c.signal()
			})
		}
	}
	// The other goroutine: stream.await for its blocking GET.
	actor = 5
	if c := w.getCall(); c != nil {
		w.awaitMoves(c, add, func(err error) { w.getDone, w.getErr = true, err; w.getReturned() })
	}
	// The Flush goroutine: stream.await for each FLUSH, then Flush's end.
	actor = 4
	if c := w.flushCall(); c != nil {
		w.awaitMoves(c, add, func(err error) {
			if err == errWaitTimeout {
				w.timedOut = true
			}
			if err != nil && w.first == nil {
				w.first = err
			}
			w.flushPC++
		})
	} else if !w.returned {
		switch {
		case w.timedOut && !w.failed:
			add("Flush fails the link: every pending call fails, the sockets close", func() {
				w.failed = true
				err := fmt.Errorf("explored: no FLUSH_REPLY: %w", errWaitTimeout)
				w.table[0].failAll(err, true)
				w.table[1].failAll(err, true)
			})
		case w.timedOut && w.mutant != "no-quiesce":
			quiet := true
			for s := range w.tok {
				quiet = quiet && w.tok[s].ended && !w.tok[s].held()
			}
			if quiet {
				add("Flush's quiesce sees no reader left and returns", func() { w.ret(w.first) })
			}
		default:
			add("Flush returns", func() { w.ret(w.first) })
		}
	}
	return ms
}

// getCall is the blocking GET while its goroutine waits for it.
func (w *qWorld) getCall() *call {
	if w.getDone {
		return nil
	}
	return w.calls[3]
}

func (w *qWorld) getReturned() {
	if w.getErr == nil && !w.written[3] {
		w.bad = "the blocking GET returned nil before its destination was written"
	}
}

// streamOf is the stream call c's request goes on: the second FLUSH
// (w.calls[2]) on stream 1, the others on stream 0.
func (w *qWorld) streamOf(c *call) int {
	if w.idx(c) == 2 {
		return 1
	}
	return 0
}

// awaitMoves is stream.await's loop for c, one branch per step; next
// takes what await returns.
func (w *qWorld) awaitMoves(c *call, add func(string, func()), next func(error)) {
	s := w.streamOf(c)
	tk := &w.tok[s]
	i := w.idx(c)
	who := "Flush"
	if i == 3 {
		who = "the GET's goroutine"
	}
	switch {
	case tk.holder == c:
		if c.done() || c.expired.Load() || tk.ended {
			add(fmt.Sprintf("%s (holding stream %d) releases the token", who, s), func() { w.release(s) })
		}
		// Otherwise it serves: the holder moves above read and apply.
	case c.done():
		add(fmt.Sprintf("%s sees call %d done", who, i), func() {
			tk.unqueue(c)
			next(c.err)
		})
	case c.expired.Load():
		add(fmt.Sprintf("%s sees call %d expired and removes it", who, i), func() {
			tk.unqueue(c)
			if w.table[s].removeIf(c) {
				next(errWaitTimeout)
			}
			// else: a holder took the reply and completes it; c.block()
			// waits for that, which is the c.done() branch next.
		})
	case tk.free():
		add(fmt.Sprintf("%s takes stream %d's free token", who, s), func() { tk.take(heldCaller, c) })
	case !c.queued:
		add(fmt.Sprintf("%s queues behind stream %d's %v", who, s, tk.kind), func() { tk.queue(c) })
	}
	// Queued and asleep: it moves again when woken (granted, done,
	// expired), which the branches above see.
}

func (w *qWorld) release(s int) {
	g, _ := w.tok[s].release(pendingCall, false, w.failed)
	if g != nil {
		w.grants++
		g.granted.Store(true)
		g.signal()
	}
}

func (w *qWorld) ret(err error) {
	w.returned, w.result = true, err
	if err != nil {
		return
	}
	for i, ok := range w.applied {
		if !ok {
			w.bad = fmt.Sprintf("Flush returned nil before the peer applied put %d", i)
		}
	}
	if !w.written[0] {
		w.bad = "Flush returned nil before the GET's destination was written"
	}
}

// check is the token's invariants and the recorded violations.
func (w *qWorld) check() error {
	if w.bad != "" {
		return errors.New(w.bad)
	}
	for s := range w.tok {
		tk := &w.tok[s]
		if (tk.kind == heldCaller) != (tk.holder != nil) {
			return fmt.Errorf("stream %d: token kind %v with holder %v", s, tk.kind, tk.holder != nil)
		}
		n := 0
		for c := tk.whead; c != nil; c = c.next {
			if !c.queued || c == tk.holder {
				return fmt.Errorf("stream %d: call %d queued while holding or unmarked", s, w.idx(c))
			}
			n++
		}
		if n != tk.queued {
			return fmt.Errorf("stream %d: %d followers linked, %d counted", s, n, tk.queued)
		}
		if tk.free() {
			for c := tk.whead; c != nil; c = c.next {
				if pendingCall(c) {
					return fmt.Errorf("stream %d: the token is free while call %d waits for it", s, w.idx(c))
				}
			}
		}
	}
	return nil
}

func (w *qWorld) end() error {
	if !w.returned {
		return fmt.Errorf("deadlock: Flush never returns (waiting for FLUSH %d)", w.flushPC)
	}
	if !w.getDone {
		return errors.New("deadlock: the blocking GET never returns")
	}
	for s := range w.tok {
		if w.tok[s].held() {
			return fmt.Errorf("stream %d's token is still held by %v", s, w.tok[s].kind)
		}
	}
	return nil
}

func (w *qWorld) key() string {
	var b strings.Builder
	for s := range w.tok {
		tk := &w.tok[s]
		fmt.Fprintf(&b, "t%d:%d,%d,%v,%d[", s, tk.kind, w.idx(tk.holder), tk.ended, tk.queued)
		for c := tk.whead; c != nil; c = c.next {
			fmt.Fprintf(&b, "%d ", w.idx(c))
		}
		fmt.Fprintf(&b, "] %v %v %d|", w.toPeer[s], w.toUs[s], w.applying[s])
	}
	for i, c := range w.calls {
		_, in := w.table[w.streamOf(c)].m[c.id]
		fmt.Fprintf(&b, "c%d:%v,%v,%v,%v,%v,%v;", i, in, c.done(), c.err != nil, c.expired.Load(), c.granted.Load(), c.queued)
	}
	fmt.Fprintf(&b, "%v %v %d %v %v %v %v %v %d %v %v %s", w.applied, w.written, w.flushPC, w.timedOut, w.first != nil,
		w.failed, w.returned, w.result != nil, w.expired, w.getDone, w.getErr != nil, w.bad)
	return b.String()
}

func qKind(k byte) string {
	switch k {
	case typePut:
		return "PUT"
	case typeGet:
		return "GET"
	case typeFlush:
		return "FLUSH"
	}
	return "?"
}

type qModel struct {
	mutant  string
	replays int
	ends    map[string]bool // end states: whether Flush returned nil
	grants  int             // most hand-overs to a follower in a run that ended
}

// qRun is a run as explore.Replay drives it.
type qRun struct {
	w *qWorld
	m *qModel
}

func (r qRun) Moves() []explore.Move {
	ms := r.w.moves()
	out := make([]explore.Move, len(ms))
	for i, mv := range ms {
		out[i] = explore.Move{Actor: mv.actor, Label: mv.label, Do: mv.do}
	}
	return out
}

func (r qRun) Key() string  { return r.w.key() }
func (r qRun) Check() error { return r.w.check() }
func (r qRun) Close()       {}

func (r qRun) End() error {
	if r.m.ends == nil {
		r.m.ends = map[string]bool{}
	}
	r.m.ends[r.w.key()] = r.w.result == nil
	r.m.grants = max(r.m.grants, r.w.grants)
	return r.w.end()
}

func (r qRun) Show() string {
	w := r.w
	return fmt.Sprintf("applied %v, written %v, Flush returned %v (%v), GET returned %v (%v), failed %v",
		w.applied, w.written, w.returned, w.result, w.getDone, w.getErr, w.failed)
}

func (m *qModel) explore() (explore.Result, error) {
	return explore.Replay(func() explore.World { return qRun{newQWorld(m.mutant), m} }, explore.Bound{States: 2_000_000}, &m.replays)
}

// TestExploreQuiet: every interleaving of the Flush above.
func TestExploreQuiet(t *testing.T) {
	m := &qModel{}
	res, err := m.explore()
	if err != nil {
		t.Fatal(err)
	}
	if res.Truncated {
		t.Fatal(res)
	}
	ok := 0
	for _, nilErr := range m.ends {
		if nilErr {
			ok++
		}
	}
	if m.grants == 0 {
		t.Fatal("no run handed the token to a follower")
	}
	if ok == 0 || ok == len(m.ends) {
		t.Fatalf("%d of %d ends have Flush succeed: the exploration should reach both outcomes", ok, len(m.ends))
	}
	t.Logf("Flush over %d streams: %v (%d replays); Flush succeeds in %d of %d end states; up to %d hand-overs to a follower in a run", qStreams, res, m.replays, ok, len(m.ends), m.grants)
}

// TestExploreQuietMutant: a failed Flush that returns without waiting
// for the holders (no quiesce) lets a reply be written afterwards.
func TestExploreQuietMutant(t *testing.T) {
	m := &qModel{mutant: "no-quiesce"}
	_, err := m.explore()
	var f *explore.Failure
	if !errors.As(err, &f) || !strings.Contains(f.Err.Error(), "after Flush returned") {
		t.Fatalf("a Flush without quiesce passed: %v", err)
	}
	t.Logf("no quiesce: %v", f)
}
