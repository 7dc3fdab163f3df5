package collective

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/scenario"
	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/verify/explore"
)

// The buffer-ownership rule (doc.go): a collective reads a PE's src and
// writes its dst only while that PE is inside the same call. Checked on
// the real schedules: each case runs the real collective twice back to
// back on n goroutine PEs with a tracer (trace.go) that records, in each
// member's program order, the call's begin and end, every read or write
// of another member's memory (or its own through the heap), and every
// signal and wait. A member's sequence does not depend on the
// interleaving (its waits only delay it), so the explorer then takes the
// recorded sequences as the members' programs and visits every
// interleaving the waits allow: every order of entering and leaving,
// the second call overlapping the first wherever it can. A write lands
// when it is made (shared-memory semantics: the routes' ordering of
// puts before the signal that follows them is netmesh's and the
// exchange's business, checked by their own tests).
//
// Steps that touch no dst or src (a wait, an exchange message into the
// scratch and its signal, a ring signal) commute with every other step
// and are invisible to the property: they are Local, and CheckLocal
// tests that in every state the reduction relies on it, at the sizes
// where it is cheap.

type ownCase struct {
	name  string
	algo  string // GOSHMEM_COLLECTIVE_ALGO
	hosts string // scenario.Hosts kind, "" for one host
	minN  int
	big   bool // one member fewer by default: the largest state spaces, or a schedule of FCollect's shape
	call  func(t *shmem.Team, dst, src shmem.Sym[int64], n int) error
}

const ownLen = 4096 // elements of src (32 KiB): above one scratch message on every team size (31960 bytes on 2 members), so the paths below are taken

var ownCases = []ownCase{
	{"FCollect (entry exchange, pushes, exit exchange)", "direct", "", 2, false, func(t *shmem.Team, dst, src shmem.Sym[int64], n int) error {
		return FCollect(t, dst, src)
	}},
	{"FCollect, hosts apart (gathered entry exchange, counted pushes)", "direct", "remote", 4, true, func(t *shmem.Team, dst, src shmem.Sym[int64], n int) error {
		return FCollect(t, dst, src)
	}},
	{"Broadcast direct (root n-1)", "direct", "", 2, false, func(t *shmem.Team, dst, src shmem.Sym[int64], n int) error {
		return Broadcast(t, dst.Slice(0, ownLen), src, n-1)
	}},
	{"AllReduce direct", "direct", "", 2, true, func(t *shmem.Team, dst, src shmem.Sym[int64], n int) error {
		return AllReduce(t, dst.Slice(0, ownLen), src, Sum)
	}},
	{"AllReduce direct, in place", "direct", "", 2, true, func(t *shmem.Team, dst, src shmem.Sym[int64], n int) error {
		return AllReduce(t, src, src, Sum)
	}},
	{"AllReduce ring", "ring", "", 3, false, func(t *shmem.Team, dst, src shmem.Sym[int64], n int) error {
		return AllReduce(t, dst.Slice(0, ownLen), src, Sum)
	}},
	{"AllReduce halving / push ring / pair (hosts apart)", "", "remote", 2, false, func(t *shmem.Team, dst, src shmem.Sym[int64], n int) error {
		return AllReduce(t, dst.Slice(0, ownLen), src, Sum)
	}},
	{"AllReduce push ring", "pushring", "remote", 3, false, func(t *shmem.Team, dst, src shmem.Sym[int64], n int) error {
		return AllReduce(t, dst.Slice(0, ownLen), src, Sum)
	}},
	{"AllReduce halving, one host", "halving", "", 4, true, func(t *shmem.Team, dst, src shmem.Sym[int64], n int) error {
		return AllReduce(t, dst.Slice(0, ownLen), src, Sum)
	}},
	{"Reduce chain, ring + gather above 4 (hosts apart, root 1)", "", "remote", 2, false, func(t *shmem.Team, dst, src shmem.Sym[int64], n int) error {
		return Reduce(t, dst.Slice(0, ownLen), src, Sum, 1)
	}},
	{"Reduce chain, one host (root n-1)", "chain", "", 2, false, func(t *shmem.Team, dst, src shmem.Sym[int64], n int) error {
		return Reduce(t, dst.Slice(0, ownLen), src, Sum, n-1)
	}},
	{"Reduce ring + gather, one host (root n-1)", "pushring", "", 3, false, func(t *shmem.Team, dst, src shmem.Sym[int64], n int) error {
		return Reduce(t, dst.Slice(0, ownLen), src, Sum, n-1)
	}},
	{"Broadcast scatter + allgather (hosts apart, root 0)", "direct", "remote", 2, false, func(t *shmem.Team, dst, src shmem.Sym[int64], n int) error {
		return Broadcast(t, dst.Slice(0, ownLen), src, 0)
	}},
	{"Collect (entry exchange with the counts, pushes, exit exchange)", "direct", "", 2, true, func(t *shmem.Team, dst, src shmem.Sym[int64], n int) error {
		_, err := Collect(t, dst, src, ownLen)
		return err
	}},
	{"AllToAll (entry exchange, pushes, exit exchange)", "direct", "", 2, true, func(t *shmem.Team, dst, src shmem.Sym[int64], n int) error {
		return AllToAll(t, dst, src, ownLen/n)
	}},
	{"InScan (entry exchange, reads of the lower members' src, exit exchange)", "direct", "", 2, false, func(t *shmem.Team, dst, src shmem.Sym[int64], n int) error {
		return InScan(t, dst.Slice(0, ownLen), src, Sum)
	}},
}

