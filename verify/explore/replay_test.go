package explore

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// counterWorld is the counters of explore_test.go as a replayed run, on
// a pointer so that moves change it in place.
type counterWorld struct {
	c      []int
	k      int
	closed *int
}

func (w *counterWorld) Moves() []Move {
	var ms []Move
	for a := range w.c {
		if w.c[a] < w.k {
			ms = append(ms, Move{Actor: a, Label: fmt.Sprintf("count to %d", w.c[a]+1), Do: func() { w.c[a]++ }})
		}
	}
	return ms
}

func (w *counterWorld) Key() string  { return fmt.Sprint(w.c) }
func (w *counterWorld) Show() string { return w.Key() }
func (w *counterWorld) Close()       { *w.closed++ }

func (w *counterWorld) Check() error {
	if w.c[0] == w.k && w.c[1] == 0 {
		return errors.New("actor 0 finished before actor 1 started")
	}
	return nil
}

func (w *counterWorld) End() error { return nil }

// Replay reaches the same states as Explore on a copyable model, builds
// one run per transition plus the first, closes every run, and reports
// a broken property with the shortest trace.
func TestReplay(t *testing.T) {
	closed, replays := 0, 0
	fresh := func() World { return &counterWorld{c: make([]int, 3), k: 4, closed: &closed} }
	// Without the property: every state.
	res, err := Replay(func() World { return noCheck{fresh()} }, Bound{}, &replays)
	if err != nil {
		t.Fatal(err)
	}
	if res.States != 125 || replays != res.Transitions+1 || closed != replays {
		t.Fatalf("%v, %d replays, %d closed: want 125 states, one replay per transition and the first, all closed", res, replays, closed)
	}
	_, err = Replay(fresh, Bound{}, nil)
	var f *Failure
	if !errors.As(err, &f) || len(f.Trace) != 4 || !strings.Contains(f.Trace[3], "actor 0: count to 4") {
		t.Fatalf("got %v, want the 4-step trace of actor 0 counting alone", err)
	}
}

type noCheck struct{ World }

func (noCheck) Check() error { return nil }
