package ring

import (
	"errors"
	"fmt"
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// NewComm over teams smaller than the job: lanes of the team's own,
// allocated over its members (shmem.TeamMalloc).

// splitSizes are the shift sizes of comm-split: empty, one byte, 64 KiB
// + 1 (just over the eager limit: rendezvous) and 1 MiB.
func splitSizes(c *Comm) []int { return []int{0, 1, EagerMax + 1, 1 << 20} }

// shiftOver runs a ring shift over c at every size of splitSizes, with
// tag 5 whatever the Comm: each message is filled with key (say which
// Comm it belongs to) and the sender's rank, so a message that crossed
// into another Comm fails checkMsg.
func shiftOver(c *Comm, key int) error {
	me, n := c.Rank(), c.Size()
	right, left := (me+1)%n, (me+n-1)%n
	for k, size := range splitSizes(c) {
		dst := make([]byte, size)
		st, err := SendRecv(bg(), c, right, 5, fillMsg(make([]byte, size), key+me, 5, k), left, 5, dst)
		if err != nil {
			return fmt.Errorf("SendRecv of %d bytes over a %d-PE Comm: %w", size, n, err)
		}
		if st != (Status{Source: left, Tag: 5, Bytes: size}) {
			return fmt.Errorf("SendRecv of %d bytes over a %d-PE Comm: status %+v", size, n, st)
		}
		if err := checkMsg(dst, key+left, 5, k); err != nil {
			return fmt.Errorf("over a %d-PE Comm: %w", n, err)
		}
	}
	// Send and Recv around the ring: even ranks send first, odd ranks
	// receive first (with an odd count the last rank, even, waits for
	// rank 0's receive, which follows rank 0's send to rank 1, which
	// receives first: no cycle).
	for k, size := range splitSizes(c) {
		if n == 1 && size > c.EagerLimit() {
			continue // a rendezvous self-send waits for its own Recv
		}
		send := func() error {
			if err := Send(bg(), c, right, 6, fillMsg(make([]byte, size), key+me, 6, k)); err != nil {
				return fmt.Errorf("Send of %d bytes over a %d-PE Comm: %w", size, n, err)
			}
			return nil
		}
		recv := func() error {
			dst := make([]byte, size)
			st, err := Recv(bg(), c, left, 6, dst)
			if err != nil || st != (Status{Source: left, Tag: 6, Bytes: size}) {
				return fmt.Errorf("Recv of %d bytes over a %d-PE Comm: %+v, %v", size, n, st, err)
			}
			return checkMsg(dst, key+left, 6, k)
		}
		first, second := send, recv
		if me%2 == 1 {
			first, second = recv, send
		}
		if err := first(); err != nil {
			return err
		}
		if err := second(); err != nil {
			return err
		}
	}
	return nil
}

// interleave sends an eager message on a and one on b, each to the next
// rank, before receiving either (b's first): a and b over teams that
// share this PE hold their lanes at once, and a message that landed in
// the other Comm's lanes fails checkMsg.
func interleave(a, b *Comm, keyA, keyB int) error {
	for k, size := range []int{1, 1000, EagerMax} {
		for _, x := range []struct {
			c   *Comm
			key int
		}{{a, keyA}, {b, keyB}} {
			me, n := x.c.Rank(), x.c.Size()
			if err := Send(bg(), x.c, (me+1)%n, 7, fillMsg(make([]byte, size), x.key+me, 7, k)); err != nil {
				return fmt.Errorf("interleaved Send of %d bytes over a %d-PE Comm: %w", size, n, err)
			}
		}
		for _, x := range []struct {
			c   *Comm
			key int
		}{{b, keyB}, {a, keyA}} {
			me, n := x.c.Rank(), x.c.Size()
			left := (me + n - 1) % n
			dst := make([]byte, size)
			if _, err := Recv(bg(), x.c, left, 7, dst); err != nil {
				return fmt.Errorf("interleaved Recv of %d bytes over a %d-PE Comm: %w", size, n, err)
			}
			if err := checkMsg(dst, x.key+left, 7, k); err != nil {
				return fmt.Errorf("interleaved, over a %d-PE Comm: %w", n, err)
			}
		}
	}
	return nil
}

// comm-split: Comms of their own over split teams. The even PEs (stride
// 2) and the odd PEs counted down (stride -2) each make a Comm at once
// and shift over it at once with the same tags: messages never cross
// between the two. Every PE alone (one-member teams of Split2D(1))
// makes a Comm and sends to itself. A Comm over pairs of PEs (rows of
// Split2D(2)) and the parity team's Comm carry eager messages at once.
// A Sub of a team Comm over a
// sub-team of its team works; over a team reaching outside it is
// refused. Then the team Comms close and new ones come up over the same
// teams, twice. Last, a Comm over the shared team.
var _ = register("comm-split", func(pe *shmem.PE) error {
	me, n := pe.MyPE(), pe.NPEs()
	w := pe.World()
	evens, err := w.Split(0, 2, (n+1)/2)
	if err != nil {
		return err
	}
	odd := n - 1
	if odd%2 == 0 {
		odd--
	}
	var odds *shmem.Team
	if odd >= 1 {
		if odds, err = w.Split(odd, -2, (odd+1)/2); err != nil {
			return err
		}
	}
	alone, col, err := w.Split2D(1)
	if err != nil {
		return err
	}
	pair, pcol, err := w.Split2D(2) // pair: PEs 2i and 2i+1
	if err != nil {
		return err
	}
	mine, key := evens, 0
	if me%2 == 1 {
		mine, key = odds, 100
	}
	for round := range 2 {
		c, err := NewComm(mine)
		if err != nil {
			return fmt.Errorf("round %d: NewComm over a %d-PE team: %w", round, mine.NPEs(), err)
		}
		if c.Rank() != mine.MyPE() || c.Size() != mine.NPEs() {
			return fmt.Errorf("Comm rank %d of %d, team %d of %d", c.Rank(), c.Size(), mine.MyPE(), mine.NPEs())
		}
		if me%2 == 1 && c.Rank() != (odd-me)/2 {
			return fmt.Errorf("PE %d has rank %d in the odd team counted down from %d", me, c.Rank(), odd)
		}
		self, err := NewComm(alone)
		if err != nil {
			return fmt.Errorf("NewComm over a one-member team: %w", err)
		}
		if err := shiftOver(c, key); err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
		if err := shiftOver(self, 200); err != nil {
			return fmt.Errorf("round %d: alone: %w", round, err)
		}
		// A Comm over the pair beside the one over the parity team:
		// both have lanes into this PE at once.
		pc, err := NewComm(pair)
		if err != nil {
			return fmt.Errorf("NewComm over a pair: %w", err)
		}
		if err := interleave(c, pc, key, 500); err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
		if err := pair.Sync(); err != nil {
			return err
		}
		if err := pc.Close(); err != nil {
			return err
		}
		// A sub-Comm of the team Comm over its first member alone (a
		// one-PE team split from it), and one over a team reaching
		// outside it.
		first, err := mine.Split(0, 1, 1)
		if err != nil {
			return err
		}
		if first != nil {
			sub, err := c.Sub(first)
			if err != nil {
				return fmt.Errorf("Sub of a team Comm: %w", err)
			}
			if err := shiftOver(sub, 300); err != nil {
				return fmt.Errorf("sub-Comm of a team Comm: %w", err)
			}
			if err := sub.Close(); err != nil {
				return err
			}
			if err := first.Destroy(); err != nil {
				return err
			}
		}
		if n > 1 {
			if _, err := c.Sub(col); !errors.Is(err, shmem.ErrInvalid) {
				return fmt.Errorf("Sub of a %d-PE team Comm over the %d-PE world column: %v", c.Size(), col.NPEs(), err)
			}
		}
		if err := mine.Sync(); err != nil {
			return err
		}
		if err := self.Close(); err != nil {
			return err
		}
		if err := c.Close(); err != nil {
			return err
		}
		if err := Send(bg(), c, 0, 0, []byte{1}); !errors.Is(err, shmem.ErrFinalized) {
			return fmt.Errorf("Send on a closed team Comm: %v", err)
		}
	}
	// The shared team (every PE on this host: all of them, one or two
	// by route).
	sh, err := NewComm(pe.Shared())
	if err != nil {
		return fmt.Errorf("NewComm over the %d-PE shared team: %w", pe.Shared().NPEs(), err)
	}
	if err := shiftOver(sh, 400); err != nil {
		return fmt.Errorf("shared team: %w", err)
	}
	if err := pe.Shared().Sync(); err != nil {
		return err
	}
	if err := sh.Close(); err != nil {
		return err
	}
	for _, t := range []*shmem.Team{evens, odds, alone, col, pair, pcol} {
		if t != nil {
			if err := t.Destroy(); err != nil {
				return err
			}
		}
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	return nil
})

// TestCommSplit: Comms over split teams on every route, 2 to 5 PEs (one
// PE: the one-member team is the world).
func TestCommSplit(t *testing.T) { each(t, "comm-split", 1, 2, 3, 5) }
