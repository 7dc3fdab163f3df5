package ring

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// The randomized Comm test: every PE sends random messages (sizes from 0
// to three times the eager limit; tags 0..3, shared by every source, and
// 4+s, private to source s; three element kinds) to every PE, itself
// included, one goroutine per destination; every PE
// receives with random specifications (a source or AnySource, a tag or
// AnyTag), Probes, wrong element types and short buffers, and checks
// every result against a serial model of the matching rules:
//
//   - a receive from s with tag t gets the oldest message from s with
//     tag t not yet received; with AnyTag, the oldest from s;
//   - a receive of a wrong kind or into a short buffer fails and leaves
//     the message for the next receive;
//   - a receive from AnySource gets one of those heads.
//
// The receiver chooses only specifications that some sent message can
// satisfy without waiting for one of its own later receives (a
// rendezvous message may block its sender's later messages to this PE
// until it is received), so a hang is a bug.
//
// Replay: the receives are a schedule computed from the seed alone
// before any message moves (randomSchedule), and every result must be
// the one the schedule names. A wildcard receive's result would depend
// on arrival order when several sources' messages can match it, so the
// schedule receives from AnySource only where no other source has an
// unreceived message of the receive's tag (other sources' messages of
// other tags are queued beside it: private tags make this common), and
// with AnyTag only where one source has messages left. So the same seed
// makes the same calls with the same results, in the same order, on
// every run (TestCommRandomSchedule). Wildcard receives with a real
// choice of source are TestCommAnySource's, whose check accepts any
// legal match. The seed is printed; set GOSHMEM_RING_TEST_SEED to replay
// it.

const envSeed = "GOSHMEM_RING_TEST_SEED"

type rmsg struct {
	tag, kind, elems int // kind: 0 uint8, 1 int32, 2 float64
}

var kindSize = [3]int{1, 4, 8}

// randomPlan is every stream's messages, the same on every PE: plan[s][d]
// is what s sends to d, in order.
func randomPlan(seed uint64, n, eager, count int) [][][]rmsg {
	rng := rand.New(rand.NewPCG(seed, 0x636f6d6d))
	plan := make([][][]rmsg, n)
	for s := range n {
		plan[s] = make([][]rmsg, n)
		for d := range n {
			for range count {
				kind := rng.IntN(3)
				var bytes int
				switch rng.IntN(10) {
				case 0:
					bytes = 0
				case 1:
					bytes = eager + 1 + rng.IntN(2*eager)
				case 2:
					bytes = eager
				case 3, 4:
					bytes = rng.IntN(5000)
				default:
					bytes = rng.IntN(300)
				}
				tag := rng.IntN(6)
				if tag >= 4 {
					tag = 4 + s // s's private tag
				}
				plan[s][d] = append(plan[s][d], rmsg{tag: tag, kind: kind, elems: bytes / kindSize[kind]})
			}
		}
	}
	return plan
}

// sendRandom sends msgs to rank d with element kind each message says.
func sendRandom(c *Comm, me, d int, msgs []rmsg) error {
	for k, m := range msgs {
		buf := fillMsg(make([]byte, m.elems*kindSize[m.kind]), me, m.tag, k)
		var err error
		switch m.kind {
		case 0:
			err = Send(bg(), c, d, m.tag, buf)
		case 1:
			v := make([]int32, m.elems)
			copy(asBytes(v), buf)
			err = Send(bg(), c, d, m.tag, v)
		case 2:
			v := make([]float64, m.elems)
			copy(asBytes(v), buf)
			err = Send(bg(), c, d, m.tag, v)
		}
		if err != nil {
			return fmt.Errorf("Send of message %d to %d: %w", k, d, err)
		}
	}
	return nil
}

// recvKind receives with element kind kind into a buffer of elems
// elements and returns the status and the bytes received.
func recvKind(c *Comm, from, tag, kind, elems int) (Status, []byte, error) {
	var st Status
	var err error
	var b []byte
	switch kind {
	case 0:
		v := make([]uint8, elems)
		st, err = Recv(bg(), c, from, tag, v)
		b = v
	case 1:
		v := make([]int32, elems)
		st, err = Recv(bg(), c, from, tag, v)
		b = asBytes(v)
	case 2:
		v := make([]float64, elems)
		st, err = Recv(bg(), c, from, tag, v)
		b = asBytes(v)
	}
	if err != nil {
		return st, nil, err
	}
	return st, b[:st.Bytes], nil
}

