package explore

// Replay explores systems whose state cannot be copied: real goroutines
// blocked in real code, or pointer structures such as linked queues. A
// state is the list of choices that reaches it from a fresh start; to
// look at a state, Replay builds a fresh World and makes those choices
// again. Two states are the same when their Worlds' keys agree, which
// the World must make true only when they behave alike from there on.
// The cost is one replay per transition.

// A World is one run of a replayed system.
type World interface {
	// Moves lists what may happen next, in a deterministic order.
	Moves() []Move
	// Key identifies the state (see Model.Key).
	Key() string
	// Check is the safety property in this state (nil: it holds).
	Check() error
	// End judges a state without moves (nil: a proper end).
	End() error
	// Show describes the state for a counterexample.
	Show() string
	// Close ends the run: it stops the run's goroutines, if any.
	Close()
}

// A Move is one choice in a World.
type Move struct {
	Actor int
	Label string
	Do    func() // makes the move in the World that listed it
}

// replayed is a state as Replay holds it.
type replayed struct {
	path   []int
	key    string
	bad    string
	end    string
	show   string
	labels []string
	actors []int
}

// Replay explores the system whose fresh runs fresh makes, within b.
// It returns the result and, like Explore, a *Failure for a broken
// property, whose trace lists the moves' labels. replays, if not nil,
// counts the runs built.
func Replay(fresh func() World, b Bound, replays *int) (Result, error) {
	reach := func(path []int) replayed {
		if replays != nil {
			*replays++
		}
		w := fresh()
		defer w.Close()
		for _, i := range path {
			w.Moves()[i].Do()
		}
		s := replayed{path: path, key: w.Key(), show: w.Show()}
		if err := w.Check(); err != nil {
			s.bad = err.Error()
			return s
		}
		ms := w.Moves()
		for _, mv := range ms {
			s.labels = append(s.labels, mv.Label)
			s.actors = append(s.actors, mv.Actor)
		}
		if len(ms) == 0 {
			if err := w.End(); err != nil {
				s.end = err.Error()
			}
		}
		return s
	}
	return Explore(Model[replayed, string]{
		Init: reach(nil),
		Key:  func(s replayed) string { return s.key },
		Steps: func(s replayed) []Step[replayed] {
			out := make([]Step[replayed], len(s.labels))
			for i, l := range s.labels {
				next := append(append(make([]int, 0, len(s.path)+1), s.path...), i)
				out[i] = Step[replayed]{Actor: s.actors[i], Label: l, Next: reach(next)}
			}
			return out
		},
		Check: func(s replayed) error {
			if s.bad != "" {
				return errorString(s.bad)
			}
			return nil
		},
		Final: func(s replayed) error {
			if s.end != "" {
				return errorString(s.end)
			}
			return nil
		},
		Show: func(s replayed) string { return s.show },
	}, b)
}

type errorString string

func (e errorString) Error() string { return string(e) }