// ownRecorder is the tracer: each PE's operations, in its order.
type ownRecorder struct {
	mu  sync.Mutex
	ops map[*shmem.PE][]traceOp
}

func (r *ownRecorder) note(pe *shmem.PE, o traceOp) {
	r.mu.Lock()
	r.ops[pe] = append(r.ops[pe], o)
	r.mu.Unlock()
}

// ownTraces runs the case on n PEs, two calls back to back, and returns
// each world PE's operations and the byte ranges of dst and src.
func ownTraces(t *testing.T, c ownCase, n int) ([][]traceOp, [2][2]uint64) {
	t.Setenv(envAlgo, c.algo)
	rec := &ownRecorder{ops: map[*shmem.PE][]traceOp{}}
	pes := make([]*shmem.PE, n)
	var objs [2][2]uint64
	opts := []shmem.Option{shmem.WithTimeout(30 * time.Second), shmem.WithHeapSize(4 << 20)}
	if c.hosts != "" {
		opts = append(opts, shmem.WithHosts(scenario.Hosts(c.hosts, n)))
	}
	tracer = rec
	defer func() { tracer = nil }()
	err := shmem.Run(n, func(pe *shmem.PE) error {
		pes[pe.MyPE()] = pe
		src, err := shmem.Malloc[int64](pe, ownLen)
		if err != nil {
			return err
		}
		dst, err := shmem.Malloc[int64](pe, ownLen*n)
		if err != nil {
			return err
		}
		if pe.MyPE() == 0 {
			objs = [2][2]uint64{{dst.Offset(), dst.Offset() + uint64(8*dst.Len())}, {src.Offset(), src.Offset() + uint64(8*src.Len())}}
		}
		for ep := range 2 {
			if err := c.call(pe.World(), dst, src, n); err != nil {
				return fmt.Errorf("call %d: %w", ep, err)
			}
		}
		return nil
	}, opts...)
	if errors.Is(err, shmem.ErrInvalid) && strings.Contains(err.Error(), "netmesh") {
		t.Skipf("remote PEs are not built: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	tr := make([][]traceOp, n)
	for i, pe := range pes {
		tr[i] = rec.ops[pe]
	}
	return tr, objs
}

const ownMax = 6

type ownState struct {
	pc  [ownMax]uint16
	w   [ownMax * (2*ownMax + 1)]uint64 // the words the traces signal, indexed by ownModel.word: per member 3 control words and a flat exchange's 2(n-1) sequence words
	bad string
}

// ownKey is a state's key: the words are a function of the program
// counters (newOwnModel checks that every word is only added to, or set
// by one member only, in increasing values).
type ownKey struct {
	pc  [ownMax]uint16
	bad string
}

type ownModel struct {
	n       int
	tr      [][]traceOp
	objs    [2][2]uint64 // dst, src: heap byte ranges
	word    map[[2]int]int
	inside  [][]bool // inside[i][pc]: member i is in a call before op pc
	episode [][]int  // its call count so far
	// shut[i][pc]: member i's dst is not open to the others before op
	// pc although it is inside a call: the call saves the dst
	// (reduceChain, reduceRootRing) and pc is not between the save and
	// the restore.
	shut [][]bool
}

func newOwnModel(t *testing.T, tr [][]traceOp, objs [2][2]uint64) *ownModel {
	m := &ownModel{n: len(tr), tr: tr, objs: objs, word: map[[2]int]int{}}
	for i, ops := range tr {
		in, ep := false, 0
		m.inside = append(m.inside, make([]bool, len(ops)+1))
		m.episode = append(m.episode, make([]int, len(ops)+1))
		for p, o := range ops {
			m.inside[i][p], m.episode[i][p] = in, ep
			switch o.kind {
			case tBegin:
				in, ep = true, ep+1
			case tEnd:
				in = false
			}
			for _, w := range append([]int{o.word}, o.more...) {
				if w < 0 {
					continue
				}
				k := [2]int{o.pe, w}
				if _, ok := m.word[k]; !ok {
					m.word[k] = len(m.word)
				}
			}
		}
		m.inside[i][len(ops)], m.episode[i][len(ops)] = in, ep
		// A call that saves its dst opens it at the save and shuts it at
		// the restore.
		m.shut = append(m.shut, make([]bool, len(ops)+1))
		saves := false
		for p := range ops {
			switch ops[p].kind {
			case tBegin:
				saves = false
				for _, o := range ops[p+1:] {
					if o.kind == tEnd {
						break
					}
					saves = saves || o.kind == tSave
				}
				m.shut[i][p+1] = saves
			case tSave:
				m.shut[i][p+1] = false
			case tRestore:
				m.shut[i][p+1] = saves
			default:
				m.shut[i][p+1] = m.shut[i][p]
			}
		}
		if ep != 2 || in {
			t.Fatalf("PE %d's trace has %d calls, ends inside %v", i, ep, in)
		}
	}
	// Words only grow, and a word that is set has one writer.
	writer := map[int]int{}
	last := map[int]uint64{}
	for i, ops := range tr {
		for _, o := range ops {
			if o.word < 0 || o.kind == tWait {
				continue
			}
			w := m.word[[2]int{o.pe, o.word}]
			if !o.add {
				if x, ok := writer[w]; (ok && x != i) || o.v < last[w] {
					t.Fatalf("word %d of PE %d is set by PEs %d and %d, or not in increasing values", o.word, o.pe, x, i)
				}
				writer[w], last[w] = i, o.v
			}
		}
	}
	for w := range writer {
		for i, ops := range tr {
			for _, o := range ops {
				if o.word >= 0 && o.kind != tWait && o.add && m.word[[2]int{o.pe, o.word}] == w {
					t.Fatalf("word %d of PE %d is both set and added to (by PE %d)", o.word, o.pe, i)
				}
			}
		}
	}
	if len(m.word) > len(ownState{}.w) {
		t.Fatalf("%d words signalled, the model holds %d", len(m.word), len(ownState{}.w))
	}
	return m
}

// owned says which buffer [off, off+n) touches: "dst", "src" or "".
func (m *ownModel) owned(off, n uint64) string {
	for i, name := range []string{"dst", "src"} {
		if n > 0 && off < m.objs[i][1] && m.objs[i][0] < off+n {
			return name
		}
	}
	return ""
}

func (m *ownModel) steps(s ownState) []explore.Step[ownState] {
	if s.bad != "" {
		return nil
	}
	var out []explore.Step[ownState]
	for i := 0; i < m.n; i++ {
		p := int(s.pc[i])
		if p == len(m.tr[i]) {
			continue
		}
		o := m.tr[i][p]
		nx := s
		nx.pc[i]++
		var label string
		local := true
		switch o.kind {
		case tBegin:
			label, local = fmt.Sprintf("PE %d enters call %d", i, m.episode[i][p]+1), false
		case tEnd:
			label, local = fmt.Sprintf("PE %d returns from call %d", i, m.episode[i][p]), false
		case tSave:
			label, local = fmt.Sprintf("PE %d saves its dst in call %d", i, m.episode[i][p]), false
		case tRestore:
			label, local = fmt.Sprintf("PE %d restores its dst in call %d", i, m.episode[i][p]), false
		case tWait:
			ready := true
			for _, w := range append([]int{o.word}, o.more...) {
				ready = ready && s.w[m.word[[2]int{i, w}]] >= o.v
			}
			if !ready {
				continue
			}
			label = fmt.Sprintf("PE %d's wait for word %d >= %d ends", i, o.word, o.v)
			if len(o.more) > 0 {
				label = fmt.Sprintf("PE %d's wait for words %d and %v >= %d ends", i, o.word, o.more, o.v)
			}
		case tRead, tWrite:
			verb := "reads"
			if o.kind == tWrite {
				verb = "writes"
			}
			label = fmt.Sprintf("PE %d %s PE %d's heap [%d, %d)", i, verb, o.pe, o.off, o.off+o.n)
			if b := m.owned(o.off, o.n); b != "" {
				// An access to another member's buffer depends on that
				// member's entering and leaving; its own does not.
				local = o.pe == i
				label = fmt.Sprintf("PE %d %s PE %d's %s [%d, %d)", i, verb, o.pe, b, o.off-m.objs[0][0], o.off+o.n-m.objs[0][0])
				if b == "src" {
					label = fmt.Sprintf("PE %d %s PE %d's %s [%d, %d)", i, verb, o.pe, b, o.off-m.objs[1][0], o.off+o.n-m.objs[1][0])
				}
				j := o.pe
				if !m.inside[j][s.pc[j]] || m.episode[j][s.pc[j]] != m.episode[i][p] {
					where := "outside any call"
					if m.inside[j][s.pc[j]] {
						where = fmt.Sprintf("inside call %d", m.episode[j][s.pc[j]])
					}
					nx.bad = fmt.Sprintf("PE %d in call %d %s PE %d's %s while PE %d is %s", i, m.episode[i][p], verb, j, b, j, where)
				} else if b == "dst" && j != i && m.shut[j][s.pc[j]] {
					nx.bad = fmt.Sprintf("PE %d in call %d %s PE %d's dst while PE %d has not saved it or has restored it", i, m.episode[i][p], verb, j, j)
				}
			}
			if o.word >= 0 {
				w := m.word[[2]int{o.pe, o.word}]
				if o.add {
					nx.w[w] += o.v
				} else {
					nx.w[w] = o.v
				}
				label += fmt.Sprintf(" and signals its word %d (%s %d)", o.word, map[bool]string{true: "+", false: "="}[o.add], o.v)
			}
		default:
			nx.bad = fmt.Sprintf("unknown trace op %+v", o)
		}
		out = append(out, explore.Step[ownState]{Actor: i, Label: label, Next: nx, Local: local})
	}
	return out
}

func (m *ownModel) final(s ownState) error {
	for i := 0; i < m.n; i++ {
		if int(s.pc[i]) != len(m.tr[i]) {
			o := m.tr[i][s.pc[i]]
			return fmt.Errorf("deadlock: PE %d stuck at op %d of %d (%+v)", i, s.pc[i], len(m.tr[i]), o)
		}
	}
	return nil
}

func (m *ownModel) explore(checkLocal bool) (explore.Result, error) {
	return explore.Explore(explore.Model[ownState, ownKey]{
		Key:   func(s ownState) ownKey { return ownKey{s.pc, s.bad} },
		Steps: m.steps,
		Check: func(s ownState) error {
			if s.bad != "" {
				return errors.New(s.bad)
			}
			return nil
		},
		Final: m.final,
		Show: func(s ownState) string {
			var b strings.Builder
			for i := 0; i < m.n; i++ {
				p := s.pc[i]
				fmt.Fprintf(&b, "PE %d at op %d/%d (call %d, inside %v); ", i, p, len(m.tr[i]), m.episode[i][p], m.inside[i][p])
			}
			return b.String()
		},
		CheckLocal: checkLocal,
	}, explore.Bound{States: 30_000_000})
}

// ownMaxN is the largest team explored: 5 (6 with GOSHMEM_EXPLORE_DEEP=1,
// 4 under the race detector), one fewer for the big cases.
func ownMaxN(c ownCase) int {
	n := 5
	switch {
	case explore.Deep():
		n = 6
	case explore.Quick():
		n = 4
	}
	if c.big && !explore.Quick() {
		n--
	}
	return n
}

// TestExploreOwnership: every case, every team size from its least to
// ownMaxN, two calls back to back.
func TestExploreOwnership(t *testing.T) {
	for _, c := range ownCases {
		for n := c.minN; n <= ownMaxN(c); n++ {
			tr, objs := ownTraces(t, c, n)
			if n == 3 {
				// A member's sequence does not depend on the run's
				// interleaving: a second run records the same.
				again, _ := ownTraces(t, c, n)
				if fmt.Sprint(again) != fmt.Sprint(tr) {
					t.Fatalf("%s, %d PEs: two runs recorded different sequences", c.name, n)
				}
			}
			m := newOwnModel(t, tr, objs)
			res, err := m.explore(n <= 3)
			if err != nil {
				t.Fatalf("%s, %d PEs: %v", c.name, n, err)
			}
			if res.Truncated {
				t.Fatalf("%s, %d PEs: %v", c.name, n, res)
			}
			ops := 0
			for _, o := range tr {
				ops += len(o)
			}
			t.Logf("%s, %d PEs (%d traced operations): %v", c.name, n, ops, res)
		}
	}
}

// TestExploreOwnershipMutant: FCollect whose pushes skip the entry
// exchange (mutantNoEntry) is caught writing into a member that has not
// entered, or is still in the call before.
func TestExploreOwnershipMutant(t *testing.T) {
	mutantNoEntry = true
	defer func() { mutantNoEntry = false }()
	tr, objs := ownTraces(t, ownCases[0], 3)
	mutantNoEntry = false
	_, err := newOwnModel(t, tr, objs).explore(false)
	var f *explore.Failure
	if !errors.As(err, &f) || !strings.Contains(f.Err.Error(), "writes PE") {
		t.Fatalf("FCollect without its entry exchange passed or failed otherwise: %v", err)
	}
	t.Logf("FCollect without its entry exchange:\n%v", f)
}

// TestExploreOwnershipMutantHalving: reduceHalving whose members return
// without waiting for their last block (mutantHalvingNoWait) is caught
// with a partner writing into a member that has left.
func TestExploreOwnershipMutantHalving(t *testing.T) {
	exploreMutant(t, "AllReduce halving, one host", 4, &mutantHalvingNoWait, "writes PE", "halving without its last wait")
}

// TestExploreOwnershipMutantChain: reduceChain whose middle members
// restore their dst before their last piece has landed
// (mutantChainEarlyRestore) is caught with the upstream neighbour
// writing into a dst already restored.
func TestExploreOwnershipMutantChain(t *testing.T) {
	exploreMutant(t, "Reduce chain, one host", 3, &mutantChainEarlyRestore, "has restored it", "the Reduce chain restoring early")
}

// TestExploreOwnershipMutantRootRing: reduceRootRing (teams of more
// than chainMax) whose non-roots restore their dst before their last
// chunk has landed (mutantRootRingEarlyRestore) is caught with the left
// neighbour writing into a dst already restored.
func TestExploreOwnershipMutantRootRing(t *testing.T) {
	exploreMutant(t, "Reduce ring + gather, one host", 3, &mutantRootRingEarlyRestore, "has restored it", "the Reduce ring restoring early")
}

// TestExploreOwnershipMutantExchange: a flat exchange whose recorded
// program leaves out the wait for the right-hand neighbour's message
// (mutantExchangeSkip) is no longer a barrier: FCollect's entry exchange
// lets a member push into a member that has not entered the call.
func TestExploreOwnershipMutantExchange(t *testing.T) {
	exploreMutant(t, "FCollect (entry exchange", 3, &mutantExchangeSkip, "writes PE", "the exchange without one wait")
}

// TestExploreOwnershipMutantGather: a gathered exchange whose member 0
// releases the others without waiting for member 1 (mutantGatherSkip,
// in the recorded program) is no longer a barrier: FCollect's pushes
// may land in member 1 before it has entered the call.
func TestExploreOwnershipMutantGather(t *testing.T) {
	exploreMutant(t, "FCollect, hosts apart", 4, &mutantGatherSkip, "writes PE", "the gathered exchange without one wait")
}

// exploreMutant records the case whose name starts with prefix on n
// members with the mutant flag set, and wants the exploration to fail
// with an error that says want.
func exploreMutant(t *testing.T, prefix string, n int, flag *bool, want, what string) {
	var c ownCase
	for _, o := range ownCases {
		if strings.HasPrefix(o.name, prefix) {
			c = o
		}
	}
	*flag = true
	defer func() { *flag = false }()
	tr, objs := ownTraces(t, c, n)
	*flag = false
	_, err := newOwnModel(t, tr, objs).explore(false)
	var f *explore.Failure
	if !errors.As(err, &f) || !strings.Contains(f.Err.Error(), want) {
		t.Fatalf("%s passed or failed otherwise: %v", what, err)
	}
	t.Logf("%s:\n%v", what, f)
}