// model is one receiver's view of what is still to come.
type model struct {
	in   [][]rmsg // in[s]: what s sends to this PE
	got  [][]bool
	left int
}

// head is the index of the oldest unreceived message from s with tag
// (any tag: -1), or -1.
func (m *model) head(s, tag int) int {
	for k, g := range m.got[s] {
		if !g && (tag == AnyTag || m.in[s][k].tag == tag) {
			return k
		}
	}
	return -1
}

// available: every rendezvous message before k from s is received.
func (m *model) available(s, k, eager int) bool {
	for j := 0; j < k; j++ {
		if !m.got[s][j] && m.in[s][j].elems*kindSize[m.in[s][j].kind] > eager {
			return false
		}
	}
	return true
}

func randomScenario(pe *shmem.PE) error {
	seed, err := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
	if err != nil {
		return fmt.Errorf("%s: %v", envSeed, err)
	}
	c, err := NewComm(pe.World())
	if err != nil {
		return err
	}
	if err := randomOn(pe, c, seed); err != nil {
		return err
	}
	return closeComm(pe, c)
}

// randomSubScenario is randomScenario on a sub-Comm over the world
// reversed (other ranks, another comm id), while the world Comm it came
// from carries a ring shift on the same tags.
func randomSubScenario(pe *shmem.PE) error {
	seed, err := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
	if err != nil {
		return fmt.Errorf("%s: %v", envSeed, err)
	}
	world, err := NewComm(pe.World())
	if err != nil {
		return err
	}
	n := pe.NPEs()
	rev, err := pe.World().Split(n-1, -1, n)
	if err != nil {
		return err
	}
	sub, err := world.Sub(rev)
	if err != nil {
		return err
	}
	shift := make(chan error, 1)
	go func() {
		me := world.Rank()
		dst := make([]byte, 100)
		for k := range 20 {
			st, err := SendRecv(bg(), world, (me+1)%n, k%4, fillMsg(make([]byte, 100), me, k%4, k), (me+n-1)%n, k%4, dst)
			if err == nil && st.Bytes != 100 {
				err = fmt.Errorf("status %+v", st)
			}
			if err == nil {
				err = checkMsg(dst, (me+n-1)%n, k%4, k)
			}
			if err != nil {
				shift <- fmt.Errorf("the world Comm's shift %d: %w", k, err)
				return
			}
		}
		shift <- nil
	}()
	if err := randomOn(pe, sub, seed); err != nil {
		return err
	}
	if err := <-shift; err != nil {
		return err
	}
	if err := sub.Close(); err != nil {
		return err
	}
	if err := closeComm(pe, world); err != nil {
		return err
	}
	return rev.Destroy()
}

// randomOn runs the randomized exchange on c, checked by the model.
func randomOn(pe *shmem.PE, c *Comm, seed uint64) error {
	n, me, eager := c.Size(), c.Rank(), c.EagerLimit()
	plan := randomPlan(seed, n, eager, scaled(60, 4))
	var wg sync.WaitGroup
	errs := make(chan error, n+1)
	for d := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sendRandom(c, me, d, plan[me][d]); err != nil {
				errs <- err
			}
		}()
	}
	in := make([][]rmsg, n)
	for s := range n {
		in[s] = plan[s][me]
	}
	sched := randomSchedule(seed, me, in, eager)
	if err := receiveRandom(c, in, sched); err != nil {
		// Not waiting for the senders: a rendezvous Send may wait for
		// a receive that will not come. The job fails anyway.
		return fmt.Errorf("seed %d: %w", seed, err)
	}
	return firstErr(&wg, errs)
}

// rstep is one receive of the schedule: Recv(from, tag) into elems
// elements of kind, Probed first if probe, which must get message k of
// source s (a wrong kind or a short buffer fails, and the message is
// then received properly).
type rstep struct {
	from, tag   int
	probe       bool
	kind, elems int
	s, k        int
}

func newModel(in [][]rmsg) *model {
	m := &model{in: in, got: make([][]bool, len(in))}
	for s := range in {
		m.got[s] = make([]bool, len(in[s]))
		m.left += len(in[s])
	}
	return m
}

