package ring

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/goshmem/goshmem/verify/explore"
)

// The exhaustive check of Comm's matching, driven through the engine's
// own code: an arrival is engine.handle on the lane message a Send makes
// (putEager's header and the payload; handle parses it with parseHeader
// and offers it with Comm.offer), a receive is what recv does under the
// gate before it waits (Comm.search, then onto the posted list), and
// every match is request.matches. The engine's matching state (the
// unexpected queue and the posted receives) is rebuilt from the model's
// state before each step and read back after it.
//
// Actors: senders 1..S (ranks of a Comm of S+1 members; the receiver is
// rank 0) each send their messages in order; actor 0 takes lane
// messages, one handle per step, from any lane whose head has arrived
// (the lanes' own order is what TestExploreLanes proves, so a lane is a
// FIFO here); actors 100+r are the receive goroutines, one Recv each,
// so the receives are posted in every order and interleave with the
// arrivals in every way. A step under the gate is one step: the gate
// (engine.mu) makes a handle or a search atomic for the matching state.
//
// Properties: a receive gets only a message that matches its source and
// tag, with the right Status; no message is received twice; a message
// is not received while an earlier message of the same source that the
// receive also matches is unreceived (non-overtaking per source and
// tag); a message is not given to a receive while an earlier posted
// receive that matches it waits; in no state does a posted receive wait
// while a message that matches it is queued; at the end every message is
// received or queued, exactly once, and every receive that did not
// complete matches nothing queued.

// commMsg is message id's sender and tag.
type commMsg struct{ src, tag int }

// commSpec is a receive's source and tag (AnySource, AnyTag allowed);
// probe makes it a Probe.
type commSpec struct {
	from, tag int
	probe     bool
}

func (r commSpec) matches(m commMsg) bool {
	return (r.from == AnySource || r.from == m.src) && (r.tag == AnyTag || r.tag == m.tag)
}

const commMaxRecvs, commMaxSenders, commMaxMsgs = 8, 3, 8

type commState struct {
	sent   [commMaxSenders + 1]uint8 // messages each sender has sent
	lane   [commMaxSenders + 1]uint8 // of those, taken by the receiver (handle)
	unexp  string                    // queued message ids, in the engine's order
	posted string                    // posted receive indices, in the engine's order
	order  string                    // receive indices in the order they were posted
	rst    [commMaxRecvs]uint8       // 0 not yet called, 1 posted, 2 completed
	got    [commMaxRecvs]int8        // completed: the message id received
	bad    string
}

type commModel struct {
	senders int
	tags    [][]int // tags[s-1]: sender s's messages, in order
	recvs   []commSpec
	msgs    []commMsg // by id
	first   []int     // first[s]: id of sender s's first message
	kind    uint8
	// ignoreSource turns the mutant on for the model's steps (the
	// engine's matching then ignores a receive's source).
	ignoreSource bool
}

func newCommModel(tags [][]int, recvs []commSpec) *commModel {
	m := &commModel{senders: len(tags), tags: tags, recvs: recvs, kind: uint8(reflect.Uint8), first: make([]int, len(tags)+1)}
	for s, ts := range tags {
		m.first[s+1] = len(m.msgs)
		for _, t := range ts {
			m.msgs = append(m.msgs, commMsg{src: s + 1, tag: t})
		}
	}
	return m
}

// build makes an engine and its Comm holding s's matching state, and
// the posted requests by receive index.
func (m *commModel) build(s commState) (*engine, *Comm, []*request) {
	n := m.senders + 1
	e := &engine{me: 0, npes: n, cap: 1 << 30, comms: map[uint32]*Comm{}, lanes: make([]inLane, n), rdvIn: map[rdvKey]*entry{}}
	c := &Comm{e: e, me: 0, n: n, world: make([]int, n), rank: make([]int, n)}
	for i := range n {
		c.world[i], c.rank[i] = i, i
	}
	e.comms[0] = c
	for _, id := range []byte(s.unexp) {
		msg := m.msgs[id]
		c.unexp = append(c.unexp, &entry{src: msg.src, wsrc: msg.src, tag: msg.tag, kind: m.kind, bytes: int(id) + 1, data: commPayload(int(id))})
		e.queued += int(id) + 1 + entryCost
	}
	reqs := make([]*request, len(m.recvs))
	for _, r := range []byte(s.posted) {
		reqs[r] = m.request(c, int(r))
		reqs[r].posted = true
		c.posted = append(c.posted, reqs[r])
	}
	return e, c, reqs
}

