package shmem

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/goshmem/goshmem/verify/explore"
)

// The flat barrier in causal form (see causalState in explore_test.go for
// why this is exact): for every team size that syncs flat, 2 to
// flatSyncMax, where every interleaving (flatsync_explore_test.go)
// reaches only 5. Each member carries what it knows of the others'
// entries; a store leaves the storer's knowledge with the stored value;
// a wait that passes learns, for each flag it depends on, the knowledge
// left by the first store of that flag whose value would have let it
// pass. A wait depends on flag j if it would not pass with flag j still
// unwritten. Leaving barrier e, a member must know that every member
// entered e.
const flatCausalMax = flatSyncMax

type flatCausal struct {
	pc   [flatCausalMax]uint8 // 0: outside; s (1..n-1): to make store s; n: waiting
	done [flatCausalMax]uint8
	flag [flatCausalMax][flatCausalMax]uint8
	know [flatCausalMax][flatCausalMax]uint8
	// left[i][j][v]: the knowledge member j left with value v in its
	// flag on member i.
	left [flatCausalMax][flatCausalMax][barEpisodesMax + 1][flatCausalMax]uint8
	bad  string
}

func (m *flatModel) causalSteps(s *flatCausal) []explore.Step[*flatCausal] {
	if s.bad != "" {
		return nil
	}
	var out []explore.Step[*flatCausal]
	for i := 0; i < m.n; i++ {
		e := int(s.done[i]) + 1
		if e > m.episodes {
			continue
		}
		nx := new(flatCausal)
		*nx = *s
		pc := int(s.pc[i])
		var label string
		switch {
		case pc == 0:
			nx.pc[i] = 1
			nx.know[i][i] = uint8(e)
			label = fmt.Sprintf("PE %d enters barrier %d", i, e)
		case pc < m.n:
			to := flatTo(m.n, i, pc)
			nx.flag[to][i] = uint8(e)
			nx.left[to][i][e] = s.know[i]
			nx.pc[i]++
			label = fmt.Sprintf("PE %d stores %d into its flag on PE %d", i, e, to)
		default:
			flags := s.flag[i]
			pass := func(f [flatCausalMax]uint8) bool {
				return m.waiting(m.n, i, 0, uint64(e), func(j int) uint64 { return uint64(f[j]) }) == m.n
			}
			if !pass(flags) {
				continue
			}
			for j := 0; j < m.n; j++ {
				f := flags
				f[j] = 0
				if j == i || pass(f) {
					continue // the wait does not depend on flag j
				}
				for v := 1; v <= int(flags[j]); v++ {
					f[j] = uint8(v)
					if pass(f) {
						for k, kn := range s.left[i][j][v] {
							nx.know[i][k] = max(nx.know[i][k], kn)
						}
						break
					}
				}
			}
			nx.pc[i], nx.done[i] = 0, uint8(e)
			label = fmt.Sprintf("PE %d leaves barrier %d", i, e)
			for j := 0; j < m.n; j++ {
				if j != i && int(nx.know[i][j]) < e {
					nx.bad = fmt.Sprintf("PE %d can leave barrier %d before PE %d entered it", i, e, j)
					break
				}
			}
		}
		out = append(out, explore.Step[*flatCausal]{Actor: i, Label: label, Next: nx, Local: nx.bad == ""})
	}
	return out
}

func (m *flatModel) exploreCausal() (explore.Result, error) {
	return explore.Explore(explore.Model[*flatCausal, flatCausal]{
		Init:  &flatCausal{},
		Key:   func(s *flatCausal) flatCausal { return *s },
		Steps: m.causalSteps,
		Check: func(s *flatCausal) error {
			if s.bad != "" {
				return errors.New(s.bad)
			}
			return nil
		},
		Final: func(s *flatCausal) error {
			for i := 0; i < m.n; i++ {
				if int(s.done[i]) != m.episodes {
					return fmt.Errorf("deadlock: PE %d is stuck in barrier %d (step %d)", i, s.done[i]+1, s.pc[i])
				}
			}
			return nil
		},
		Show:       func(s *flatCausal) string { return fmt.Sprintf("barriers done %v, steps %v", s.done[:m.n], s.pc[:m.n]) },
		CheckLocal: m.n <= 6,
	}, explore.Bound{})
}

// flatMutants are broken wait rules each flat check must catch: the
// failure names want.
var flatMutants = []struct {
	name, want string
	waiting    func(n, me, from int, e uint64, flag func(int) uint64) int
}{
	{"ignores a member", "before PE", func(n, me, from int, e uint64, flag func(int) uint64) int {
		last := n - 1
		if me == last {
			last--
		}
		if w := flatWaiting(n, me, from, e, flag); w != last {
			return w
		}
		return n // ignores member last
	}},
	{"takes an old flag", "barrier 2", func(n, me, from int, e uint64, flag func(int) uint64) int {
		return flatWaiting(n, me, from, 1, flag) // any flag from barrier 1 on
	}},
}

// TestExploreFlatBarrierCausal: flat teams of 2 to 16 members, 3
// barriers in a row (5 with GOSHMEM_EXPLORE_DEEP=1), and the two mutants
// of TestExploreFlatBarrierMutants caught at every size.
func TestExploreFlatBarrierCausal(t *testing.T) {
	episodes := 3
	if explore.Deep() {
		episodes = barEpisodesMax
	}
	for n := 2; n <= flatCausalMax; n++ {
		m := &flatModel{n: n, episodes: episodes, waiting: flatWaiting}
		res, err := m.exploreCausal()
		if err != nil {
			t.Fatalf("%d members: %v", n, err)
		}
		t.Logf("%d members, %d barriers, causal: %v", n, episodes, res)

		for _, mu := range flatMutants {
			m = &flatModel{n: n, episodes: 3, waiting: mu.waiting}
			_, err = m.exploreCausal()
			var f *explore.Failure
			if !errors.As(err, &f) || !strings.Contains(f.Err.Error(), mu.want) {
				t.Fatalf("%d members: a wait that %s passed (%v)", n, mu.name, err)
			}
		}
	}
}
