package collective

import (
	"errors"
	"fmt"
	"math/bits"
	"testing"

	"github.com/goshmem/goshmem/verify/explore"
)

// ringVal is a member's copy of a chunk: which members' contributions
// it holds (a mask), whether one came twice, and whether it was written
// at all.
type ringVal struct {
	mask    uint64
	dup     bool
	written bool
}

func (v ringVal) fold(me int) ringVal {
	bit := uint64(1) << me
	return ringVal{mask: v.mask | bit, dup: v.dup || v.mask&bit != 0, written: true}
}

// The ring schedule in lock step, and partition, are checked for every
// team size up to 64 in partition_test.go (TestRingSchedule,
// TestPartition). Here, the ring schedule without lock step: each member waits for its left
// neighbour's signal before step s > 0, reads one chunk of the left
// neighbour's buffer, folds or copies it into its dst, and signals its
// right neighbour, as reduceRing does; members run at any relative
// speed the signals allow. In place, src and dst are one buffer. Every
// read must find what the lock-step schedule finds, and a member's own
// contribution must be intact when it is folded in.
const rsMax = 6

type rsState struct {
	pc     [rsMax]uint8 // 3*s + phase: 0 wait, 1 read and write, 2 signal
	ringIn [rsMax]uint8
	dst    [rsMax][rsMax]ringVal
	bad    string
}

type rsModel struct {
	parts   int
	inPlace bool
	step    func(parts, me, s int) (send, recv int)
}

func (m *rsModel) init() rsState {
	var s rsState
	if m.inPlace {
		for i := 0; i < m.parts; i++ {
			for c := 0; c < m.parts; c++ {
				s.dst[i][c] = ringVal{mask: 1 << i, written: true}
			}
		}
	}
	return s
}

func (m *rsModel) steps(s rsState) []explore.Step[rsState] {
	if s.bad != "" {
		return nil
	}
	P := m.parts
	total := 2 * (P - 1)
	full := ^uint64(0) >> (64 - P)
	var out []explore.Step[rsState]
	for me := 0; me < P; me++ {
		st, ph := int(s.pc[me])/3, int(s.pc[me])%3
		if st >= total {
			continue
		}
		nx := s
		left := (me + P - 1) % P
		right := (me + 1) % P
		switch ph {
		case 0:
			if st > 0 && int(s.ringIn[me]) < st {
				continue
			}
			nx.pc[me]++
			out = append(out, explore.Step[rsState]{Actor: me, Label: fmt.Sprintf("PE %d starts step %d", me, st), Next: nx, Local: true})
		case 1:
			_, ch := m.step(P, me, st)
			var v ringVal
			if st == 0 && !m.inPlace {
				v = ringVal{mask: 1 << left, written: true} // left's src
			} else {
				v = s.dst[left][ch]
			}
			if st < P-1 {
				if !v.written || v.dup || bits.OnesCount64(v.mask) != st+1 {
					nx.bad = fmt.Sprintf("PE %d in step %d reads chunk %d from PE %d holding %b (dup %v, written %v), want %d contributions", me, st, ch, left, v.mask, v.dup, v.written, st+1)
				}
				own := ringVal{mask: 1 << me, written: true}
				if m.inPlace && s.dst[me][ch] != own {
					nx.bad = fmt.Sprintf("PE %d in step %d folds its own chunk %d, already overwritten (%b)", me, st, ch, s.dst[me][ch].mask)
				}
				nx.dst[me][ch] = v.fold(me)
			} else {
				if v.mask != full || v.dup {
					nx.bad = fmt.Sprintf("PE %d in allgather step %d copies chunk %d from PE %d holding %b", me, st, ch, left, v.mask)
				}
				nx.dst[me][ch] = v
			}
			nx.pc[me]++
			if st == total-1 {
				nx.pc[me] = uint8(3 * total) // the last step sends no signal
			}
			out = append(out, explore.Step[rsState]{Actor: me, Label: fmt.Sprintf("PE %d reads chunk %d from PE %d", me, ch, left), Next: nx})
		case 2:
			nx.ringIn[right] = uint8(st + 1)
			nx.pc[me]++
			out = append(out, explore.Step[rsState]{Actor: me, Label: fmt.Sprintf("PE %d signals PE %d (step %d done)", me, right, st), Next: nx})
		}
	}
	return out
}

func (m *rsModel) explore() (explore.Result, error) {
	full := ^uint64(0) >> (64 - m.parts)
	return explore.Explore(explore.Model[rsState, rsState]{
		Init:  m.init(),
		Key:   func(s rsState) rsState { return s },
		Steps: m.steps,
		Check: func(s rsState) error {
			if s.bad != "" {
				return errors.New(s.bad)
			}
			return nil
		},
		Final: func(s rsState) error {
			for me := 0; me < m.parts; me++ {
				if int(s.pc[me]) != 3*2*(m.parts-1) {
					return fmt.Errorf("deadlock: PE %d stuck at step %d", me, s.pc[me]/3)
				}
				for c := 0; c < m.parts; c++ {
					if v := s.dst[me][c]; v.mask != full || v.dup {
						return fmt.Errorf("PE %d ends with chunk %d = %b (dup %v)", me, c, v.mask, v.dup)
					}
				}
			}
			return nil
		},
		CheckLocal: true,
	}, explore.Bound{States: 20_000_000})
}

// TestExploreRingAsync: every interleaving of the ring schedule for 3
// to 5 members (6 with GOSHMEM_EXPLORE_DEEP=1), apart and in place.
func TestExploreRingAsync(t *testing.T) {
	maxP := 5
	if explore.Quick() {
		maxP = 4
	}
	if explore.Deep() {
		maxP = rsMax
	}
	for P := 3; P <= maxP; P++ {
		for _, inPlace := range []bool{false, true} {
			m := &rsModel{parts: P, inPlace: inPlace, step: ringStep}
			res, err := m.explore()
			if err != nil {
				t.Fatalf("%d members, in place %v: %v", P, inPlace, err)
			}
			if res.Truncated {
				t.Fatalf("%d members, in place %v: %v", P, inPlace, res)
			}
			t.Logf("%d members, in place %v: %v", P, inPlace, res)
		}
	}
}

// TestExploreRingMutant: a schedule whose allgather starts one chunk
// late (it sends the chunk it received, not its own finished one first)
// is caught.
func TestExploreRingMutant(t *testing.T) {
	bad := func(parts, me, s int) (int, int) {
		if s >= parts-1 {
			s++
		}
		return ringStep(parts, me, s)
	}
	m := &rsModel{parts: 4, step: bad}
	_, err := m.explore()
	var f *explore.Failure
	if !errors.As(err, &f) {
		t.Fatalf("a shifted allgather passed: %v", err)
	}
	t.Logf("shifted allgather: %v", f.Err)
}
