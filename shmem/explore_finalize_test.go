package shmem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/heap"
	"github.com/goshmem/goshmem/verify/explore"
)

// The exhaustive check of Finalize against the PE's other goroutines:
// the lifecycle gate's own functions (enter, leave, Enter, Exit, begin,
// settle, alive, wakeSelf) run in every step on a PE rebuilt from the
// model's state (the gate word, the wake word, and the writes to the
// PE's eventfd, read back from a real one), so every interleaving of
// their atomic steps with the goroutines' is explored. The goroutines:
//
//   - a finalizer: begin (running → draining, wake the sleepers),
//     settle(draining → leaving) once no call is inside,
//     Finalize's own quiet and barrier (they touch nothing here),
//     settle(leaving → closed), then the memory is unmapped;
//   - a WaitUntil asleep on the PE's wake descriptor (sleep in wait.go,
//     the one sleep of every job shape: load the wake word, check the
//     condition, which reads the PE's memory, and alive; then
//     heap.Sleeper.Sleep: the poller forgets the events from before it,
//     returns at once if the wake word moved, else parks until an event;
//     then all again);
//   - a Put to this PE of the word the waits wait for (enter, the store,
//     the wake, leave), so waits may also end with their condition;
//   - a package that holds the PE with Enter, reads its memory, and Exits
//     (ring's gate);
//   - a second sleeping wait, so that one wake must reach two sleepers;
//   - a team call admitted by its team's lock (lockCall: the lock, then
//     the state check, then the memory, then the unlock), which settle
//     waits for by finding every team's lock free (teamsIdle).
//
// Each goroutine starts outside the PE, so Finalize meets it before its
// call, inside it, and at every step of its wait. A sleep ends only by a
// wake (GOSHMEM_TEST_NONAP's waits: a lost wake-up is a hang
// here, not a nap's latency), and settle is taken once, when the count of
// calls inside is zero: its re-wakes while it retries are a backstop the
// check does not count on, so begin's one wake must reach every wait.
//
// Properties: no goroutine reads or writes the PE's memory after it is
// unmapped, or while it is not admitted; a call that starts after
// Finalize began is refused; at the end every goroutine has returned,
// every wait with nil (its condition held) or ErrFinalized, and the PE
// is closed and unmapped (a goroutine asleep for ever is a deadlock).

const (
	fzFinalizer = iota
	fzWait
	fzPut
	fzEnter
	fzWait2
	fzTeam
	fzActors
)

var fzNames = [fzActors]string{"finalizer", "sleeping wait", "put", "Enter", "second sleeping wait", "team call"}

type fzState struct {
	gate     uint64
	wake     uint32 // the PE's wake word
	efd      uint32 // writes to the PE's eventfd so far
	word     bool   // the word the waits wait for is set
	unmapped bool
	locked   bool // the team's lock is held (by the team call)
	pc       [fzActors]uint8
	seen     [fzActors]uint32 // a wait's loaded wake word
	evSeen   [fzActors]uint32 // the eventfd writes when its Sleep's read reset the descriptor
	result   [fzActors]uint8  // 0 running, 1 nil, 2 ErrFinalized, 3 another error
	bad      string
}

// The waits' program counters.
const (
	wEnter = iota
	wLoad  // = 1, where admit leaves an admitted goroutine
	wCond
	wAlive
	wReset
	wCheck
	wAsleep
	wLeave
	wDone
)

type fzModel struct {
	begin func(pe *PE) bool
	// noDrain is the mutant settle: it moves the state without waiting
	// for the calls inside to leave; noTeamDrain waits for the count
	// but not for the team's lock.
	noDrain, noTeamDrain bool
	// only, if not zero, limits the goroutines beside the finalizer.
	only []int
}

func (m *fzModel) has(a int) bool {
	if a == fzFinalizer || m.only == nil {
		return true
	}
	for _, x := range m.only {
		if x == a {
			return true
		}
	}
	return false
}

