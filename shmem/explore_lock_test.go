package shmem

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/goshmem/goshmem/heap"
	"github.com/goshmem/goshmem/verify/explore"
)

// The MCS lock queue of lock.go, explored over every interleaving of
// three PEs that each take and clear the lock twice, one of them a
// waiter that may give up (ErrTimeout) at any point of any of its waits.
// The PEs run the real protocol (mcsQueue: acquire, abandon,
// finishAbandoned, release, finishRelease, grantNext) in goroutines,
// over a lockPort whose every call is a step the explorer schedules: an
// atomic on a modelled 4-byte word, a load of the node, a wait (first
// its check, then, if it had to sleep, its wake-up or its timeout), the
// held mark, and spawning the goroutine that finishes an abandoned
// node. Only one goroutine runs at a time, so a run is a sequence of
// choices, and a state is reached by replaying its choices from the
// start. Two runs are the same state when the words, the held marks and
// every goroutine's sequence of results agree: a goroutine's code is
// deterministic given what its calls returned.
//
// Properties: at most one PE in the critical section; no goroutine
// stuck at the end (every wait ends); every SetLock that did not time
// out got the lock, the timed-out PE's next SetLock included; at the end
// the lock is free.

const (
	lkPEs = 3
	lkOff = 8 // the lock word: home PE 1
)

type lkReqKind uint8

const (
	rqAtomic lkReqKind = iota
	rqCheck            // a wait's first look at its condition
	rqSleep            // a wait that slept: it wakes when its condition holds, or times out
	rqNode
	rqUnheld
	rqTakeHeld // the program takes the lock's held mark (takeLocal)
	rqSpawn
	rqEnterCS
	rqLeaveCS
)

type lkRequest struct {
	kind          lkReqKind
	target        int
	off           uint64
	op            heap.AtomicOp
	v, cond       uint64
	waitCond      func() bool
	what          string
	spawnF        func()
	mayTimeout    bool
	timedOutAwait bool
}

type lkResponse struct {
	val     uint64
	err     error
	aborted bool
}

type errAborted struct{}

// lkActor is one goroutine of a PE.
type lkActor struct {
	w       *lkWorld
	pe      int
	name    string
	req     chan *lkRequest // the goroutine's next call; nil: it returned
	resp    chan lkResponse
	pending *lkRequest
	done    bool
	history []string
	timer   bool // its waits may time out (the main goroutine of the timer PE)
	aborted bool // the run is over: every call panics at once (deferred calls too)
	exited  chan struct{}
}

// lkPort is the lockPort of a run's goroutines. Only one goroutine runs
// at a time, so a call is the running one's (w.cur): a goroutine a
// queue's method spawns uses the queue's port as the real code does.
type lkPort struct{ w *lkWorld }

func (p lkPort) call(r *lkRequest) lkResponse {
	a := p.w.cur
	if a.w.direct {
		panic("explore_lock_test: a port call inside a wait's condition")
	}
	if a.aborted {
		panic(errAborted{})
	}
	a.req <- r
	resp := <-a.resp
	if resp.aborted {
		panic(errAborted{})
	}
	return resp
}

func (p lkPort) atomic(target int, off uint64, op heap.AtomicOp, v, cond uint64) (uint64, error) {
	r := p.call(&lkRequest{kind: rqAtomic, target: target, off: off, op: op, v: v, cond: cond})
	return r.val, r.err
}

func (p lkPort) await(off uint64, cond func() bool, what func() string) error {
	if r := p.call(&lkRequest{kind: rqCheck, off: off, waitCond: cond, what: what()}); r.val == 1 {
		return nil
	}
	return p.call(&lkRequest{kind: rqSleep, off: off, waitCond: cond, what: what(), mayTimeout: p.w.cur.timer}).err
}

func (p lkPort) node(off uint64) uint32 {
	if p.w.direct {
		return p.w.word(p.w.cur.pe, off)
	}
	return uint32(p.call(&lkRequest{kind: rqNode, off: off}).val)
}

func (p lkPort) unheld() { p.call(&lkRequest{kind: rqUnheld}) }

func (p lkPort) spawn(f func()) bool {
	return p.call(&lkRequest{kind: rqSpawn, spawnF: f}).val == 1
}