func (m *commModel) request(c *Comm, r int) *request {
	sp := m.recvs[r]
	q := &request{c: c, from: sp.from, tag: sp.tag, probe: sp.probe}
	if !sp.probe {
		q.kind, q.size, q.dst = m.kind, 1, bytes.Repeat([]byte{0xFF}, commMaxMsgs)
	}
	return q
}

// commPayload is message id's payload: id+1 bytes of id, so that a
// Status (its Bytes) names the message too.
func commPayload(id int) []byte { return bytes.Repeat([]byte{byte(id)}, id+1) }

// read takes the matching state back from the engine after a step,
// judging every receive that completed in it.
func (m *commModel) read(s commState, c *Comm, reqs []*request, label *strings.Builder, arr int) commState {
	nx := s
	var u []byte
	for _, ent := range c.unexp {
		u = append(u, ent.data[0])
	}
	nx.unexp = string(u)
	var p []byte
	for _, q := range c.posted {
		for r, x := range reqs {
			if x == q {
				p = append(p, byte(r))
			}
		}
		if q.blocked {
			nx.bad = "an eager message left a receive blocked"
		}
	}
	nx.posted = string(p)
	var done []int
	for r, q := range reqs {
		if q != nil && q.done {
			nx.rst[r] = 2
			done = append(done, r)
		}
	}
	for _, r := range done {
		q := reqs[r]
		if q.posted {
			nx.bad = fmt.Sprintf("receive %d completed but is still posted", r)
		}
		id := q.st.Bytes - 1
		what := "gets"
		if m.recvs[r].probe {
			what = "probes"
		} else if len(q.dst) > id && id >= 0 && (q.dst[0] != byte(id) || q.dst[id] != byte(id)) {
			nx.bad = fmt.Sprintf("receive %d got status %+v but payload %v", r, q.st, q.dst)
		}
		nx.got[r] = int8(id)
		fmt.Fprintf(label, ", receive %d %v %s message %d", r, m.recvs[r], what, id)
		if q.err != nil {
			nx.bad = fmt.Sprintf("receive %d failed: %v", r, q.err)
			continue
		}
		if bad := m.judge(s, nx, r, id, q.st, arr); bad != "" {
			nx.bad = bad
		}
	}
	return nx
}

// judge is the property for receive r getting (or probing) message id
// in the step from s to nx, in which message arr (or -1) arrived.
func (m *commModel) judge(s, nx commState, r, id int, st Status, arr int) string {
	if id < 0 || id >= len(m.msgs) {
		return fmt.Sprintf("receive %d got %d, no message of the run", r, id)
	}
	msg, sp := m.msgs[id], m.recvs[r]
	if !sp.matches(msg) {
		return fmt.Sprintf("receive %d (from %d, tag %d) got message %d (from %d, tag %d), which does not match it", r, sp.from, sp.tag, id, msg.src, msg.tag)
	}
	if st != (Status{Source: msg.src, Tag: msg.tag, Bytes: id + 1}) {
		return fmt.Sprintf("receive %d got message %d with status %+v", r, id, st)
	}
	if m.received(s, id) {
		return fmt.Sprintf("receive %d got message %d, already received", r, id)
	}
	if sp.probe && strings.IndexByte(s.unexp, byte(id)) < 0 && id != arr {
		return fmt.Sprintf("probe %d saw message %d, which is neither queued nor arriving", r, id)
	}
	if !sp.probe {
		for q := range m.recvs {
			if q != r && !m.recvs[q].probe && nx.rst[q] == 2 && int(nx.got[q]) == id && s.rst[q] != 2 {
				return fmt.Sprintf("message %d received twice in one step (by receives %d and %d)", id, q, r)
			}
		}
	}
	for e := m.first[msg.src]; e < id; e++ {
		if sp.matches(m.msgs[e]) && !m.received(s, e) {
			return fmt.Sprintf("receive %d (from %d, tag %d) got message %d of sender %d, overtaking its earlier message %d (tag %d), which it also matches", r, sp.from, sp.tag, id, msg.src, e, m.msgs[e].tag)
		}
	}
	for _, q := range []byte(s.order) {
		if int(q) == r {
			break
		}
		if nx.rst[q] == 1 && m.recvs[q].matches(msg) {
			return fmt.Sprintf("message %d went to receive %d while receive %d, posted earlier and matching it, waits", id, r, q)
		}
	}
	return ""
}

