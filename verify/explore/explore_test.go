package explore

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// counters: n actors, each counting its own word from 0 to k. Every
// combination is reachable, so a full run sees (k+1)^n states.
type counters [4]int

func counterModel(n, k int, local bool) Model[counters, counters] {
	return Model[counters, counters]{
		Key: func(s counters) counters { return s },
		Steps: func(s counters) []Step[counters] {
			var out []Step[counters]
			for a := 0; a < n; a++ {
				if s[a] < k {
					nx := s
					nx[a]++
					out = append(out, Step[counters]{Actor: a, Label: fmt.Sprintf("count to %d", nx[a]), Next: nx, Local: local})
				}
			}
			return out
		},
		Final: func(s counters) error {
			for a := 0; a < n; a++ {
				if s[a] != k {
					return fmt.Errorf("actor %d stopped at %d", a, s[a])
				}
			}
			return nil
		},
	}
}

func TestCountsEveryState(t *testing.T) {
	res, err := Explore(counterModel(3, 4, false), Bound{})
	if err != nil {
		t.Fatal(err)
	}
	if res.States != 125 || res.Ends != 1 || res.Depth != 12 || res.Truncated {
		t.Fatalf("got %v, want 125 states, 1 end, depth 12", res)
	}
	// Every state but the end has one step per unfinished actor.
	if res.Transitions != 3*4*25 {
		t.Fatalf("%d transitions, want %d", res.Transitions, 3*4*25)
	}
}

func TestBound(t *testing.T) {
	res, err := Explore(counterModel(3, 4, false), Bound{States: 50})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || res.States != 50 {
		t.Fatalf("got %v, want 50 states, truncated", res)
	}
	res, err = Explore(counterModel(3, 4, false), Bound{Depth: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || res.States != 1+3+6 {
		t.Fatalf("got %v, want 10 states within depth 2, truncated", res)
	}
}

// Independent counters are one path under the reduction.
func TestLocalReduces(t *testing.T) {
	m := counterModel(3, 4, true)
	m.CheckLocal = true
	res, err := Explore(m, Bound{})
	if err != nil {
		t.Fatal(err)
	}
	if res.States != 13 || res.Reduced != 12 {
		t.Fatalf("got %v, want 13 states, 12 reduced", res)
	}
}

// A false Local claim is caught: actor 0's step disables actor 1's.
func TestCheckLocalCatchesAFalseClaim(t *testing.T) {
	type st struct{ flag, a, b bool }
	m := Model[st, st]{
		Key: func(s st) st { return s },
		Steps: func(s st) []Step[st] {
			var out []Step[st]
			if !s.a {
				out = append(out, Step[st]{Actor: 0, Label: "raise the flag", Next: st{true, true, s.b}, Local: true})
			}
			if !s.b && !s.flag {
				out = append(out, Step[st]{Actor: 1, Label: "pass while the flag is down", Next: st{s.flag, s.a, true}})
			}
			return out
		},
		CheckLocal: true,
	}
	_, err := Explore(m, Bound{})
	var f *Failure
	if !errors.As(err, &f) || !strings.Contains(f.Err.Error(), "disables") {
		t.Fatalf("got %v, want a Failure saying the Local step disables another", err)
	}
}

// Two actors each take two locks, in opposite orders: the explorer finds
// the deadlock, and the shortest trace to it has two steps.
func TestFindsDeadlock(t *testing.T) {
	type st struct {
		owner [2]int // lock i: 0 free, else actor+1
		pc    [2]int
	}
	order := [2][2]int{{0, 1}, {1, 0}}
	m := Model[st, st]{
		Key: func(s st) st { return s },
		Steps: func(s st) []Step[st] {
			var out []Step[st]
			for a := 0; a < 2; a++ {
				switch pc := s.pc[a]; {
				case pc < 2:
					l := order[a][pc]
					if s.owner[l] == 0 {
						nx := s
						nx.owner[l] = a + 1
						nx.pc[a]++
						out = append(out, Step[st]{Actor: a, Label: fmt.Sprintf("take lock %d", l), Next: nx})
					}
				case pc == 2:
					nx := s
					nx.owner = [2]int{}
					nx.pc[a] = 3
					out = append(out, Step[st]{Actor: a, Label: "release both", Next: nx})
				}
			}
			return out
		},
		Final: func(s st) error {
			if s.pc != [2]int{3, 3} {
				return errors.New("deadlock")
			}
			return nil
		},
	}
	_, err := Explore(m, Bound{})
	var f *Failure
	if !errors.As(err, &f) {
		t.Fatalf("got %v, want a deadlock", err)
	}
	want := []string{"actor 0: take lock 0", "actor 1: take lock 1"}
	if fmt.Sprint(f.Trace) != fmt.Sprint(want) {
		t.Fatalf("trace %q, want %q", f.Trace, want)
	}
	if !strings.Contains(err.Error(), "counterexample (2 steps)") {
		t.Fatalf("message %q does not show the trace", err)
	}
}

// Peterson's mutual exclusion holds; with the turn given before the
// wish is raised (a known mistake) it does not, and the trace leads to
// both actors in the critical section.
func TestPeterson(t *testing.T) {
	type st struct {
		want [2]bool
		turn int
		pc   [2]int // 0 idle, 1 wanted, 2 turn given, 3 critical
	}
	model := func(right bool) Model[st, st] {
		return Model[st, st]{
			Key: func(s st) st { return s },
			Steps: func(s st) []Step[st] {
				var out []Step[st]
				for a := 0; a < 2; a++ {
					nx := s
					switch s.pc[a] {
					case 0, 1:
						if (s.pc[a] == 0) == right {
							nx.want[a], nx.pc[a] = true, s.pc[a]+1
							out = append(out, Step[st]{Actor: a, Label: "want", Next: nx})
						} else {
							nx.turn, nx.pc[a] = 1-a, s.pc[a]+1
							out = append(out, Step[st]{Actor: a, Label: "give the turn", Next: nx})
						}
					case 2:
						if !s.want[1-a] || s.turn == a {
							nx.pc[a] = 3
							out = append(out, Step[st]{Actor: a, Label: "enter", Next: nx})
						}
					case 3:
						nx.want[a], nx.pc[a] = false, 0
						out = append(out, Step[st]{Actor: a, Label: "leave", Next: nx})
					}
				}
				return out
			},
			Check: func(s st) error {
				if s.pc[0] == 3 && s.pc[1] == 3 {
					return errors.New("both in the critical section")
				}
				return nil
			},
		}
	}
	res, err := Explore(model(true), Bound{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Ends != 0 {
		t.Fatalf("%v: Peterson never stops", res)
	}
	_, err = Explore(model(false), Bound{})
	var f *Failure
	if !errors.As(err, &f) {
		t.Fatal("mutual exclusion with the steps swapped was not broken")
	}
	// Replaying the trace's labels by hand reaches the failing state.
	m := model(false)
	s := m.Init
	for _, line := range f.Trace {
		var a int
		var label string
		fmt.Sscanf(line, "actor %d:", &a)
		label = line[strings.Index(line, ": ")+2:]
		st, ok := find(m.Steps(s), a, label)
		if !ok {
			t.Fatalf("trace step %q is not a step of its state", line)
		}
		s = st.Next
	}
	if m.Check(s) == nil {
		t.Fatalf("the trace ends in a good state %+v", s)
	}
}