// lkWorld is one run.
type lkWorld struct {
	mem         [lkPEs][2]uint32 // each PE's lock word: low half (the tail, on the home PE), high half (the node)
	held        [lkPEs]bool
	actors      []*lkActor
	inCS        int // PE in the critical section + 1
	timeouts    int
	direct      bool     // a wait's condition is being evaluated: node reads memory
	cur         *lkActor // the goroutine running (or whose condition is evaluated)
	bad         string
	forget      bool   // mutant: spawn drops the goroutine that finishes an abandoned node
	lastTimeout string // what the last timed-out wait was for
	timerPE     int
	rounds      [lkPEs]int
	results     [lkPEs][]string
}

func (w *lkWorld) word(pe int, off uint64) uint32 {
	return w.mem[pe][(off-lkOff)/4]
}

func (w *lkWorld) start(a *lkActor, f func()) {
	a.req = make(chan *lkRequest)
	a.resp = make(chan lkResponse)
	a.exited = make(chan struct{})
	w.actors = append(w.actors, a)
	prev := w.cur
	w.cur = a
	defer func() { w.cur = prev }()
	go func() {
		defer close(a.exited)
		defer func() {
			if v := recover(); v != nil {
				if _, ok := v.(errAborted); !ok {
					panic(v)
				}
				return
			}
			a.req <- nil
		}()
		f()
	}()
	a.pending = <-a.req
	a.done = a.pending == nil
}

func (w *lkWorld) queueFor(a *lkActor) mcsQueue {
	return mcsQueue{port: lkPort{w}, me: uint64(a.pe + 1), npes: lkPEs, off: lkOff, home: int(lkOff/8) % lkPEs}
}

// program is what each PE's main goroutine does: SetLock, the critical
// section, ClearLock, twice, as SetLock and ClearLock call the queue.
func (w *lkWorld) program(a *lkActor) func() {
	return func() {
		p := lkPort{w}
		for k := 0; k < w.rounds[a.pe]; k++ {
			// The goroutine's state here is k and the results so far:
			// what it saw before no longer matters.
			a.history = append(a.history[:0], fmt.Sprint("round ", k))
			p.call(&lkRequest{kind: rqTakeHeld})
			q := w.queueFor(a)
			prev, err := q.acquire(false)
			if err != nil {
				w.results[a.pe] = append(w.results[a.pe], "SetLock: "+err.Error())
				q.abandon(prev, err)
				continue
			}
			w.results[a.pe] = append(w.results[a.pe], "SetLock ok")
			p.call(&lkRequest{kind: rqEnterCS})
			p.call(&lkRequest{kind: rqLeaveCS})
			if err := q.release(); err != nil {
				w.results[a.pe] = append(w.results[a.pe], "ClearLock: "+err.Error())
			}
		}
	}
}

func newLkWorld(m *lkModel) *lkWorld {
	w := &lkWorld{timerPE: m.timerPE, forget: m.forget, rounds: m.rounds}
	for pe := 0; pe < lkPEs; pe++ {
		a := &lkActor{w: w, pe: pe, name: fmt.Sprintf("PE %d", pe), timer: pe == m.timerPE}
		w.start(a, w.program(a))
	}
	return w
}

// A move is a choice: an actor, and for a sleeping wait whether it
// wakes (0) or times out (1).
type lkMove struct{ actor, alt int }

func (w *lkWorld) cond(a *lkActor, r *lkRequest) bool {
	prev := w.cur
	w.direct, w.cur = true, a
	defer func() { w.direct, w.cur = false, prev }()
	return r.waitCond()
}

// moves lists the enabled moves, with their labels.
func (w *lkWorld) moves() ([]lkMove, []string) {
	var ms []lkMove
	var ls []string
	for i, a := range w.actors {
		if a.done {
			continue
		}
		r := a.pending
		switch r.kind {
		case rqSleep:
			if w.cond(a, r) {
				ms, ls = append(ms, lkMove{i, 0}), append(ls, fmt.Sprintf("%s wakes: %s", a.name, r.what))
			}
			if r.mayTimeout && w.timeouts == 0 {
				ms, ls = append(ms, lkMove{i, 1}), append(ls, fmt.Sprintf("%s times out waiting for %s", a.name, r.what))
			}
		case rqTakeHeld:
			if !w.held[a.pe] {
				ms, ls = append(ms, lkMove{i, 0}), append(ls, fmt.Sprintf("%s: SetLock takes the PE's held mark", a.name))
			}
		default:
			ms, ls = append(ms, lkMove{i, 0}), append(ls, a.describe(r))
		}
	}
	return ms, ls
}

