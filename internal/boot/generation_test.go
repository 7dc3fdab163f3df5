package boot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/errs"
)

// genPart is rank's part of round in generation gen.
func genPart(gen, round, rank int) []byte {
	return []byte(fmt.Sprintf("g%d-r%d-k%d", gen, round, rank))
}

// dialErr dials rank without failing the test, for use off the test
// goroutine.
func (j *testJob) dialErr(rank int) (*Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	return Dial(ctx, j.addr, j.id, j.key, rank, j.size)
}

// checkGenRound runs one Allgather of generation gen and checks its result.
func checkGenRound(c *Client, gen, round int) error {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	got, err := c.Allgather(ctx, genPart(gen, round, c.Rank()))
	if err != nil {
		return fmt.Errorf("generation %d round %d rank %d: %w", gen, round, c.Rank(), err)
	}
	if len(got) != c.Size() {
		return fmt.Errorf("generation %d round %d rank %d: %d parts", gen, round, c.Rank(), len(got))
	}
	for k, p := range got {
		if !bytes.Equal(p, genPart(gen, round, k)) {
			return fmt.Errorf("generation %d round %d rank %d: part %d = %q", gen, round, c.Rank(), k, p)
		}
	}
	return nil
}

// waitFor polls cond (under the server's lock) until it holds.
func waitFor(t *testing.T, s *Server, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(wait); ; time.Sleep(2 * time.Millisecond) {
		s.mu.Lock()
		ok := cond()
		s.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func held(s *Server, rank int) bool {
	p := s.next[rank]
	return p != nil && p.held != nil
}

// TestGenerations: every rank runs two Init/Finalize cycles of two
// rounds each, staggered so that rank 0's generation-2 part reaches the
// server long before ranks 1 and 2 have left generation 1, and rank 1's
// before rank 2 has left.
func TestGenerations(t *testing.T) {
	const n = 3
	j := startJob(t, n)
	var (
		gen1Done sync.WaitGroup // every rank has its generation-1 results
		release  [n]chan struct{}
		wg       sync.WaitGroup
	)
	for r := range release {
		release[r] = make(chan struct{})
	}
	released := make([]bool, n)
	free := func(r int) {
		if !released[r] {
			released[r] = true
			close(release[r])
		}
	}
	defer func() { // on failure, let the ranks finish
		for r := range n {
			free(r)
		}
		wg.Wait()
	}()
	free(0)
	gen1Done.Add(n)
	errc := make(chan error, 2*n)
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for gen := 1; gen <= 2; gen++ {
				c, err := j.dialErr(r)
				if err != nil {
					errc <- fmt.Errorf("generation %d rank %d: Dial: %w", gen, r, err)
					if gen == 1 {
						gen1Done.Done()
					}
					return
				}
				for round := 1; round <= 2; round++ {
					if err := checkGenRound(c, gen, round); err != nil {
						errc <- err
					}
				}
				if gen == 1 {
					gen1Done.Done()
					<-release[r] // stagger the leaving
				}
				c.Close()
			}
		}()
	}

	// Rank 0 leaves at once, rejoins and sends its generation-2 part
	// while ranks 1 and 2 are still in generation 1.
	gen1Done.Wait()
	waitFor(t, j.s, "rank 0's early part", func() bool { return held(j.s, 0) })
	j.s.mu.Lock()
	if j.s.gen != 1 || j.s.state[1] != rankJoined || j.s.state[2] != rankJoined {
		t.Errorf("generation %d, states %v: ranks 1 and 2 should still be in generation 1", j.s.gen, j.s.state)
	}
	j.s.mu.Unlock()
	time.Sleep(50 * time.Millisecond) // the part is held, not counted
	free(1)
	waitFor(t, j.s, "rank 1's early part", func() bool { return held(j.s, 1) })
	free(2)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}

	joins := map[[2]int]bool{}
	for _, e := range drainEvents(j.s) {
		if e.Kind != EventJoined {
			t.Errorf("unexpected event %v", e)
			continue
		}
		joins[[2]int{e.Rank, int(e.Gen)}] = true
	}
	for r := range n {
		for gen := 1; gen <= 2; gen++ {
			if !joins[[2]int{r, gen}] {
				t.Errorf("no EventJoined for rank %d generation %d", r, gen)
			}
		}
	}
	j.s.mu.Lock()
	defer j.s.mu.Unlock()
	if j.s.gen != 3 || j.s.failure != nil {
		t.Errorf("after two generations: generation %d, failure %v", j.s.gen, j.s.failure)
	}
}

func TestRejoinRefused(t *testing.T) {
	j := startJob(t, 2)
	cs := j.dialAll(t)
	// Rank 0's connection is open: a second one is a duplicate.
	if _, err := Dial(context.Background(), j.addr, j.id, j.key, 0, 2); !errors.Is(err, errs.Auth) || !strings.Contains(err.Error(), "already joined") {
		t.Fatalf("rejoin while connected: %v, want errs.Auth (already joined)", err)
	}
	gatherAll(t, cs, 1)

	// After Bye rank 0 may join the next generation, once.
	cs[0].Close()
	c0 := j.dial(t, 0)
	if _, err := Dial(context.Background(), j.addr, j.id, j.key, 0, 2); !errors.Is(err, errs.Auth) || !strings.Contains(err.Error(), "generation 2") {
		t.Fatalf("second rejoin: %v, want errs.Auth (already joined generation 2)", err)
	}
	cs[1].Close() // generation 1 is over; generation 2 starts with rank 0

	c1 := j.dial(t, 1)
	gatherAll(t, []*Client{c0, c1}, 1)
	gatherAll(t, []*Client{c0, c1}, 2)
	for _, e := range drainEvents(j.s) {
		if e.Kind != EventJoined {
			t.Errorf("unexpected event %v", e)
		}
	}
}