// randomSchedule is PE me's receives of in (in[s]: what s sends it): a
// pure function of its arguments. Each step names the message it must
// get, so a receive whose result would depend on arrival order (a
// wildcard source with two sources' messages able to match) is never
// chosen.
func randomSchedule(seed uint64, me int, in [][]rmsg, eager int) []rstep {
	m := newModel(in)
	n := len(in)
	rng := rand.New(rand.NewPCG(seed, uint64(me)+1))
	var sched []rstep
	for m.left > 0 {
		// The heads that can come without this PE receiving anything
		// else first.
		type cand struct{ s, k int }
		var ready []cand
		for s := range n {
			for tag := range 4 + n {
				if k := m.head(s, tag); k >= 0 && m.available(s, k, eager) {
					ready = append(ready, cand{s, k})
				}
			}
		}
		if len(ready) == 0 {
			panic(fmt.Sprintf("randomSchedule: %d messages left but none can come", m.left))
		}
		// only: c is the one message (from AnySource, tag) can get.
		// Another source with an unreceived message of that tag rules
		// it out even when the model says that message cannot have been
		// sent yet (behind a rendezvous one): "available" is a lower
		// bound on what has arrived (Send may return early, as a
		// self-send of any size does), not an upper one.
		only := func(c cand, tag int) bool {
			for s := range n {
				if s != c.s && m.head(s, tag) >= 0 {
					return false
				}
			}
			return tag != AnyTag || m.head(c.s, AnyTag) == c.k
		}
		// Which receive: 0, from AnySource; 1, from AnySource with
		// AnyTag (or, where no message is the only match for that,
		// with its tag); 2, from its source with AnyTag where it is the
		// oldest; else from its source with its tag. A wildcard source
		// picks among the messages it can only get (private tags make
		// them common); where there are none, the receive names its
		// source.
		how := rng.IntN(6)
		var pool []cand
		for _, c := range ready {
			if how == 1 && only(c, AnyTag) {
				pool = append(pool, c)
			}
		}
		if how == 1 && len(pool) == 0 {
			how = 0
		}
		for _, c := range ready {
			if how == 0 && only(c, m.in[c.s][c.k].tag) {
				pool = append(pool, c)
			}
		}
		if len(pool) == 0 {
			pool = ready
			if how <= 1 {
				how = 3
			}
		}
		pick := pool[rng.IntN(len(pool))]
		msg := m.in[pick.s][pick.k]
		st := rstep{from: pick.s, tag: msg.tag, s: pick.s, k: pick.k}
		switch how {
		case 0:
			st.from = AnySource
		case 1:
			st.from, st.tag = AnySource, AnyTag
		case 2:
			if m.head(pick.s, AnyTag) == pick.k {
				st.tag = AnyTag
			}
		}
		st.probe = rng.IntN(4) == 0
		// Wildcard sources receive bytes first: another kind is
		// ErrInvalid, and the status says which message it was.
		st.kind, st.elems = msg.kind, msg.elems
		if st.from == AnySource {
			st.kind, st.elems = 0, 3*eager+8
		} else if rng.IntN(8) == 0 {
			st.kind = (st.kind + 1) % 3
		} else if rng.IntN(8) == 0 && st.elems > 0 {
			st.elems--
		}
		sched = append(sched, st)
		m.got[pick.s][pick.k] = true
		m.left--
	}
	return sched
}

// receiveRandom runs the schedule, checking each result against the
// model and against the message the step names.
func receiveRandom(c *Comm, in [][]rmsg, sched []rstep) error {
	m := newModel(in)
	for step, rs := range sched {
		from, tag := rs.from, rs.tag
		want := m.in[rs.s][rs.k]
		wantSt := Status{Source: rs.s, Tag: want.tag, Bytes: want.elems * kindSize[want.kind]}
		what := fmt.Sprintf("step %d: receive (from %d, tag %d) of message %d from %d", step, from, tag, rs.k, rs.s)
		if rs.probe {
			st, err := Probe(bg(), c, from, tag)
			if err != nil {
				return fmt.Errorf("%s: Probe: %w", what, err)
			}
			if err := m.check(st, from, tag, nil); err != nil {
				return fmt.Errorf("%s: Probe: %w", what, err)
			}
			if st != wantSt {
				return fmt.Errorf("%s: Probe: status %+v, want %+v", what, st, wantSt)
			}
		}
		st, data, err := recvKind(c, from, tag, rs.kind, rs.elems)
		badKind, short := want.kind != rs.kind, want.kind == rs.kind && want.elems > rs.elems
		if err != nil || badKind || short {
			if errors.Is(err, shmem.ErrInvalid) != badKind || errors.Is(err, ErrTruncated) != short {
				return fmt.Errorf("%s: %v, but the message is %d elements of kind %d, the receive %d of kind %d", what, err, want.elems, want.kind, rs.elems, rs.kind)
			}
			if st != wantSt {
				return fmt.Errorf("%s: %v with status %+v, want %+v", what, err, st, wantSt)
			}
			// It stays: receive it properly.
			from, tag = st.Source, st.Tag
			st, data, err = recvKind(c, from, tag, want.kind, want.elems)
			if err != nil {
				return fmt.Errorf("%s: the receive after the failed one: %w", what, err)
			}
		}
		if err := m.check(st, from, tag, data); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if st != wantSt {
			return fmt.Errorf("%s: status %+v, want %+v", what, st, wantSt)
		}
		m.got[rs.s][rs.k] = true
		m.left--
	}
	return nil
}