func (a *lkActor) describe(r *lkRequest) string {
	switch r.kind {
	case rqAtomic:
		half := "tail"
		if r.off != lkOff {
			half = "node"
		}
		return fmt.Sprintf("%s: %v on PE %d's %s (v %#x, cond %d)", a.name, r.op, r.target, half, r.v, r.cond)
	case rqCheck:
		return fmt.Sprintf("%s: looks for %s", a.name, r.what)
	case rqSleep:
		return fmt.Sprintf("%s: sleeps waiting for %s", a.name, r.what)
	case rqTakeHeld:
		return fmt.Sprintf("%s: SetLock waits for the PE's held mark", a.name)
	case rqNode:
		return fmt.Sprintf("%s: loads its node", a.name)
	case rqUnheld:
		return fmt.Sprintf("%s: frees the PE's held mark", a.name)
	case rqSpawn:
		return fmt.Sprintf("%s: hands the rest to a new goroutine", a.name)
	case rqEnterCS:
		return fmt.Sprintf("%s: enters the critical section", a.name)
	case rqLeaveCS:
		return fmt.Sprintf("%s: leaves the critical section", a.name)
	}
	return "?"
}

// apply carries out move m and lets the actor run to its next call.
func (w *lkWorld) apply(m lkMove) {
	a := w.actors[m.actor]
	r := a.pending
	var resp lkResponse
	switch r.kind {
	case rqAtomic:
		i := (r.off - lkOff) / 4
		resp.val = uint64(heap.Atomic32(&w.mem[r.target][i], r.op, uint32(r.v), uint32(r.cond)))
	case rqCheck:
		if w.cond(a, r) {
			resp.val = 1
		}
	case rqSleep:
		if m.alt == 1 {
			w.timeouts++
			w.lastTimeout = r.what
			resp.err = fmt.Errorf("explored timeout waiting for %s: %w", r.what, ErrTimeout)
		}
	case rqNode:
		resp.val = uint64(w.word(a.pe, r.off))
	case rqUnheld:
		if !w.held[a.pe] {
			w.bad = fmt.Sprintf("%s frees the held mark of PE %d, which is not taken", a.name, a.pe)
		}
		w.held[a.pe] = false
	case rqTakeHeld:
		w.held[a.pe] = true
	case rqSpawn:
		resp.val = 1
		// The mutant forgets a node abandoned by a SetLock whose wait for
		// the grant timed out (not a ClearLock's hand-over).
		if !w.forget || !strings.Contains(w.lastTimeout, " from PE ") {
			h := &lkActor{w: w, pe: a.pe, name: fmt.Sprintf("PE %d (helper %d)", a.pe, len(w.actors))}
			w.start(h, r.spawnF)
		}
	case rqEnterCS:
		if w.inCS != 0 {
			w.bad = fmt.Sprintf("%s enters the critical section while PE %d is in it", a.name, w.inCS-1)
		}
		w.inCS = a.pe + 1
	case rqLeaveCS:
		w.inCS = 0
	}
	h := strconv.FormatUint(resp.val, 16)
	if resp.err != nil {
		h += "!"
	}
	a.history = append(a.history, h)
	w.cur = a
	a.resp <- resp
	a.pending = <-a.req
	a.done = a.pending == nil
}

// abort ends every goroutine of the run.
func (w *lkWorld) abort() {
	for _, a := range w.actors {
		if !a.done {
			a.aborted = true
			w.cur = a
			a.resp <- lkResponse{aborted: true}
			<-a.exited
		}
	}
}

func (w *lkWorld) key() string {
	b := make([]byte, 0, 256)
	for pe := range w.mem {
		b = strconv.AppendUint(b, uint64(w.mem[pe][0]), 16)
		b = append(b, ',')
		b = strconv.AppendUint(b, uint64(w.mem[pe][1]), 16)
		b = strconv.AppendBool(append(b, ','), w.held[pe])
		for _, r := range w.results[pe] {
			b = append(append(b, ',', '"'), r...)
		}
		b = append(b, ';')
	}
	b = strconv.AppendInt(b, int64(w.inCS), 10)
	b = strconv.AppendInt(append(b, ' '), int64(w.timeouts), 10)
	b = append(b, '|')
	for _, a := range w.actors {
		if a.done {
			b = append(b, "done;"...) // a finished goroutine's past no longer matters
			continue
		}
		b = strconv.AppendInt(b, int64(a.pe), 10)
		for _, h := range a.history {
			b = append(append(b, ' '), h...)
		}
		b = append(b, ';')
	}
	return string(b)
}