func TestPeerLostInGeneration2(t *testing.T) {
	j := startJob(t, 3)
	cs := j.dialAll(t)
	gatherAll(t, cs, 1)
	for _, c := range cs {
		c.Close()
	}
	cs = j.dialAll(t)
	gatherAll(t, cs, 1)

	errc := make(chan error, 2)
	for _, c := range cs[:2] {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			_, err := c.Allgather(ctx, []byte("x"))
			errc <- err
		}()
	}
	waitFor(t, j.s, "ranks 0 and 1 in round 2", func() bool { return j.s.arrived == 2 })
	drop(cs[2])
	for range 2 {
		if err := <-errc; !errors.Is(err, errs.PeerLost) || !strings.Contains(err.Error(), "rank 2") {
			t.Fatalf("pending round: %v, want errs.PeerLost naming rank 2", err)
		}
	}
	e := nextEvent(t, j.s, func(e Event) bool { return e.Kind != EventJoined })
	if e.Kind != EventLost || e.Rank != 2 || e.Gen != 2 {
		t.Fatalf("event %v (generation %d), want EventLost for rank 2 in generation 2", e, e.Gen)
	}
	// A lost rank never joins again.
	if _, err := Dial(context.Background(), j.addr, j.id, j.key, 2, 3); !errors.Is(err, errs.Auth) || !strings.Contains(err.Error(), "was lost") {
		t.Fatalf("rejoin of a lost rank: %v", err)
	}
}

// TestLostWhileWaiting: a rank lost before its generation started fails
// the job at once, and a timed-out early part reports the held parts.
func TestLostWhileWaiting(t *testing.T) {
	j := startJob(t, 3)
	cs := j.dialAll(t)
	gatherAll(t, cs, 1)
	cs[0].Close()
	c0 := j.dial(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := c0.Allgather(ctx, []byte("early"))
	if !errors.Is(err, errs.Timeout) || !strings.Contains(err.Error(), "1 of 3 ranks had arrived") || !strings.Contains(err.Error(), "missing ranks [1 2]") {
		t.Fatalf("early part timed out: %v", err)
	}

	drop(c0)
	for _, c := range cs[1:] {
		select {
		case <-c.lostC:
		case <-time.After(wait):
			t.Fatalf("rank %d was not told of the loss", c.Rank())
		}
		if _, err := c.Allgather(context.Background(), nil); !errors.Is(err, errs.PeerLost) || !strings.Contains(err.Error(), "rank 0") || !strings.Contains(err.Error(), "without Bye") {
			t.Fatalf("rank %d after rank 0 was lost waiting for generation 2: %v", c.Rank(), err)
		}
	}
	e := nextEvent(t, j.s, func(e Event) bool { return e.Kind != EventJoined })
	if e.Kind != EventLost || e.Rank != 0 || e.Gen != 2 {
		t.Fatalf("event %v (generation %d), want EventLost for rank 0 in generation 2", e, e.Gen)
	}
}

// TestByeBeforeGenerationStarts: a rank that joins the next generation
// and says Bye before it starts counts as having left it: the others'
// first round there fails, as after any Bye.
func TestByeBeforeGenerationStarts(t *testing.T) {
	j := startJob(t, 2)
	cs := j.dialAll(t)
	gatherAll(t, cs, 1)
	cs[0].Close()
	c0 := j.dial(t, 0)
	c0.Close()
	cs[1].Close()
	c1 := j.dial(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := c1.Allgather(ctx, nil); !errors.Is(err, errs.PeerLost) || !strings.Contains(err.Error(), "rank 0") {
		t.Fatalf("round after rank 0 left generation 2: %v", err)
	}
	for _, e := range drainEvents(j.s) {
		if e.Kind == EventLost {
			t.Errorf("Bye reported as %v", e)
		}
	}
}

// TestRoundCompletesAfterByeWithPart: a rank that sent its part and then
// said Bye does not stop that round.
func TestRoundCompletesAfterByeWithPart(t *testing.T) {
	j := startJob(t, 2)
	cs := j.dialAll(t)
	go cs[1].Allgather(context.Background(), part(1, 1))
	waitFor(t, j.s, "rank 1's part", func() bool { return j.s.arrived == 1 })
	cs[1].Close()
	waitFor(t, j.s, "rank 1's Bye", func() bool { return j.s.left == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	got, err := cs[0].Allgather(ctx, part(1, 0))
	if err != nil || !bytes.Equal(got[1], part(1, 1)) {
		t.Fatalf("round with rank 1's part: %q, %v", got, err)
	}
	if _, err := cs[0].Allgather(ctx, nil); !errors.Is(err, errs.PeerLost) {
		t.Fatalf("next round: %v", err)
	}
}

// TestRejoinEventsKeepRoom: rejoins' EventJoined never take the room an
// EventLost or EventExit needs, even when nobody reads Events.
func TestRejoinEventsKeepRoom(t *testing.T) {
	j := startJob(t, 1)
	for range 20 {
		c := j.dial(t, 0)
		gatherAll(t, []*Client{c}, 1)
		c.Close()
	}
	c := j.dial(t, 0)
	if err := c.Exit(4); err != nil {
		t.Fatal(err)
	}
	drop(c)
	waitFor(t, j.s, "the loss", func() bool { return j.s.failure != nil })
	var kinds []EventKind
	for _, e := range drainEvents(j.s) {
		kinds = append(kinds, e.Kind)
	}
	if n := len(kinds); n < 3 || kinds[n-2] != EventExit || kinds[n-1] != EventLost || kinds[0] != EventJoined {
		t.Fatalf("events %v: want joins, then exit and lost", kinds)
	}
}