// fzEventfd is a real eventfd standing for the PE's wake descriptor:
// the model's PE wakes through a Waker on it, and fzRead reads (and
// resets) its counter, the writes made during one step.
var fzEventfd = sync.OnceValues(func() (int, error) {
	return unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
})

// fzPE rebuilds a PE holding s's lifecycle words; fzRead reads them back.
func fzPE(s fzState, fd int) (*PE, *uint32) {
	pe := &PE{rank: 0, counted: true, cfg: Config{Timeout: time.Second}}
	pe.gate.Store(s.gate)
	w := s.wake
	pe.peers = []peer{{wake: heap.NewWaker(fd, &w)}}
	t := &Team{pe: pe}
	if s.locked {
		t.mu.Lock()
	}
	pe.teams = map[int]*Team{0: t}
	return pe, &w
}

func fzRead(s fzState, pe *PE, w *uint32, fd int) fzState {
	s.gate, s.wake = pe.gate.Load(), *w
	var b [8]byte
	if n, _ := unix.Read(fd, b[:]); n == 8 {
		s.efd += uint32(binary.NativeEndian.Uint64(b[:]))
	}
	t := pe.teams[0]
	s.locked = !t.mu.TryLock()
	if !s.locked {
		t.mu.Unlock()
	}
	return s
}

func errResult(err error) uint8 {
	switch {
	case err == nil:
		return 1
	case errors.Is(err, ErrFinalized):
		return 2
	}
	return 3
}

// touch is a goroutine's access to the PE's memory.
func (s *fzState) touch(a int, what string) {
	if s.unmapped {
		s.bad = fmt.Sprintf("the %s %s the PE's memory after Finalize unmapped it", fzNames[a], what)
	}
}

