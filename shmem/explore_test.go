package shmem

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/goshmem/goshmem/verify/explore"
)

// The dissemination barrier, explored over every interleaving of its
// members' steps, driven by the barrier's own schedule (syncRounds,
// syncRound) and wait rule (syncReached). Each member runs episodes
// (barriers) one after another: it enters, then in each round stores the
// epoch into a peer's flag and waits on its own, and leaves after the
// last wait. A store and a wait that is not the last are Local steps
// (explore.Step): each touches one word that one member writes and one
// reads, flags only grow, so they commute with every other step, and
// the property does not look at them.

const barMax = 12 // members
const barRoundsMax = 4

type barState struct {
	pc   [barMax]uint8 // 0: outside a barrier; 1+2r: to store round r; 2+2r: to wait in round r
	done [barMax]uint8 // barriers completed
	flag [barMax][barRoundsMax]uint8
	bad  string
}

type barModel struct {
	n, episodes int
	rounds      func(n int) int
	reached     func(flag, epoch uint64) bool
	local       bool // mark the invisible steps Local
}

func newBarModel(n, episodes int) *barModel {
	return &barModel{n: n, episodes: episodes, rounds: syncRounds, reached: syncReached, local: true}
}

// What a member's step did.
type barKind uint8

const (
	barEnter barKind = iota
	barStore         // stored into member to's round-r flag
	barPass          // passed its round-r wait
	barLeave         // passed its last wait, leaving the barrier
)

type barMove struct {
	kind  barKind
	e     int // the member's barrier (epoch)
	r, to int
	label string
}

// move applies member i's next step to s, if it can move.
func (m *barModel) move(s *barState, i int) (barMove, bool) {
	e := int(s.done[i]) + 1
	if e > m.episodes {
		return barMove{}, false
	}
	R := m.rounds(m.n)
	pc := int(s.pc[i])
	switch {
	case pc == 0 && R == 0:
		s.done[i] = uint8(e)
		return barMove{kind: barLeave, e: e, label: fmt.Sprintf("PE %d enters and leaves barrier %d (no rounds)", i, e)}, true
	case pc == 0:
		s.pc[i] = 1
		return barMove{kind: barEnter, e: e, label: fmt.Sprintf("PE %d enters barrier %d", i, e)}, true
	case pc%2 == 1:
		r := (pc - 1) / 2
		to, _ := syncRound(m.n, i, r)
		s.flag[to][r] = uint8(e)
		s.pc[i]++
		return barMove{kind: barStore, e: e, r: r, to: to, label: fmt.Sprintf("PE %d stores %d into PE %d's round-%d flag", i, e, to, r)}, true
	default:
		r := (pc - 2) / 2
		if !m.reached(uint64(s.flag[i][r]), uint64(e)) {
			return barMove{}, false
		}
		if r < R-1 {
			s.pc[i]++
			return barMove{kind: barPass, e: e, r: r, label: fmt.Sprintf("PE %d passes its round-%d wait", i, r)}, true
		}
		s.pc[i], s.done[i] = 0, uint8(e)
		return barMove{kind: barLeave, e: e, r: r, label: fmt.Sprintf("PE %d passes its round-%d wait and leaves barrier %d", i, r, e)}, true
	}
}

func (m *barModel) arrived(s barState, j, e int) bool {
	return int(s.done[j]) >= e || (int(s.done[j]) == e-1 && s.pc[j] > 0)
}

// steps are the members' steps, the property judged on the global
// state: a member leaving barrier e checks that every member entered it.
func (m *barModel) steps(s barState) []explore.Step[barState] {
	if s.bad != "" {
		return nil
	}
	var out []explore.Step[barState]
	for i := 0; i < m.n; i++ {
		nx := s
		mv, ok := m.move(&nx, i)
		if !ok {
			continue
		}
		if mv.kind == barLeave {
			for j := 0; j < m.n; j++ {
				if j != i && !m.arrived(s, j, mv.e) {
					nx.bad = fmt.Sprintf("PE %d left barrier %d before PE %d entered it", i, mv.e, j)
					break
				}
			}
		}
		local := m.local && (mv.kind == barStore || mv.kind == barPass)
		out = append(out, explore.Step[barState]{Actor: i, Label: mv.label, Next: nx, Local: local})
	}
	return out
}

