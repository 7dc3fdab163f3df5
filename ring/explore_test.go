package ring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/goshmem/goshmem/verify/explore"
)

// The exhaustive check of one lane, driven through the lane's own code:
// the sender's gate (safeNeed), slot choice (slotOf) and slot image
// (encodeSlot, into a stage buffer reused as Send reuses it), and the
// receiver's whole poll (recvLane.poll: take, accept, snapshot,
// decodeSlot) on a byte image of the receiver's data object.
//
// Actors: 0 is the sender, 1 the receiver. The sender's put of a slot
// image is split into its 8-byte word stores, in every order (a copy
// may go either way, or in wider pieces, which are coarser), so the
// receiver can see every torn slot; the put's signal (pub = seq) comes
// after the last word, as PutSignal orders it. The bytes put are the
// ones slotPut chooses: the whole slot (capacity exCap), or the head and
// the tail alone (exCapSplit). A poll is one step: the
// receiver's loads of one poll see one instant (see
// docs/verification.md). Acks are cumulative adds to the sender's ack
// word, as Ack makes them over shared memory.

const (
	exLine = 64 // cache line of the explored layout
	exCap  = 8  // lane capacity: one payload word (Send puts the whole slot)
	// exCapSplit: a capacity whose slots leave enough padding after an
	// exPayload that Send puts the head and the tail apart (slotPut).
	exCapSplit = 296
)

// exPayload is message seq's payload: 8 bytes for odd seq, 3 for even,
// each byte telling seq apart, so a mixed-up or stale payload shows.
func exPayload(seq uint64) []byte {
	n := 8
	if seq%2 == 0 {
		n = 3
	}
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(seq*16 + uint64(i))
	}
	return p
}

// laneState is one state of a lane: memory, both ends, and what the
// receiver has delivered. It is comparable: it is its own key.
type laneState struct {
	mem   string // the receiver's data object
	pub   uint64 // the lane's pub word (receiver's heap)
	ackW  uint64 // the lane's ack word (sender's heap)
	stage string // the sender's slot image buffer

	sNext    uint64 // the sender's next sequence number
	sAcked   uint64 // the sender's last read of the ack word
	sWriting bool   // the put of message sNext is in progress

	rNext, rGiven, rAcked uint64
	broken                string // the receiver lane's broken error
	lost, corrupt         uint64
	delivered             string // sequence numbers delivered, one byte each
	bad                   string // a property broken by a step
}

type laneModel struct {
	mode  Mode
	depth uint64
	msgs  uint64
	lay   laneLayout
	lane  Lane
	// gate is the sender's acknowledgement rule (safeNeed); the
	// mutation check replaces it.
	gate func(seq, depth uint64) uint64
	torn int // polls that met the expected message's slot invalid or reused
}

func newLaneModel(t testing.TB, mode Mode, depth, msgs int) *laneModel {
	return newLaneModelCap(t, mode, depth, msgs, exCap)
}

