package ring

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// The randomized Comm test: every PE sends random messages (sizes from 0
// to three times the eager limit, tags 0..3, three element kinds) to
// every PE, itself included, one goroutine per destination; every PE
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
// rendezvous message blocks its sender's later messages to this PE until
// it is received), so a hang is a bug. The seed is printed; set
// GOSHMEM_RING_TEST_SEED to replay it (wildcard receives depend on
// arrival order, so a replay has the same messages and the same
// choices where the results agree).

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
				plan[s][d] = append(plan[s][d], rmsg{tag: rng.IntN(4), kind: kind, elems: bytes / kindSize[kind]})
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
	m := &model{in: make([][]rmsg, n), got: make([][]bool, n)}
	for s := range n {
		m.in[s], m.got[s] = plan[s][me], make([]bool, len(plan[s][me]))
		m.left += len(plan[s][me])
	}
	rng := rand.New(rand.NewPCG(seed, uint64(me)+1))
	if err := receiveRandom(c, m, rng, eager); err != nil {
		// Not waiting for the senders: a rendezvous Send may wait for
		// a receive that will not come. The job fails anyway.
		return fmt.Errorf("seed %d: %w", seed, err)
	}
	return firstErr(&wg, errs)
}

// receiveRandom receives everything m expects with random
// specifications, checking each result against m.
func receiveRandom(c *Comm, m *model, rng *rand.Rand, eager int) error {
	n := len(m.in)
	for step := 0; m.left > 0; step++ {
		// The heads that can come without this PE receiving anything
		// else first.
		type cand struct{ s, k int }
		var ready []cand
		for s := range n {
			for tag := range 4 {
				if k := m.head(s, tag); k >= 0 && m.available(s, k, eager) {
					ready = append(ready, cand{s, k})
				}
			}
		}
		if len(ready) == 0 {
			return fmt.Errorf("step %d: %d messages left but none can come (test bug)", step, m.left)
		}
		pick := ready[rng.IntN(len(ready))]
		msg := m.in[pick.s][pick.k]
		from, tag := pick.s, msg.tag
		switch rng.IntN(6) {
		case 0:
			from = AnySource
		case 1:
			from, tag = AnySource, AnyTag
		case 2:
			if m.head(pick.s, AnyTag) == pick.k {
				tag = AnyTag
			}
		}
		what := fmt.Sprintf("step %d: receive (from %d, tag %d)", step, from, tag)
		if rng.IntN(4) == 0 {
			st, err := Probe(bg(), c, from, tag)
			if err != nil {
				return fmt.Errorf("%s: Probe: %w", what, err)
			}
			if err := m.check(st, from, tag, nil); err != nil {
				return fmt.Errorf("%s: Probe: %w", what, err)
			}
		}
		// Wildcard sources receive bytes first: another kind is
		// ErrInvalid, and the status says which message it was.
		kind, elems := msg.kind, msg.elems
		if from == AnySource {
			kind, elems = 0, 3*eager+8
		} else if rng.IntN(8) == 0 {
			kind = (kind + 1) % 3
		} else if rng.IntN(8) == 0 && elems > 0 {
			elems--
		}
		st, data, err := recvKind(c, from, tag, kind, elems)
		if err != nil {
			if !errors.Is(err, shmem.ErrInvalid) && !errors.Is(err, ErrTruncated) {
				return fmt.Errorf("%s: %w", what, err)
			}
			k := m.head(st.Source, st.Tag)
			if k < 0 {
				return fmt.Errorf("%s: %v with status %+v, which names no message", what, err, st)
			}
			want := m.in[st.Source][k]
			if errors.Is(err, shmem.ErrInvalid) == (want.kind == kind) ||
				errors.Is(err, ErrTruncated) != (want.kind == kind && want.elems > elems) {
				return fmt.Errorf("%s: %v, but the message is %d elements of kind %d, the receive %d of kind %d", what, err, want.elems, want.kind, elems, kind)
			}
			// It stays: receive it properly.
			from, tag = st.Source, st.Tag
			st, data, err = recvKind(c, from, tag, want.kind, want.elems)
			if err != nil {
				return fmt.Errorf("%s: the receive after %v: %w", what, err, err)
			}
		}
		if err := m.check(st, from, tag, data); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		m.got[st.Source][m.head(st.Source, st.Tag)] = true
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