func (m *barModel) final(done [barMax]uint8, pc [barMax]uint8) error {
	for i := 0; i < m.n; i++ {
		if int(done[i]) != m.episodes {
			return fmt.Errorf("deadlock: PE %d is stuck in barrier %d (step %d)", i, done[i]+1, pc[i])
		}
	}
	return nil
}

func (m *barModel) explore(b explore.Bound, checkLocal bool) (explore.Result, error) {
	return explore.Explore(explore.Model[barState, barState]{
		Key:   func(s barState) barState { return s },
		Steps: m.steps,
		Check: func(s barState) error {
			if s.bad != "" {
				return errors.New(s.bad)
			}
			return nil
		},
		Final: func(s barState) error { return m.final(s.done, s.pc) },
		Show: func(s barState) string {
			return fmt.Sprintf("barriers done %v, steps %v", s.done[:m.n], s.pc[:m.n])
		},
		CheckLocal: checkLocal,
	}, b)
}

// The causal form of the same property, for teams too large for every
// interleaving. Each member carries what it knows of the others: know[j]
// is the latest barrier member j is known to have entered. A store
// leaves the storer's knowledge with the stored value; a wait that
// passes learns the knowledge left by the first store whose value would
// have let it pass (a later store only adds to it). Leaving barrier e,
// a member must know that every member entered e.
//
// This is exact, not an approximation: the steps that must precede a
// member's leave in every run are its own earlier steps and, for each
// wait, that first store, transitively. If member j's entry is not among
// them, the run that does exactly those steps first, then the leave, is
// a run, and in it the member leaves before j entered. Every step then
// touches only its member's state and words it alone writes (the
// knowledge left with a value never changes), and no step disables
// another: all steps commute and none is visible to another member's
// check, so every step is Local and one interleaving decides (and
// CheckLocal confirms the commutation in every state). The full
// exploration above confirms the verdicts at the sizes it reaches.
const barEpisodesMax = 5

type causalState struct {
	core barState
	know [barMax][barMax]uint8
	left [barMax][barRoundsMax][barEpisodesMax + 1][barMax]uint8 // knowledge left with each stored value
}

func (m *barModel) causalSteps(s causalState) []explore.Step[causalState] {
	if s.core.bad != "" {
		return nil
	}
	var out []explore.Step[causalState]
	for i := 0; i < m.n; i++ {
		nx := s
		mv, ok := m.move(&nx.core, i)
		if !ok {
			continue
		}
		switch mv.kind {
		case barEnter:
			nx.know[i][i] = uint8(mv.e)
		case barStore:
			nx.left[mv.to][mv.r][mv.e] = nx.know[i]
		case barPass, barLeave:
			if m.rounds(m.n) == 0 {
				nx.know[i][i] = uint8(mv.e)
				break
			}
			// The first value stored into the flag that lets the wait
			// pass: values are stored in order 1, 2, ... up to the
			// flag's value.
			for v := 1; v <= int(s.core.flag[i][mv.r]); v++ {
				if m.reached(uint64(v), uint64(mv.e)) {
					for j, k := range s.left[i][mv.r][v] {
						nx.know[i][j] = max(nx.know[i][j], k)
					}
					break
				}
			}
		}
		if mv.kind == barLeave {
			for j := 0; j < m.n; j++ {
				if j != i && int(nx.know[i][j]) < mv.e {
					nx.core.bad = fmt.Sprintf("PE %d can leave barrier %d before PE %d entered it", i, mv.e, j)
					break
				}
			}
		}
		// A step that breaks the property is the one visible step.
		out = append(out, explore.Step[causalState]{Actor: i, Label: mv.label, Next: nx, Local: nx.core.bad == ""})
	}
	return out
}

func (m *barModel) exploreCausal() (explore.Result, error) {
	if m.episodes > barEpisodesMax {
		panic("explore_test: too many barriers for the causal state")
	}
	return explore.Explore(explore.Model[causalState, causalState]{
		Key:   func(s causalState) causalState { return s },
		Steps: m.causalSteps,
		Check: func(s causalState) error {
			if s.core.bad != "" {
				return errors.New(s.core.bad)
			}
			return nil
		},
		Final: func(s causalState) error { return m.final(s.core.done, s.core.pc) },
		Show: func(s causalState) string {
			return fmt.Sprintf("barriers done %v, steps %v", s.core.done[:m.n], s.core.pc[:m.n])
		},
		CheckLocal: true,
	}, explore.Bound{})
}