func newLaneModelCap(t testing.TB, mode Mode, depth, msgs, capacity int) *laneModel {
	lane := Lane{From: 0, To: 1, Depth: depth, Capacity: capacity}
	lay, err := computeLayout([]Lane{lane}, 2, exLine, InlineMax, 0, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	return &laneModel{mode: mode, depth: uint64(depth), msgs: uint64(msgs), lay: lay.lanes[0], lane: lane, gate: safeNeed}
}

func (m *laneModel) init() laneState {
	return laneState{
		mem:   string(make([]byte, m.lay.slotsOff+int(m.depth)*m.lay.slotSize)),
		stage: string(make([]byte, m.lay.slotSize)),
		sNext: 1, rNext: 1,
	}
}

// chunks are the byte ranges of a slot that the put of an image with
// used bytes of header and payload stores, in pieces of up to 8 bytes:
// what slotPut says Send puts.
func (m *laneModel) chunks(used int) [][2]int {
	head, tail := slotPut(m.lay.slotSize, used)
	var out [][2]int
	for lo := 0; lo < head; lo += 8 {
		out = append(out, [2]int{lo, min(lo+8, head)})
	}
	if tail {
		out = append(out, [2]int{m.lay.slotSize - tailSize, m.lay.slotSize})
	}
	return out
}

// image is the slot image the sender puts for message s.sNext: encodeSlot
// on its stage buffer.
func (m *laneModel) image(s laneState) []byte {
	img := []byte(s.stage)
	encodeSlot(img, s.sNext, exPayload(s.sNext))
	return img
}

func (m *laneModel) steps(s laneState) []explore.Step[laneState] {
	var out []explore.Step[laneState]
	if s.bad != "" {
		return nil
	}
	// The sender.
	if s.sNext <= m.msgs {
		seq := s.sNext
		switch {
		case !s.sWriting && m.mode == Safe && s.sAcked < m.gate(seq, m.depth):
			// waitAck: load the ack word once it reaches the need.
			if need := m.gate(seq, m.depth); s.ackW >= need {
				nx := s
				nx.sAcked = s.ackW
				if nx.sAcked >= seq {
					nx.bad = fmt.Sprintf("the receiver acknowledged %d of %d sent", nx.sAcked, seq-1)
				}
				out = append(out, explore.Step[laneState]{Actor: 0, Label: fmt.Sprintf("sender sees ack %d (needs %d for message %d)", s.ackW, need, seq), Next: nx})
			}
		case !s.sWriting:
			nx := s
			nx.sWriting = true
			nx.stage = string(m.image(s))
			out = append(out, explore.Step[laneState]{Actor: 0, Label: fmt.Sprintf("sender starts the put of message %d", seq), Next: nx})
		default:
			k := slotOf(seq, m.depth)
			base := m.lay.slotsOff + k*m.lay.slotSize
			img := s.stage
			dirty := false
			for _, c := range m.chunks(offPayload + len(exPayload(seq))) {
				lo, hi := base+c[0], base+c[1]
				if s.mem[lo:hi] == img[c[0]:c[1]] {
					continue // storing the same bytes changes nothing
				}
				dirty = true
				nx := s
				nx.mem = s.mem[:lo] + img[c[0]:c[1]] + s.mem[hi:]
				if old := seq - m.depth; seq > m.depth && m.mode == Safe && s.rAcked < old {
					nx.bad = fmt.Sprintf("the sender overwrote slot %d, holding message %d, which the receiver had not acknowledged (acked %d)", k, old, s.rAcked)
				}
				out = append(out, explore.Step[laneState]{Actor: 0, Label: fmt.Sprintf("sender stores bytes %d..%d of slot %d (message %d)", c[0], c[1]-1, k, seq), Next: nx})
			}
			if !dirty {
				nx := s
				nx.pub, nx.sNext, nx.sWriting = seq, seq+1, false
				out = append(out, explore.Step[laneState]{Actor: 0, Label: fmt.Sprintf("sender signals pub = %d", seq), Next: nx})
			}
		}
	}
	// The receiver: Poll (limit Depth, as PollAppend) and Recv's one.
	limits := []int{int(m.depth), 1}
	if m.depth == 1 {
		limits = limits[:1]
	}
	for _, limit := range limits {
		if nx, label, ok := m.poll(s, limit); ok {
			out = append(out, explore.Step[laneState]{Actor: 1, Label: label, Next: nx})
		}
	}
	if m.mode == Safe {
		for a := s.rAcked + 1; a <= s.rGiven; a++ {
			nx := s
			nx.ackW += a - s.rAcked
			nx.rAcked = a
			out = append(out, explore.Step[laneState]{Actor: 1, Label: fmt.Sprintf("receiver acks %d", a), Next: nx})
		}
	}
	return out
}

// poll runs the lane's real poll on the state's memory. It reports
// whether the poll changed anything (a poll that finds nothing is the
// receiver waiting).
func (m *laneModel) poll(s laneState, limit int) (laneState, string, bool) {
	mem := []byte(s.mem)
	pub := s.pub
	if s.rNext <= pub {
		k := slotOf(s.rNext, m.depth)
		base := m.lay.slotsOff + k*m.lay.slotSize
		if v, st := decodeSlot(mem[base : base+m.lay.slotSize]); st != slotOK || v.seq != s.rNext {
			m.torn++
		}
	}
	l := &recvLane{lane: m.lane, depth: m.depth, lay: m.lay, mode: m.mode, mem: mem, pubWord: &pub,
		next: s.rNext, given: s.rGiven, acked: s.rAcked}
	if m.mode == Raw {
		l.scratch = make([]byte, m.lay.slotSize)
	}
	if s.broken != "" {
		l.broken = errors.New(s.broken)
	}
	r := &Ring{mode: m.mode}
	r.lost.Store(s.lost)
	r.corrupt.Store(s.corrupt)
	got, err := l.poll(r, nil, limit)
	nx := s
	nx.rNext, nx.rGiven = l.next, l.given
	nx.lost, nx.corrupt = r.lost.Load(), r.corrupt.Load()
	if l.broken != nil {
		nx.broken = l.broken.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "receiver polls (limit %d): pub %d", limit, s.pub)
	d := []byte(s.delivered)
	for _, msg := range got {
		fmt.Fprintf(&b, ", gets %d", msg.Seq)
		if want := exPayload(msg.Seq); string(msg.Data) != string(want) {
			nx.bad = fmt.Sprintf("message %d delivered with payload %x, sent %x", msg.Seq, msg.Data, want)
		}
		if msg.Origin != 0 {
			nx.bad = fmt.Sprintf("message %d delivered from PE %d", msg.Seq, msg.Origin)
		}
		d = append(d, byte(msg.Seq))
	}
	nx.delivered = string(d)
	if nx.lost != s.lost {
		fmt.Fprintf(&b, ", counts %d lost", nx.lost-s.lost)
	}
	if err != nil {
		fmt.Fprintf(&b, ", error")
		nx.bad = "poll failed: " + err.Error()
	}
	return nx, b.String(), nx != s
}

// check is the safety property, in every state.
func (m *laneModel) check(s laneState) error {
	if s.bad != "" {
		return errors.New(s.bad)
	}
	d := []byte(s.delivered)
	for i, q := range d {
		if m.mode == Safe && uint64(q) != uint64(i+1) {
			return fmt.Errorf("Safe lane delivered %v: message %d in place %d (lost, duplicated or reordered)", d, q, i+1)
		}
		if i > 0 && q <= d[i-1] {
			return fmt.Errorf("lane delivered %v: not in order", d)
		}
		if uint64(q) > s.pub {
			return fmt.Errorf("lane delivered message %d before pub said it was complete (pub %d)", q, s.pub)
		}
	}
	if uint64(len(d))+s.lost+s.corrupt != s.rNext-1 {
		return fmt.Errorf("receiver passed %d messages but delivered %d, lost %d, corrupt %d", s.rNext-1, len(d), s.lost, s.corrupt)
	}
	if s.corrupt != 0 {
		return fmt.Errorf("%d messages judged corrupt, but no byte was damaged", s.corrupt)
	}
	if m.mode == Safe && s.lost != 0 {
		return fmt.Errorf("Safe lane lost %d messages", s.lost)
	}
	return nil
}

// final judges a state where nobody can move.
func (m *laneModel) final(s laneState) error {
	if s.sNext <= m.msgs {
		return fmt.Errorf("deadlock: the sender is stuck before message %d", s.sNext)
	}
	d := []byte(s.delivered)
	switch {
	case m.mode == Safe && uint64(len(d)) != m.msgs:
		return fmt.Errorf("all sent, receiver idle, but only %v of %d delivered", d, m.msgs)
	case m.mode == Raw && (len(d) == 0 || uint64(d[len(d)-1]) != m.msgs):
		return fmt.Errorf("all sent, receiver idle, but the last message %d was not delivered (got %v)", m.msgs, d)
	case uint64(len(d))+s.lost != m.msgs:
		return fmt.Errorf("delivered %d + lost %d != sent %d", len(d), s.lost, m.msgs)
	}
	return nil
}

func (m *laneModel) show(s laneState) string {
	return fmt.Sprintf("sender next %d (acked %d, writing %v), pub %d, ack word %d; receiver next %d, given %d, acked %d, delivered %v, lost %d, corrupt %d",
		s.sNext, s.sAcked, s.sWriting, s.pub, s.ackW, s.rNext, s.rGiven, s.rAcked, []byte(s.delivered), s.lost, s.corrupt)
}

func (m *laneModel) explore(b explore.Bound) (explore.Result, error) {
	return explore.Explore(explore.Model[laneState, laneState]{
		Init:  m.init(),
		Key:   func(s laneState) laneState { return s },
		Steps: m.steps,
		Check: m.check,
		Final: m.final,
		Show:  m.show,
	}, b)
}

// TestExploreLanes: every interleaving of a Safe and a Raw lane of depth
// 1 to 3 carrying up to 6 messages.
func TestExploreLanes(t *testing.T) {
	maxDepth, maxMsgs := 3, 6
	if explore.Deep() {
		maxDepth, maxMsgs = 4, 10
	}
	for _, capacity := range []int{exCap, exCapSplit} {
		for _, mode := range []Mode{Safe, Raw} {
			for depth := 1; depth <= maxDepth; depth++ {
				for msgs := 1; msgs <= maxMsgs; msgs++ {
					m := newLaneModelCap(t, mode, depth, msgs, capacity)
					res, err := m.explore(explore.Bound{States: 20_000_000})
					if err != nil {
						t.Fatalf("%v lane of capacity %d, depth %d, %d messages: %v", mode, capacity, depth, msgs, err)
					}
					if res.Truncated {
						t.Fatalf("%v lane of capacity %d, depth %d, %d messages: %v", mode, capacity, depth, msgs, res)
					}
					if mode == Raw && depth < msgs && m.torn == 0 {
						t.Fatalf("%v lane of capacity %d, depth %d, %d messages: no poll met a slot being overwritten", mode, capacity, depth, msgs)
					}
					t.Logf("%v lane of capacity %d, depth %d, %d messages: %v; %d polls met a torn or overwritten slot", mode, capacity, depth, msgs, res, m.torn)
				}
			}
		}
	}
}

// TestExploreLaneMutants: a Safe sender that skips its ack gate is
// caught, with a step list that shows the overwrite.
func TestExploreLaneMutants(t *testing.T) {
	for depth := 1; depth <= 3; depth++ {
		m := newLaneModel(t, Safe, depth, depth+1)
		m.gate = func(seq, depth uint64) uint64 { return 0 }
		res, err := m.explore(explore.Bound{})
		var f *explore.Failure
		if !errors.As(err, &f) {
			t.Fatalf("depth %d: a Safe lane without its ack gate passed: %v", depth, res)
		}
		if !strings.Contains(f.Err.Error(), "overwrote slot") {
			t.Fatalf("depth %d: found %v, want the overwrite of an unacknowledged slot", depth, f)
		}
		if depth == 2 {
			t.Logf("the mutant's counterexample:\n%v", f)
		}
	}
}

// The explorer's lane layout is the one New computes for such a lane.
func TestExploreLaneLayout(t *testing.T) {
	m := newLaneModel(t, Safe, 2, 1)
	if m.lay.slotSize != 64 || m.lay.inline != exCap || m.lay.bulkSize != 0 {
		t.Fatalf("layout %+v, want 64-byte slots, %d inline bytes, no bulk", m.lay, exCap)
	}
	img := m.image(m.init())
	if binary.LittleEndian.Uint64(img[len(img)-8:]) != ^uint64(1) {
		t.Fatalf("image of message 1 has tail %x", img[len(img)-8:])
	}
	// The two capacities explore both ways of putting a slot.
	for _, c := range []struct {
		capacity int
		split    bool
	}{{exCap, false}, {exCapSplit, true}} {
		m := newLaneModelCap(t, Safe, 2, 1, c.capacity)
		for seq := uint64(1); seq <= 2; seq++ {
			if _, split := slotPut(m.lay.slotSize, offPayload+len(exPayload(seq))); split != c.split {
				t.Fatalf("capacity %d (slot %d bytes), message %d: slotPut splits %v, want %v", c.capacity, m.lay.slotSize, seq, split, c.split)
			}
		}
	}
}
