// Package explore is a small explicit-state model explorer: it visits
// every state reachable from an initial one by the steps of a few
// actors, breadth first, with state hashing, a bound on the states and
// the depth, and, when a property fails, the shortest step list that
// leads there, printed for a reader.
//
// A Model is plain Go: Steps lists what each actor may do next in a
// state, each Step carrying the state it leads to (states are values:
// a step must not modify the state it starts from). Key reduces a state
// to a comparable value; two states with the same key are the same
// state. Check is the safety property, judged in every state; Final
// judges a state with no steps: nil for a proper end, an error for a
// deadlock or a wrong outcome.
//
// The checks of goshmem's protocols that use it live beside the code
// they drive (ring, shmem, netmesh, collective), as tests named
// TestExplore*, so they call the packages' own unexported functions.
// docs/verification.md lists them.
//
// Partial-order reduction: a step marked Local claims that it is
// invisible to Check and Final and commutes with every other actor's
// step in its state (see Step.Local). In a state with a Local step the
// explorer follows that one step only, unless its successor was seen
// before (the cycle proviso); then it expands the state fully.
// Model.CheckLocal makes the explorer test the commutation claim in
// every state where it relies on it.
//
// Replay (replay.go) explores systems whose state cannot be copied, such
// as real goroutines blocked in real code, by replaying the choices that
// reach each state.
//
// Caveats: the explorer holds every visited key in memory; Bound keeps
// a run from growing without end, and a run cut by the bound says so
// (Result.Truncated), it is not a proof.
package explore

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// A Step is one move an actor can make in a state.
type Step[S any] struct {
	Actor int    // who moves, for the trace
	Label string // what it does, for the trace: "sender writes word 2 of slot 0"
	Next  S      // the state after the move
	// Local claims the step is invisible to the properties and
	// commutes with every step of the other actors in this state: each
	// of theirs stays enabled after it, and it stays enabled after
	// each of theirs, with the same result in either order. A Local
	// step may enable other actors' steps; it may not disable any.
	Local bool
}

// Model is a system to explore.
type Model[S any, K comparable] struct {
	Init  S
	Key   func(S) K
	Steps func(S) []Step[S]
	// Check is the safety property, judged in every reached state
	// (nil: none).
	Check func(S) error
	// Final judges a state without steps (nil: every end is fine).
	Final func(S) error
	// Show describes a state at the end of a counterexample (nil:
	// %+v).
	Show func(S) string
	// CheckLocal makes the explorer verify, wherever it follows a Local
	// step alone, that the step commutes with each other actor's step
	// in that state (steps are matched by actor and label).
	CheckLocal bool
}

// Bound limits a run. Zero fields mean no limit.
type Bound struct {
	States int // distinct states to visit
	Depth  int // steps from Init
}

// Result is what a run visited.
type Result struct {
	States      int           // distinct states reached
	Transitions int           // steps followed
	Depth       int           // longest shortest path from Init
	Ends        int           // states without steps
	Reduced     int           // states expanded by one Local step only
	Truncated   bool          // the bound cut the run short: not a proof
	Elapsed     time.Duration // wall time
}

func (r Result) String() string {
	s := fmt.Sprintf("%d states, %d transitions, depth %d, %d ends, %d reduced, %v",
		r.States, r.Transitions, r.Depth, r.Ends, r.Reduced, r.Elapsed.Round(time.Millisecond))
	if r.Truncated {
		s += " (TRUNCATED by the bound)"
	}
	return s
}

// Failure is a property that failed, with the steps that lead there.
type Failure struct {
	Err   error
	Trace []string // "actor 1: label", from Init
	State string   // the failing state, described
}

func (f *Failure) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v\ncounterexample (%d steps):\n", f.Err, len(f.Trace))
	for i, s := range f.Trace {
		fmt.Fprintf(&b, "  %3d. %s\n", i+1, s)
	}
	fmt.Fprintf(&b, "state: %s", f.State)
	return b.String()
}

func (f *Failure) Unwrap() error { return f.Err }

// node is a visited state: how it was first reached.
type node struct {
	parent int32 // index of the state it was reached from; -1 for Init
	step   int32 // index of the step in the parent's Steps
	depth  int32
}