// check compares a status (and, for a receive, its bytes) with the
// model: the message is the oldest unreceived of its source and tag, and
// of its source when the tag was AnyTag.
func (m *model) check(st Status, from, tag int, data []byte) error {
	if st.Source < 0 || st.Source >= len(m.in) || (from != AnySource && st.Source != from) || (tag != AnyTag && st.Tag != tag) {
		return fmt.Errorf("status %+v does not match the receive", st)
	}
	k := m.head(st.Source, st.Tag)
	if k < 0 {
		return fmt.Errorf("status %+v: no such message is left", st)
	}
	if tag == AnyTag && m.head(st.Source, AnyTag) != k {
		return fmt.Errorf("status %+v: with AnyTag the oldest from %d is message %d, not %d", st, st.Source, m.head(st.Source, AnyTag), k)
	}
	want := m.in[st.Source][k]
	if st.Bytes != want.elems*kindSize[want.kind] {
		return fmt.Errorf("status %+v: message %d from %d has %d bytes", st, k, st.Source, want.elems*kindSize[want.kind])
	}
	if data != nil {
		return checkMsg(data, st.Source, st.Tag, k)
	}
	return nil
}

var (
	_ = register("comm-random", randomScenario)
	_ = register("comm-random-sub", randomSubScenario)
)

// TestCommRandomSchedule: the schedule is a function of the seed (a
// replay makes the same receives), receives every message exactly once,
// and still uses wildcard sources and tags often.
func TestCommRandomSchedule(t *testing.T) {
	const eager = 64 << 10
	var any, anyTag, total int
	for seed := range uint64(20) {
		n := 2 + int(seed%2)
		plan := randomPlan(seed, n, eager, 60)
		for me := range n {
			in := make([][]rmsg, n)
			for s := range n {
				in[s] = plan[s][me]
			}
			a, b := randomSchedule(seed, me, in, eager), randomSchedule(seed, me, in, eager)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("seed %d, PE %d: two schedules from one seed differ", seed, me)
			}
			seen := map[[2]int]bool{}
			for _, st := range a {
				if seen[[2]int{st.s, st.k}] {
					t.Fatalf("seed %d, PE %d: message %d from %d scheduled twice", seed, me, st.k, st.s)
				}
				seen[[2]int{st.s, st.k}] = true
				if st.from == AnySource {
					any++
					if st.tag == AnyTag {
						anyTag++
					}
				}
			}
			if len(seen) != n*60 {
				t.Fatalf("seed %d, PE %d: %d of %d messages scheduled", seed, me, len(seen), n*60)
			}
			total += len(a)
		}
	}
	t.Logf("%d receives: %d from AnySource, %d of them with AnyTag", total, any, anyTag)
	if any < total/20 || anyTag == 0 {
		t.Errorf("%d of %d receives from AnySource (%d with AnyTag): the uniqueness rule leaves too few", any, total, anyTag)
	}
}

func TestCommRandom(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(envSeed); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", envSeed, s, err)
		}
	}
	t.Logf("seed %d (replay: %s=%d go test -run TestCommRandom ./ring/)", seed, envSeed, seed)
	for _, r := range routes {
		for _, n := range []int{2, 3} {
			for _, name := range []string{"comm-random", "comm-random-sub"} {
				t.Run(r.name+"/"+strconv.Itoa(n)+"/"+name, func(t *testing.T) {
					err := r.run(t, n, name, scenarios.Get(name), []string{envSeed + "=" + strconv.FormatUint(seed, 10)})
					if err != nil {
						t.Fatalf("seed %d: %v", seed, err)
					}
				})
			}
		}
	}
}