func (m *commModel) received(s commState, id int) bool {
	for q := range m.recvs {
		if !m.recvs[q].probe && s.rst[q] == 2 && int(s.got[q]) == id {
			return true
		}
	}
	return false
}

func (m *commModel) steps(s commState) []explore.Step[commState] {
	if s.bad != "" {
		return nil
	}
	if m.ignoreSource {
		ignoreSource = true
		defer func() { ignoreSource = false }()
	}
	var out []explore.Step[commState]
	// Senders: a send puts the message into its lane. It only appends to
	// the lane's tail, which nothing else touches: it commutes with every
	// other step and is invisible to the properties.
	for snd := 1; snd <= m.senders; snd++ {
		if int(s.sent[snd]) < len(m.tags[snd-1]) {
			nx := s
			nx.sent[snd]++
			id := m.first[snd] + int(s.sent[snd])
			out = append(out, explore.Step[commState]{Actor: snd, Label: fmt.Sprintf("sender %d sends message %d (tag %d)", snd, id, m.msgs[id].tag), Next: nx, Local: true})
		}
	}
	// The receiver takes the head of a lane.
	for snd := 1; snd <= m.senders; snd++ {
		if s.lane[snd] == s.sent[snd] {
			continue
		}
		id := m.first[snd] + int(s.lane[snd])
		e, c, reqs := m.build(s)
		pay := commPayload(id)
		b := make([]byte, hdrEager, hdrEager+len(pay))
		putEager(b, m.kind, 0, m.msgs[id].tag, len(pay))
		b = append(b, pay...)
		var label strings.Builder
		fmt.Fprintf(&label, "receiver takes message %d from sender %d's lane", id, snd)
		ok, err := e.handle(snd, Message{Origin: snd, Seq: uint64(s.lane[snd]) + 1, Data: b})
		nx := m.read(s, c, reqs, &label, id)
		nx.lane[snd]++
		if err != nil || !ok {
			nx.bad = fmt.Sprintf("handle of message %d: %v, %v", id, ok, err)
		}
		out = append(out, explore.Step[commState]{Actor: 0, Label: label.String(), Next: nx})
	}
	// Receive goroutines: search the queue, post if nothing matches.
	for r := range m.recvs {
		if s.rst[r] != 0 {
			continue
		}
		e, c, reqs := m.build(s)
		q := m.request(c, r)
		reqs[r] = q
		e.cur = q
		var label strings.Builder
		fmt.Fprintf(&label, "receive %d (from %d, tag %d) searches the queue", r, m.recvs[r].from, m.recvs[r].tag)
		settled, err := c.search(q)
		if err == nil && !settled {
			q.posted = true
			c.posted = append(c.posted, q)
			label.WriteString(" and is posted")
		}
		nx := m.read(s, c, reqs, &label, -1)
		nx.order += string(rune(r))
		if !q.done {
			nx.rst[r] = 1
		}
		if err != nil {
			nx.bad = fmt.Sprintf("search of receive %d: %v", r, err)
		}
		if settled != q.done {
			nx.bad = fmt.Sprintf("search of receive %d settled %v, done %v", r, settled, q.done)
		}
		out = append(out, explore.Step[commState]{Actor: 100 + r, Label: label.String(), Next: nx})
	}
	return out
}

func (m *commModel) check(s commState) error {
	if s.bad != "" {
		return errors.New(s.bad)
	}
	for _, r := range []byte(s.posted) {
		for _, id := range []byte(s.unexp) {
			if m.recvs[r].matches(m.msgs[id]) {
				return fmt.Errorf("receive %d %v waits while message %d %v, which matches it, is queued", r, m.recvs[r], id, m.msgs[id])
			}
		}
	}
	return nil
}

func (m *commModel) final(s commState) error {
	count := make([]int, len(m.msgs))
	for _, id := range []byte(s.unexp) {
		count[id]++
	}
	for r := range m.recvs {
		switch s.rst[r] {
		case 0:
			return fmt.Errorf("receive %d never ran", r)
		case 2:
			if !m.recvs[r].probe {
				count[s.got[r]]++
			}
		}
	}
	for id, c := range count {
		if c != 1 {
			return fmt.Errorf("message %d is received or queued %d times, want once", id, c)
		}
	}
	return nil
}

func (m *commModel) show(s commState) string {
	return fmt.Sprintf("sent %v, taken %v, queued %v, posted %v, receives %v got %v", s.sent[1:m.senders+1], s.lane[1:m.senders+1], []byte(s.unexp), []byte(s.posted), s.rst[:len(m.recvs)], s.got[:len(m.recvs)])
}

