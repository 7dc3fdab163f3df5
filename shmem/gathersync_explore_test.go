package shmem

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/goshmem/goshmem/heap"
	"github.com/goshmem/goshmem/verify/explore"
)

// The gather-and-release barrier (Team.syncGather), explored over every
// interleaving of its members' steps, driven by its own flags
// (gatherFlag) and wait rule (gatherWaiting, which uses syncReached).
// Each member runs barriers one after another. A member other than the
// root enters, stores the epoch into its gather flag on the root, waits
// for its release flag and leaves; the root enters, waits until its
// gather flags let it go, stores the epoch into every other member's
// release flag in member order, and leaves after the last store. A store
// touches one word that one member writes and one reads, and flags only
// grow, so stores other than the root's last are Local steps (they
// commute with every other step and the property does not look at
// them); the root's last store is its leaving step.

// A state is a barrierState (flatsync_explore_test.go). A member's pc:
// 0 outside; 1 to store its gather flag, 2 waiting for its release. The
// root's: 0 outside; 1 waiting; 1+j to release member j.

type gatherModel struct {
	n, episodes int
	// waiting is the root's wait rule: gatherWaiting, or a mutant.
	waiting func(n, from int, e uint64, flag func(j int) uint64) int
	// released is a member's wait rule: syncReached, or a mutant.
	released func(flag, epoch uint64) bool
}

func (m *gatherModel) steps(s barrierState) []explore.Step[barrierState] {
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
		case i != 0 && pc == 1:
			nx.flag[0][gatherFlag(i)] = uint8(e)
			nx.pc[i] = 2
			label = fmt.Sprintf("PE %d stores %d into its gather flag on the root", i, e)
			local = true
		case i != 0:
			if !m.released(uint64(s.flag[i][0]), uint64(e)) {
				continue
			}
			label = fmt.Sprintf("PE %d is released and leaves barrier %d", i, e)
			s.leave(&nx, m.n, i, e)
		case pc == 1:
			if m.waiting(m.n, 1, uint64(e), func(j int) uint64 { return uint64(s.flag[0][gatherFlag(j)]) }) != m.n {
				continue
			}
			nx.pc[0] = 2
			label = fmt.Sprintf("the root has gathered barrier %d", e)
			local = true
		default:
			j := pc - 1
			nx.flag[j][0] = uint8(e)
			label = fmt.Sprintf("the root stores %d into PE %d's release flag", e, j)
			if j == m.n-1 {
				label += fmt.Sprintf(" and leaves barrier %d", e)
				s.leave(&nx, m.n, 0, e)
			} else {
				nx.pc[0]++
				local = true
			}
		}
		out = append(out, explore.Step[barrierState]{Actor: i, Label: label, Next: nx, Local: local})
	}
	return out
}

func (m *gatherModel) explore() (explore.Result, error) {
	return exploreBarrier(m.n, m.episodes, m.steps)
}

// TestExploreGatherBarrier: every interleaving of gathering teams of 3
// to gatherSyncMax members (5 under the race detector) in 3
// barriers in a row: no member leaves a barrier before every member
// entered it, and nobody is left stuck.
func TestExploreGatherBarrier(t *testing.T) {
	maxN := gatherSyncMax
	if explore.Quick() {
		maxN = 5
	}
	for n := 3; n <= maxN; n++ {
		m := &gatherModel{n: n, episodes: 3, waiting: gatherWaiting, released: syncReached}
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

// TestExploreGatherBarrierMutants: a root that does not wait for the
// last member's flag, a root that takes a flag from an earlier barrier,
// and a member whose release takes the root's release of the barrier
// before, are caught.
func TestExploreGatherBarrierMutants(t *testing.T) {
	mutants := []struct {
		name     string
		waiting  func(n, from int, e uint64, flag func(j int) uint64) int
		released func(flag, epoch uint64) bool
		want     string
	}{
		{"ignores the last member", func(n, from int, e uint64, flag func(j int) uint64) int {
			return gatherWaiting(n-1, from, e, flag) + 1
		}, syncReached, "before PE"},
		{"takes an earlier barrier's gather flag", func(n, from int, e uint64, flag func(j int) uint64) int {
			return gatherWaiting(n, from, e-1, flag)
		}, syncReached, "before PE"},
		{"takes an earlier barrier's release", gatherWaiting, func(flag, e uint64) bool {
			return syncReached(flag, e-1)
		}, "before PE"},
	}
	for n := 3; n <= 4; n++ {
		for _, mu := range mutants {
			m := &gatherModel{n: n, episodes: 3, waiting: mu.waiting, released: mu.released}
			_, err := m.explore()
			var f *explore.Failure
			if !errors.As(err, &f) || !strings.Contains(f.Err.Error(), mu.want) {
				t.Fatalf("%d members: a barrier that %s passed (%v)", n, mu.name, err)
			}
			if n == 3 {
				t.Logf("%s: %v", mu.name, f)
			}
		}
	}
}

// TestSyncAlgorithm pins the choice of barrier by team size and by
// whether every member's heap is mapped: flat for mapped teams of up to
// flatSyncMax, gather for teams with a TCP member of 3 to gatherSyncMax,
// dissemination otherwise (a 2-member TCP team above all: one flag each
// way, crossing, where a gather sends them one after the other). The
// gather's flags fit the team slot's flags.
func TestSyncAlgorithm(t *testing.T) {
	cases := []struct {
		n      int
		mapped bool
		want   syncAlg
	}{
		{1, true, syncFlatAlg}, {2, true, syncFlatAlg}, {4, true, syncFlatAlg}, {16, true, syncFlatAlg},
		{17, true, syncDisseminationAlg}, {1024, true, syncDisseminationAlg},
		{1, false, syncDisseminationAlg}, {2, false, syncDisseminationAlg},
		{3, false, syncGatherAlg}, {4, false, syncGatherAlg}, {8, false, syncGatherAlg},
		{9, false, syncDisseminationAlg}, {64, false, syncDisseminationAlg},
	}
	for _, c := range cases {
		if got := syncAlgorithm(c.n, c.mapped); got != c.want {
			t.Errorf("syncAlgorithm(%d, mapped %v) = %v, want %v", c.n, c.mapped, got, c.want)
		}
	}
	if gatherFlag(gatherSyncMax-1) >= heap.MaxRounds {
		t.Fatalf("gather flag %d of a %d-member team is outside the slot's %d flags", gatherFlag(gatherSyncMax-1), gatherSyncMax, heap.MaxRounds)
	}
}
