package shmem

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/goshmem/goshmem/verify/explore"
)

// The flat barrier (Team.syncFlat), explored over every interleaving of
// its members' steps, driven by its own schedule (flatTo) and wait rule
// (flatWaiting, which uses syncReached). Each member runs barriers one
// after another: it enters, stores the epoch into its flag on each other
// member in flatTo's order, then waits until every flag of its own lets
// it go, and leaves. A store touches one word that one member writes and
// one reads, and flags only grow, so stores are Local steps (they commute
// with every other step and the property does not look at them). A
// member's pc: 0 outside; s (1..n-1) to make store s; n waiting.

// barrierMax bounds the teams the barrier explorers (this file's flat
// one and gathersync_explore_test.go's gather) can hold.
const barrierMax = 8

// A gathering team of gatherSyncMax members must fit barrierState.
var _ [barrierMax - gatherSyncMax]struct{}

// barrierState is a state of a barrier explorer: each member's step in
// its barrier (what a step means is the explorer's own), the barriers it
// completed, the flags (flag[i][k]: flag word k on member i; each word
// has one writer), and the first violation seen.
type barrierState struct {
	pc   [barrierMax]uint8
	done [barrierMax]uint8
	flag [barrierMax][barrierMax]uint8
	bad  string
}

// arrived says whether member j has entered barrier e in s.
func (s *barrierState) arrived(j, e int) bool {
	return int(s.done[j]) >= e || (int(s.done[j]) == e-1 && s.pc[j] > 0)
}

// leave marks member i of an n-member team as leaving barrier e in nx,
// judged on s (the state before the step): every member must have
// entered e.
func (s *barrierState) leave(nx *barrierState, n, i, e int) {
	nx.pc[i], nx.done[i] = 0, uint8(e)
	for j := 0; j < n; j++ {
		if j != i && !s.arrived(j, e) {
			nx.bad = fmt.Sprintf("PE %d left barrier %d before PE %d entered it", i, e, j)
			return
		}
	}
}

// exploreBarrier explores every interleaving of steps from the empty
// state of an n-member team running episodes barriers in a row: no
// violation recorded, and every member completes every barrier.
func exploreBarrier(n, episodes int, steps func(barrierState) []explore.Step[barrierState]) (explore.Result, error) {
	return explore.Explore(explore.Model[barrierState, barrierState]{
		Key:   func(s barrierState) barrierState { return s },
		Steps: steps,
		Check: func(s barrierState) error {
			if s.bad != "" {
				return errors.New(s.bad)
			}
			return nil
		},
		Final: func(s barrierState) error {
			for i := 0; i < n; i++ {
				if int(s.done[i]) != episodes {
					return fmt.Errorf("deadlock: PE %d is stuck in barrier %d (step %d)", i, s.done[i]+1, s.pc[i])
				}
			}
			return nil
		},
		Show: func(s barrierState) string {
			return fmt.Sprintf("barriers done %v, steps %v", s.done[:n], s.pc[:n])
		},
		CheckLocal: n <= 4,
	}, explore.Bound{States: 30_000_000})
}

type flatModel struct {
	n, episodes int
	// waiting is the wait rule: flatWaiting, or a mutant.
	waiting func(n, me, from int, e uint64, flag func(j int) uint64) int
}

func (m *flatModel) steps(s barrierState) []explore.Step[barrierState] {
	if s.bad != "" {
		return nil
	}
	var out []explore.Step[barrierState]
	for i := 0; i < m.n; i++ {
		e := int(s.done[i]) + 1
		if e > m.episodes {
			continue
		}
		nx := s
		pc := int(s.pc[i])
		var label string
		local := false
		switch {
		case pc == 0:
			nx.pc[i] = 1
			label = fmt.Sprintf("PE %d enters barrier %d", i, e)
		case pc < m.n:
			to := flatTo(m.n, i, pc)
			nx.flag[to][i] = uint8(e)
			nx.pc[i]++
			label = fmt.Sprintf("PE %d stores %d into its flag on PE %d", i, e, to)
			local = true
		default:
			if m.waiting(m.n, i, 0, uint64(e), func(j int) uint64 { return uint64(s.flag[i][j]) }) != m.n {
				continue
			}
			label = fmt.Sprintf("PE %d leaves barrier %d", i, e)
			s.leave(&nx, m.n, i, e)
		}
		out = append(out, explore.Step[barrierState]{Actor: i, Label: label, Next: nx, Local: local})
	}
	return out
}

func (m *flatModel) explore() (explore.Result, error) {
	return exploreBarrier(m.n, m.episodes, m.steps)
}

// TestExploreFlatBarrier: every interleaving of flat teams of 2 to 5
// members (6 with GOSHMEM_EXPLORE_DEEP=1) in 3 barriers in a row: no
// member leaves a barrier before every member entered it, and nobody is
// left stuck.
func TestExploreFlatBarrier(t *testing.T) {
	maxN := 5
	if explore.Deep() {
		maxN = 6
	}
	for n := 2; n <= maxN; n++ {
		m := &flatModel{n: n, episodes: 3, waiting: flatWaiting}
		res, err := m.explore()
		if err != nil {
			t.Fatalf("%d members: %v", n, err)
		}
		if res.Truncated {
			t.Fatalf("%d members: %v", n, res)
		}
		t.Logf("%d members, 3 barriers, every interleaving: %v", n, res)
	}
}

// TestExploreFlatBarrierMutants: a wait that ignores the last member's
// flag, and one that takes a flag from an earlier barrier, are caught.
func TestExploreFlatBarrierMutants(t *testing.T) {
	for n := 2; n <= 4; n++ {
		for _, mu := range flatMutants { // flatsync_causal_test.go
			m := &flatModel{n: n, episodes: 3, waiting: mu.waiting}
			_, err := m.explore()
			var f *explore.Failure
			if !errors.As(err, &f) || !strings.Contains(f.Err.Error(), mu.want) {
				t.Fatalf("%d members: a wait that %s passed (%v)", n, mu.name, err)
			}
			if n == 3 {
				t.Logf("%s: %v", mu.name, f)
			}
		}
	}
}