func (m *commModel) explore(checkLocal bool) (explore.Result, error) {
	return explore.Explore(explore.Model[commState, commState]{
		Init:       commState{},
		Key:        func(s commState) commState { return s },
		Steps:      m.steps,
		Check:      m.check,
		Final:      m.final,
		Show:       m.show,
		CheckLocal: checkLocal,
	}, explore.Bound{States: 20_000_000})
}

const anySrc = AnySource

// commCases are the explored configurations: senders' tags, and the
// receives.
var commCases = []struct {
	name  string
	tags  [][]int
	recvs []commSpec
	deep  bool
}{
	{"2 senders, 2 messages, 2 receives", [][]int{{0}, {0}}, []commSpec{{anySrc, 0, false}, {1, AnyTag, false}}, false},
	{"2 senders, 4 messages, 4 receives", [][]int{{0, 1}, {1, 0}}, []commSpec{{1, 1, false}, {anySrc, 0, false}, {2, AnyTag, false}, {anySrc, AnyTag, false}}, false},
	{"2 senders, 6 messages, 6 receives", [][]int{{0, 0, 1}, {1, 0, 1}}, []commSpec{{1, 0, false}, {anySrc, 0, false}, {2, AnyTag, false}, {anySrc, AnyTag, false}, {1, AnyTag, false}, {anySrc, 1, false}}, false},
	{"3 senders, 6 messages, 5 receives", [][]int{{0, 1}, {1, 1}, {0, 0}}, []commSpec{{anySrc, AnyTag, false}, {1, AnyTag, false}, {anySrc, 1, false}, {3, 0, false}, {2, 1, false}}, false},
	{"3 senders, 6 messages, 6 receives", [][]int{{0, 1}, {1, 1}, {0, 0}}, []commSpec{{anySrc, AnyTag, false}, {1, AnyTag, false}, {anySrc, 1, false}, {3, 0, false}, {2, AnyTag, false}, {anySrc, 0, false}}, false},
	{"2 senders, 4 messages, 4 receives, 2 probes", [][]int{{0, 1}, {1, 0}}, []commSpec{{1, 1, false}, {anySrc, 0, false}, {2, AnyTag, false}, {anySrc, AnyTag, false}, {anySrc, 1, true}, {2, 0, true}}, false},
	{"3 senders, 6 messages, 5 receives, 1 probe", [][]int{{0, 1}, {1, 1}, {0, 0}}, []commSpec{{anySrc, AnyTag, false}, {1, AnyTag, false}, {anySrc, 1, false}, {3, 0, false}, {2, 1, false}, {anySrc, 0, true}}, false},
	{"3 senders, 7 messages, 7 receives", [][]int{{0, 1}, {1, 1}, {0, 0, 1}}, []commSpec{{anySrc, AnyTag, false}, {1, AnyTag, false}, {anySrc, 1, false}, {3, 0, false}, {2, AnyTag, false}, {anySrc, 0, false}, {3, AnyTag, false}}, true},
}

// TestExploreCommMatching: every order of arrivals and receives in the
// configurations above (the last with GOSHMEM_EXPLORE_DEEP=1; under
// the race detector the first two only).
func TestExploreCommMatching(t *testing.T) {
	for i, tc := range commCases {
		if tc.deep && !explore.Deep() {
			continue
		}
		if explore.Quick() && i >= 2 {
			continue
		}
		m := newCommModel(tc.tags, tc.recvs)
		res, err := m.explore(i < 2)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if res.Truncated {
			t.Fatalf("%s: %v", tc.name, res)
		}
		t.Logf("%s: %v", tc.name, res)
	}
}

// TestExploreCommMutant: a Comm whose matching ignores the receive's
// source is caught, with a step list that ends in the wrong delivery.
func TestExploreCommMutant(t *testing.T) {
	tc := commCases[1]
	m := newCommModel(tc.tags, tc.recvs)
	m.ignoreSource = true
	_, err := m.explore(false)
	var f *explore.Failure
	if !errors.As(err, &f) {
		t.Fatalf("a Comm that ignores the source passed: %v", err)
	}
	if !strings.Contains(f.Err.Error(), "does not match") {
		t.Fatalf("found %v, want a message given to a receive it does not match", f)
	}
	t.Logf("the mutant's counterexample:\n%v", f)
	if ignoreSource {
		t.Fatal("the mutant stayed on")
	}
}