func (m *fzModel) steps(s fzState) []explore.Step[fzState] {
	if s.bad != "" {
		return nil
	}
	var out []explore.Step[fzState]
	add := func(a int, label string, nx fzState) {
		out = append(out, explore.Step[fzState]{Actor: a, Label: fmt.Sprintf("%s: %s", fzNames[a], label), Next: nx})
	}
	// call runs f on a PE holding s's words and reads them back.
	fd, err := fzEventfd()
	if err != nil {
		panic(fmt.Sprintf("the model's eventfd: %v", err))
	}
	call := func(s fzState, f func(pe *PE)) fzState {
		pe, w := fzPE(s, fd)
		f(pe)
		return fzRead(s, pe, w, fd)
	}
	// admit is goroutine a's first step: enter (the PE's own calls) or
	// Enter, to pc 1, or refused, to pc done with the error.
	admit := func(a int, name string, enter func(pe *PE) error, done uint8) {
		var err error
		nx := call(s, func(pe *PE) { err = enter(pe) })
		if err == nil {
			nx.pc[a] = 1
			add(a, name, nx)
			return
		}
		nx.pc[a], nx.result[a] = done, errResult(err)
		if s.gate&stMask == stRunning {
			nx.bad = fmt.Sprintf("the %s was refused by a running PE: %v", fzNames[a], err)
		}
		add(a, name+": refused", nx)
	}
	// The finalizer.
	switch s.pc[fzFinalizer] {
	case 0:
		var ok bool
		nx := call(s, func(pe *PE) { ok = m.begin(pe) })
		if !ok {
			nx.bad = "begin refused the only Finalize"
		}
		nx.pc[fzFinalizer] = 1
		add(fzFinalizer, "begin", nx)
	case 1, 2:
		from, next := stDraining, stLeaving
		if s.pc[fzFinalizer] == 2 {
			from, next = stLeaving, stClosed
		}
		if !m.noDrain && (s.gate != from || s.locked && !m.noTeamDrain) {
			break // settle retries until no call is inside
		}
		clean, err := true, error(nil)
		nx := call(s, func(pe *PE) {
			if m.noDrain {
				pe.gate.Store(pe.gate.Load()&^stMask | next)
				return
			}
			if m.noTeamDrain {
				pe.gate.CompareAndSwap(from, next)
				return
			}
			clean, err = pe.settle(from, next)
		})
		if !clean || err != nil {
			nx.bad = fmt.Sprintf("settle: %v, %v", clean, err)
		}
		nx.pc[fzFinalizer]++
		add(fzFinalizer, fmt.Sprintf("settle to %s", fzStateName(next)), nx)
	case 3:
		nx := s
		nx.unmapped = true
		nx.pc[fzFinalizer] = 4
		nx.result[fzFinalizer] = 1
		add(fzFinalizer, "release: unmap", nx)
	}
	// The waits.
	for _, a := range []int{fzWait, fzWait2} {
		if !m.has(a) {
			continue
		}
		nx := s
		switch s.pc[a] {
		case wEnter:
			admit(a, "enter", (*PE).enter, wDone)
		case wLoad:
			nx.seen[a], nx.pc[a] = s.wake, wCond
			add(a, fmt.Sprintf("loads the wake word (%d)", s.wake), nx)
		case wCond:
			nx.touch(a, "read")
			if s.word {
				nx.pc[a], nx.result[a] = wLeave, 1
				add(a, "checks its condition: true", nx)
			} else {
				nx.pc[a] = wAlive
				add(a, "checks its condition: false", nx)
			}
		case wAlive:
			var err error
			nx = call(s, func(pe *PE) { err = pe.alive() })
			if err != nil {
				nx.pc[a], nx.result[a] = wLeave, errResult(err)
				add(a, "alive: "+err.Error(), nx)
			} else {
				nx.pc[a] = wReset
				add(a, "alive: nil", nx)
			}
		case wReset:
			// Sleep: its descriptor is registered already; the read
			// forgets the events from before it.
			nx.evSeen[a], nx.pc[a] = s.efd, wCheck
			add(a, fmt.Sprintf("Sleep's read resets the descriptor (%d eventfd writes so far)", s.efd), nx)
		case wCheck:
			if s.wake != s.seen[a] {
				nx.pc[a] = wLoad
				add(a, "Sleep returns at once (the wake word moved)", nx)
			} else {
				nx.pc[a] = wAsleep
				add(a, "parks", nx)
			}
		case wAsleep:
			if s.efd != s.evSeen[a] {
				nx.pc[a] = wLoad
				add(a, "is woken by an eventfd write", nx)
			}
		case wLeave:
			nx = call(s, func(pe *PE) { pe.leave() })
			nx.pc[a] = wDone
			add(a, "leave", nx)
		}
	}
	// The put.
	if m.has(fzPut) {
		nx := s
		switch s.pc[fzPut] {
		case 0:
			admit(fzPut, "enter", (*PE).enter, 4)
		case 1:
			nx.touch(fzPut, "wrote")
			nx.word, nx.pc[fzPut] = true, 2
			add(fzPut, "stores the word", nx)
		case 2:
			nx = call(s, func(pe *PE) { pe.wakeSelf() })
			nx.pc[fzPut] = 3
			add(fzPut, "wakes the waits", nx)
		case 3:
			nx = call(s, func(pe *PE) { pe.leave() })
			nx.pc[fzPut], nx.result[fzPut] = 4, 1
			add(fzPut, "leave", nx)
		}
	}
	// Enter, a read, Exit.
	if m.has(fzEnter) {
		nx := s
		switch s.pc[fzEnter] {
		case 0:
			admit(fzEnter, "Enter", (*PE).Enter, 3)
		case 1:
			nx.touch(fzEnter, "read")
			nx.pc[fzEnter] = 2
			add(fzEnter, "reads the memory", nx)
		case 2:
			nx = call(s, func(pe *PE) { pe.Exit() })
			nx.pc[fzEnter], nx.result[fzEnter] = 3, 1
			add(fzEnter, "Exit", nx)
		}
	}
	// A team call: its lock, the state check, a read, the unlock.
	if m.has(fzTeam) {
		nx := s
		switch s.pc[fzTeam] {
		case 0:
			if !s.locked {
				nx = call(s, func(pe *PE) { pe.teams[0].mu.Lock() })
				nx.pc[fzTeam] = 1
				add(fzTeam, "takes the team's lock", nx)
			}
		case 1:
			var err error
			nx = call(s, func(pe *PE) { err = pe.teams[0].admitLocked() })
			if err == nil {
				nx.pc[fzTeam] = 2
				add(fzTeam, "checks the state: admitted", nx)
				break
			}
			nx.pc[fzTeam], nx.result[fzTeam] = 4, errResult(err)
			if s.gate&stMask == stRunning {
				nx.bad = fmt.Sprintf("the team call was refused by a running PE: %v", err)
			}
			if nx.locked {
				nx.bad = "a refused team call kept the team's lock"
			}
			add(fzTeam, "checks the state: refused", nx)
		case 2:
			nx.touch(fzTeam, "read")
			nx.pc[fzTeam] = 3
			add(fzTeam, "reads the memory", nx)
		case 3:
			nx = call(s, func(pe *PE) { pe.teams[0].mu.Unlock() })
			nx.pc[fzTeam], nx.result[fzTeam] = 4, 1
			add(fzTeam, "unlocks the team", nx)
		}
	}
	return out
}

