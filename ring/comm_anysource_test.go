package ring

import (
	"fmt"
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// comm-anysource: AnySource with several senders. Every rank, rank 0
// itself included (from a goroutine), sends rank 0 anySourceCount eager
// messages with tags 0 and 1 in turn, then two rendezvous messages with
// tag 2, then one with tag 3. Rank 0 first Probes each source for its
// first message, so that several sources' messages are queued when the
// wildcard receives begin; then it receives every tag-1 message with
// Recv(AnySource, 1), then everything else with Recv(AnySource, AnyTag),
// Probing (AnySource, AnyTag) before some receives and receiving the
// probed message by its source and tag. Which source a wildcard receive
// gets depends on arrival order, so the check is the serial model of
// comm_random_test.go, which accepts any legal match: the message must
// be the oldest unreceived of its source and tag (of its source, under
// AnyTag), and in the end every message is received exactly once.
const anySourceCount = 40

// anySourcePlan is what each rank sends to rank 0.
func anySourcePlan(s, eager int) []rmsg {
	var p []rmsg
	for k := range anySourceCount {
		p = append(p, rmsg{tag: k % 2, elems: (k*13 + s*5) % 300})
	}
	return append(p, rmsg{tag: 2, elems: eager + 1 + s}, rmsg{tag: 2, elems: eager + 100 + s}, rmsg{tag: 3, elems: 3})
}

var _ = register("comm-anysource", func(pe *shmem.PE) error {
	c, err := NewComm(pe.World())
	if err != nil {
		return err
	}
	me, n, eager := c.Rank(), c.Size(), c.EagerLimit()
	sent := make(chan error, 1)
	go func() { sent <- sendRandom(c, me, 0, anySourcePlan(me, eager)) }()
	if me == 0 {
		if err := anySourceReceive(c, n, eager); err != nil {
			return err
		}
	}
	if err := <-sent; err != nil {
		return err
	}
	return closeComm(pe, c)
})

func TestCommAnySource(t *testing.T) { each(t, "comm-anysource", 3, 5) }

// anySourceReceive is rank 0's side of comm-anysource.
func anySourceReceive(c *Comm, n, eager int) error {
	m := &model{in: make([][]rmsg, n), got: make([][]bool, n)}
	for s := range n {
		m.in[s] = anySourcePlan(s, eager)
		m.got[s] = make([]bool, len(m.in[s]))
		m.left += len(m.in[s])
	}
	for s := range n {
		st, err := Probe(bg(), c, s, 0)
		if err != nil || st != (Status{Source: s, Tag: 0, Bytes: m.in[s][0].elems}) {
			return fmt.Errorf("Probe(%d, 0): %+v, %v", s, st, err)
		}
	}
	buf := make([]byte, eager+100+n)
	// recv receives with (from, tag) and checks the result against m.
	recv := func(what string, from, tag int) (Status, error) {
		st, err := Recv(bg(), c, from, tag, buf)
		if err != nil {
			return st, fmt.Errorf("%s: Recv(%d, %d): %w", what, from, tag, err)
		}
		if err := m.check(st, from, tag, buf[:st.Bytes]); err != nil {
			return st, fmt.Errorf("%s: Recv(%d, %d): %w", what, from, tag, err)
		}
		m.got[st.Source][m.head(st.Source, st.Tag)] = true
		m.left--
		return st, nil
	}
	for i := range n * anySourceCount / 2 {
		if _, err := recv(fmt.Sprintf("tag-1 message %d", i), AnySource, 1); err != nil {
			return err
		}
	}
	for i := 0; m.left > 0; i++ {
		what := fmt.Sprintf("message %d of the rest", i)
		if i%5 == 0 {
			st, err := Probe(bg(), c, AnySource, AnyTag)
			if err != nil {
				return fmt.Errorf("%s: Probe(any, any): %w", what, err)
			}
			if err := m.check(st, AnySource, AnyTag, nil); err != nil {
				return fmt.Errorf("%s: Probe(any, any): %w", what, err)
			}
			got, err := recv(what+", probed", st.Source, st.Tag)
			if err != nil {
				return err
			}
			if got != st {
				return fmt.Errorf("%s: Probe said %+v, the Recv of its source and tag got %+v", what, st, got)
			}
			continue
		}
		if _, err := recv(what, AnySource, AnyTag); err != nil {
			return err
		}
	}
	return nil
}