// Explore visits the states of m breadth first within b. It returns a
// *Failure for the first state (nearest to Init) that breaks Check or,
// having no steps, Final; for a Local claim that does not hold; or for
// a state Steps returns an invalid step in.
func Explore[S any, K comparable](m Model[S, K], b Bound) (Result, error) {
	start := time.Now()
	var res Result
	seen := map[K]int32{}
	var nodes []node
	type item struct {
		s S
		i int32
	}
	fail := func(at int32, s S, err error) (Result, error) {
		res.Elapsed = time.Since(start)
		return res, &Failure{Err: err, Trace: trace(m, nodes, at), State: show(m, s)}
	}
	visit := func(s S, parent, step, depth int32) (int32, bool) {
		k := m.Key(s)
		if i, ok := seen[k]; ok {
			return i, false
		}
		i := int32(len(nodes))
		seen[k] = i
		nodes = append(nodes, node{parent: parent, step: step, depth: depth})
		res.States++
		res.Depth = max(res.Depth, int(depth))
		return i, true
	}
	i0, _ := visit(m.Init, -1, -1, 0)
	if m.Check != nil {
		if err := m.Check(m.Init); err != nil {
			return fail(i0, m.Init, err)
		}
	}
	queue := []item{{m.Init, i0}}
	for len(queue) > 0 {
		it := queue[0]
		queue[0] = item{}
		queue = queue[1:]
		d := nodes[it.i].depth
		steps := m.Steps(it.s)
		if len(steps) == 0 {
			res.Ends++
			if m.Final != nil {
				if err := m.Final(it.s); err != nil {
					return fail(it.i, it.s, err)
				}
			}
			continue
		}
		if b.Depth > 0 && int(d) >= b.Depth {
			res.Truncated = true
			continue
		}
		order := allSteps(len(steps))
		if l := firstLocal(steps); l >= 0 {
			if _, ok := seen[m.Key(steps[l].Next)]; !ok {
				if m.CheckLocal {
					if err := commutes(m, steps, l); err != nil {
						return fail(it.i, it.s, err)
					}
				}
				order = []int{l}
				res.Reduced++
			}
		}
		for _, j := range order {
			st := steps[j]
			res.Transitions++
			ni, fresh := visit(st.Next, it.i, int32(j), d+1)
			if !fresh {
				continue
			}
			if m.Check != nil {
				if err := m.Check(st.Next); err != nil {
					return fail(ni, st.Next, err)
				}
			}
			if b.States > 0 && res.States >= b.States {
				res.Truncated = true
				res.Elapsed = time.Since(start)
				return res, nil
			}
			queue = append(queue, item{st.Next, ni})
		}
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

func allSteps(n int) []int {
	o := make([]int, n)
	for i := range o {
		o[i] = i
	}
	return o
}

func firstLocal[S any](steps []Step[S]) int {
	for i, s := range steps {
		if s.Local {
			return i
		}
	}
	return -1
}

// commutes checks Local step l against every step of another actor.
func commutes[S any, K comparable](m Model[S, K], steps []Step[S], l int) error {
	a := steps[l]
	afterA := m.Steps(a.Next)
	for _, b := range steps {
		if b.Actor == a.Actor {
			continue
		}
		ba, ok := find(afterA, b.Actor, b.Label)
		if !ok {
			return fmt.Errorf("explore: Local step %q of actor %d disables %q of actor %d", a.Label, a.Actor, b.Label, b.Actor)
		}
		if m.Check != nil && m.Check(b.Next) != nil {
			// b breaks the property: the run stops there, and taking a
			// first keeps b (checked above).
			continue
		}
		ab, ok := find(m.Steps(b.Next), a.Actor, a.Label)
		if !ok {
			return fmt.Errorf("explore: Local step %q of actor %d is disabled by %q of actor %d", a.Label, a.Actor, b.Label, b.Actor)
		}
		if m.Key(ba.Next) != m.Key(ab.Next) {
			return fmt.Errorf("explore: Local step %q of actor %d does not commute with %q of actor %d", a.Label, a.Actor, b.Label, b.Actor)
		}
	}
	return nil
}

func find[S any](steps []Step[S], actor int, label string) (Step[S], bool) {
	for _, s := range steps {
		if s.Actor == actor && s.Label == label {
			return s, true
		}
	}
	return Step[S]{}, false
}

// trace replays the path to node at from Init, recomputing the steps
// (Steps is deterministic), so the run keeps no labels in memory.
func trace[S any, K comparable](m Model[S, K], nodes []node, at int32) []string {
	var path []int32
	for i := at; i >= 0 && nodes[i].parent >= 0; i = nodes[i].parent {
		path = append(path, nodes[i].step)
	}
	out := make([]string, 0, len(path))
	s := m.Init
	for k := len(path) - 1; k >= 0; k-- {
		steps := m.Steps(s)
		st := steps[path[k]]
		out = append(out, fmt.Sprintf("actor %d: %s", st.Actor, st.Label))
		s = st.Next
	}
	return out
}

func show[S any, K comparable](m Model[S, K], s S) string {
	if m.Show != nil {
		return m.Show(s)
	}
	return fmt.Sprintf("%+v", s)
}

// Deep reports whether the checks should use their deeper bounds:
// GOSHMEM_EXPLORE_DEEP=1 in the environment of `go test`.
func Deep() bool { return os.Getenv("GOSHMEM_EXPLORE_DEEP") == "1" }

// Quick reports whether the checks should use small bounds only: under
// the race detector, which slows the explorer about tenfold, the
// interleavings are the point of other tests, and the full bounds run
// without it.
func Quick() bool { return raceOn && !Deep() }