func fzStateName(st uint64) string {
	return map[uint64]string{stRunning: "running", stDraining: "draining", stLeaving: "leaving", stClosed: "closed"}[st]
}

func (m *fzModel) final(s fzState) error {
	if s.pc[fzFinalizer] != 4 {
		return fmt.Errorf("deadlock: Finalize stuck (gate %s, %d calls inside)", fzStateName(s.gate&stMask), s.gate&^stMask)
	}
	for a := 1; a < fzActors; a++ {
		if !m.has(a) {
			continue
		}
		switch r := s.result[a]; {
		case r == 0:
			return fmt.Errorf("the %s never returned", fzNames[a])
		case r == 3:
			return fmt.Errorf("the %s returned another error than ErrFinalized", fzNames[a])
		}
	}
	if s.gate != stClosed {
		return fmt.Errorf("the gate ends at %#x, want closed with no call inside", s.gate)
	}
	return nil
}

func (m *fzModel) show(s fzState) string {
	var b strings.Builder
	fmt.Fprintf(&b, "gate %s with %d inside, team locked %v, wake word %d, eventfd writes %d, word set %v, unmapped %v;", fzStateName(s.gate&stMask), s.gate&^stMask, s.locked, s.wake, s.efd, s.word, s.unmapped)
	for a := 0; a < fzActors; a++ {
		if m.has(a) {
			fmt.Fprintf(&b, " %s at %d (result %d)", fzNames[a], s.pc[a], s.result[a])
		}
	}
	return b.String()
}

func (m *fzModel) explore() (explore.Result, error) {
	return explore.Explore(explore.Model[fzState, fzState]{
		Key:   func(s fzState) fzState { return s },
		Steps: m.steps,
		Check: func(s fzState) error {
			if s.bad != "" {
				return errors.New(s.bad)
			}
			return nil
		},
		Final: m.final,
		Show:  m.show,
	}, explore.Bound{States: 10_000_000})
}

// TestExploreFinalize: every interleaving of Finalize with each
// goroutine alone, with two waits beside a put and an Enter, with a team
// call beside a put and a wait, and (GOSHMEM_EXPLORE_DEEP=1) with all
// five.
func TestExploreFinalize(t *testing.T) {
	for _, only := range [][]int{{fzWait}, {fzPut}, {fzEnter}, {fzTeam}, {fzWait, fzWait2, fzPut, fzEnter}, {fzTeam, fzPut, fzWait}, nil} {
		if only == nil && !explore.Deep() {
			continue // all five: GOSHMEM_EXPLORE_DEEP=1
		}
		m := &fzModel{begin: (*PE).begin, only: only}
		res, err := m.explore()
		if err != nil {
			t.Fatalf("goroutines %v: %v", only, err)
		}
		if res.Truncated {
			t.Fatalf("goroutines %v: %v", only, res)
		}
		t.Logf("finalizer and %v: %v", names(only), res)
	}
}