// end judges a run where nobody can move.
func (w *lkWorld) end() string {
	for _, a := range w.actors {
		if !a.done {
			return fmt.Sprintf("stuck: %s never returns: %s", a.name, a.describe(a.pending))
		}
	}
	for pe := 0; pe < lkPEs; pe++ {
		ok := 0
		for _, r := range w.results[pe] {
			switch {
			case r == "SetLock ok":
				ok++
			case pe == w.timerPE && errors.Is(errors.New(r), ErrTimeout), strings.Contains(r, "explored timeout"):
			default:
				return fmt.Sprintf("PE %d: %s", pe, r)
			}
		}
		if want := w.rounds[pe]; pe == w.timerPE {
			if ok < want-w.timeouts {
				return fmt.Sprintf("PE %d got the lock %d times of %d SetLocks with %d timeouts", pe, ok, want, w.timeouts)
			}
		} else if ok != want {
			return fmt.Sprintf("PE %d got the lock %d times of %d", pe, ok, want)
		}
	}
	if w.mem[lkOff/8%lkPEs][0] != 0 || w.held != [lkPEs]bool{} {
		return fmt.Sprintf("at the end the lock is not free: words %v, held %v", w.mem, w.held)
	}
	return ""
}

type lkModel struct {
	rounds  [lkPEs]int // SetLock/ClearLock pairs of each PE
	timerPE int
	forget  bool
	replays int
}

// lkRun is a run as explore.Replay drives it.
type lkRun struct{ w *lkWorld }

func (r lkRun) Moves() []explore.Move {
	ms, labels := r.w.moves()
	out := make([]explore.Move, len(ms))
	for i, mv := range ms {
		out[i] = explore.Move{Actor: mv.actor, Label: labels[i], Do: func() { r.w.apply(mv) }}
	}
	return out
}

func (r lkRun) Key() string { return r.w.key() }
func (r lkRun) Close()      { r.w.abort() }

func (r lkRun) Check() error {
	if r.w.bad != "" {
		return errors.New(r.w.bad)
	}
	return nil
}

func (r lkRun) End() error {
	if e := r.w.end(); e != "" {
		return errors.New(e)
	}
	return nil
}

func (r lkRun) Show() string {
	return fmt.Sprintf("words %v, held %v, results %v", r.w.mem, r.w.held, r.w.results)
}

func (m *lkModel) explore() (explore.Result, error) {
	// One goroutine runs at a time: hand-overs on one P are direct.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	return explore.Replay(func() explore.World { return lkRun{newLkWorld(m)} }, explore.Bound{States: 5_000_000}, &m.replays)
}

// lkRounds is how often each PE takes the lock: the PE that may time
// out twice (its SetLock after the timeout must succeed), the others
// once. There is no deeper bound: with every PE taking the lock twice
// the run passed 200 000 states at depth 40 of about 70, too many for
// one replay per transition.
func lkRounds(timer int) [lkPEs]int {
	r := [lkPEs]int{}
	for pe := range r {
		r[pe] = 1
		if pe == timer {
			r[pe] = 2
		}
	}
	return r
}

// TestExploreLock: three PEs; none, then each PE in turn, is the one
// whose waits may time out (once), at any point.
func TestExploreLock(t *testing.T) {
	for timer := -1; timer < lkPEs; timer++ {
		m := &lkModel{timerPE: timer, rounds: lkRounds(timer)}
		if explore.Quick() {
			if timer > 0 {
				break
			}
			m.rounds = [lkPEs]int{1, 1, 1}
		}
		res, err := m.explore()
		if err != nil {
			t.Fatalf("timer PE %d: %v", timer, err)
		}
		if res.Truncated {
			t.Fatalf("timer PE %d: %v", timer, res)
		}
		who := fmt.Sprintf("PE %d may time out", timer)
		if timer < 0 {
			who = "no timeouts"
		}
		t.Logf("3 PEs taking the lock %v times, %s: %v (%d replays)", m.rounds, who, res, m.replays)
	}
}

// TestExploreLockMutant: a PE that forgets its abandoned node (no
// goroutine finishes it) leaves the PEs behind it waiting forever.
func TestExploreLockMutant(t *testing.T) {
	m := &lkModel{timerPE: 0, forget: true, rounds: lkRounds(0)}
	_, err := m.explore()
	var f *explore.Failure
	if !errors.As(err, &f) || !strings.Contains(f.Err.Error(), "stuck") {
		t.Fatalf("a lock that forgets its abandoned node passed: %v", err)
	}
	t.Logf("forgotten node: %v", f)
}