// TestExploreBarrier: every interleaving of teams of 2 to 7 members (8
// with GOSHMEM_EXPLORE_DEEP=1) in 3 barriers in a row: no member leaves a
// barrier before every member entered it, and nobody is left stuck.
func TestExploreBarrier(t *testing.T) {
	maxN := 7
	switch {
	case explore.Deep():
		maxN = 8
	case explore.Quick():
		maxN = 5
	}
	for n := 2; n <= maxN; n++ {
		m := newBarModel(n, 3)
		res, err := m.explore(explore.Bound{States: 30_000_000}, n <= 5)
		if err != nil {
			t.Fatalf("%d members: %v", n, err)
		}
		if res.Truncated {
			t.Fatalf("%d members: %v", n, res)
		}
		t.Logf("%d members, %d barriers, every interleaving: %v", n, m.episodes, res)
	}
}

// TestExploreBarrierCausal: the causal form of the property for teams of
// 2 to 12 members in 3 barriers in a row (5 with GOSHMEM_EXPLORE_DEEP=1).
func TestExploreBarrierCausal(t *testing.T) {
	maxN, episodes := barMax, 3
	if explore.Deep() {
		episodes = barEpisodesMax
	}
	if syncRounds(maxN) > barRoundsMax {
		t.Fatalf("%d members need %d rounds, the model has %d", maxN, syncRounds(maxN), barRoundsMax)
	}
	for n := 2; n <= maxN; n++ {
		m := newBarModel(n, episodes)
		res, err := m.exploreCausal()
		if err != nil {
			t.Fatalf("%d members: %v", n, err)
		}
		t.Logf("%d members, %d barriers, causal: %v", n, m.episodes, res)
	}
}

// The reduction keeps the verdict: without it, small teams reach more
// states and the same result.
func TestExploreBarrierUnreduced(t *testing.T) {
	for n := 2; n <= 4; n++ {
		m := newBarModel(n, 3)
		m.local = false
		res, err := m.explore(explore.Bound{}, false)
		if err != nil {
			t.Fatalf("%d members: %v", n, err)
		}
		t.Logf("%d members unreduced: %v", n, res)
	}
}

// TestExploreBarrierMutants: a barrier that drops its last round, and
// one whose wait accepts a flag from an earlier barrier, are caught by
// every form of the check.
func TestExploreBarrierMutants(t *testing.T) {
	type form struct {
		name string
		run  func(m *barModel) error
	}
	forms := []form{
		{"every interleaving", func(m *barModel) error { _, err := m.explore(explore.Bound{}, false); return err }},
		{"unreduced", func(m *barModel) error { m.local = false; _, err := m.explore(explore.Bound{}, false); return err }},
		{"causal", func(m *barModel) error { _, err := m.exploreCausal(); return err }},
	}
	for _, fm := range forms {
		for n := 2; n <= barMax; n++ {
			if fm.name != "causal" && n > 5 {
				break
			}
			m := newBarModel(n, 3)
			m.rounds = func(n int) int { return syncRounds(n) - 1 }
			err := fm.run(m)
			var f *explore.Failure
			if !errors.As(err, &f) || !strings.Contains(f.Err.Error(), "before PE") {
				t.Fatalf("%s, %d members: a barrier without its last round passed (%v)", fm.name, n, err)
			}
			if n == 3 {
				t.Logf("%s, dropped round: %v", fm.name, f)
			}
			if n == 2 {
				continue // one round: a flag from barrier 1 is still >= 1
			}
			m = newBarModel(n, 3)
			m.reached = func(flag, epoch uint64) bool { return flag > 0 }
			err = fm.run(m)
			if !errors.As(err, &f) || !strings.Contains(f.Err.Error(), "barrier 2") {
				t.Fatalf("%s, %d members: a barrier that takes an old flag passed (%v)", fm.name, n, err)
			}
			if n == 3 {
				t.Logf("%s, old flag taken: %v", fm.name, f)
			}
		}
	}
}