func names(only []int) string {
	if only == nil {
		return "all five"
	}
	var s []string
	for _, a := range only {
		s = append(s, fzNames[a])
	}
	return strings.Join(s, ", ")
}

// TestExploreFinalizeMutants: a Finalize that unmaps before the calls
// inside have left, and one whose begin wakes nobody, are caught.
func TestExploreFinalizeMutants(t *testing.T) {
	m := &fzModel{begin: (*PE).begin, noDrain: true}
	_, err := m.explore()
	var f *explore.Failure
	if !errors.As(err, &f) || !strings.Contains(f.Err.Error(), "after Finalize unmapped it") {
		t.Fatalf("a settle that does not wait for the calls inside passed or failed otherwise: %v", err)
	}
	t.Logf("unmap before the calls drain:\n%v", f)
	m = &fzModel{begin: (*PE).begin, noTeamDrain: true, only: []int{fzTeam}}
	_, err = m.explore()
	if !errors.As(err, &f) || !strings.Contains(f.Err.Error(), "after Finalize unmapped it") {
		t.Fatalf("a settle that does not wait for a team call's lock passed or failed otherwise: %v", err)
	}
	t.Logf("unmap while a team call holds its lock:\n%v", f)
	silent := func(pe *PE) bool {
		for {
			v := pe.gate.Load()
			if v&stMask != stRunning {
				return false
			}
			if pe.gate.CompareAndSwap(v, v&^stMask|stDraining) {
				return true // and no wake
			}
		}
	}
	m = &fzModel{begin: silent, only: []int{fzWait}}
	_, err = m.explore()
	if !errors.As(err, &f) || !strings.Contains(f.Err.Error(), "deadlock") {
		t.Fatalf("a begin that wakes nobody passed or failed otherwise: %v", err)
	}
	t.Logf("begin without its wake:\n%v", f)
}

// The model's copy of the sleep's order (load the wake word, the
// condition, alive, then Sleep: a registered descriptor, the read whose
// reset comes before its first look at the wake word) is held to the
// code: the statements appear in that order in wait.go's sleep and in
// heap.Sleeper.Sleep and its callback. A reorder that could lose a
// wake-up (alive before the load, a Waker that writes before it
// increments the word) fails here, and the model must then follow it.
func TestExploreFinalizeLoopOrder(t *testing.T) {
	for _, c := range []struct {
		file, fn string
		order    []string
	}{
		{"wait.go", "func (pe *PE) sleep(", []string{"heap.BeginSleep", "for {", "seq := atomic.LoadUint32(word)", "if cond() {", "pe.alive()", "pe.sleeper.Sleep(deadline, word, seq)"}},
		{"../heap/wake_linux.go", "func (s *Sleeper) Sleep(", []string{"s.get()", "d.word, d.seq, d.first = word, seq, true", "d.rc.Read(d.fn)"}},
		{"../heap/wake_linux.go", "func (d *sleepFD) check(", []string{"if d.first {", "atomic.LoadUint32(d.word) != d.seq", "return true"}},
		{"../heap/wake_linux.go", "func (w *Waker) Wake(", []string{"atomic.AddUint32(w.word, 1)", "unix.RawSyscall(unix.SYS_WRITE"}},
	} {
		src, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		code := string(src)
		at := strings.Index(code, c.fn)
		if at < 0 {
			t.Fatalf("%s has no %s", c.file, c.fn)
		}
		body := code[at:]
		if end := strings.Index(body[1:], "\nfunc "); end >= 0 {
			body = body[:end+1]
		}
		pos := 0
		for _, stmt := range c.order {
			i := strings.Index(body[pos:], stmt)
			if i < 0 {
				t.Fatalf("%s: %q does not follow the statements before it in the model's order %q", c.fn, stmt, c.order)
			}
			pos += i + len(stmt)
		}
	}
}
