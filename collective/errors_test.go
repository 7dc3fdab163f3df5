package collective

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/scenario"
	"github.com/goshmem/goshmem/internal/testhook"
	"github.com/goshmem/goshmem/shmem"
)

// Every error path, on the world team and on a split team: each member
// gets an error wrapping the expected sentinel — never a hang, never a
// write outside dst — and the next collective on the same team works.

type errCase struct {
	name  string
	want  error
	multi bool // the error needs members that disagree: not on 1-PE teams
	// call makes member me's call; b's buffers hold 64 elements.
	call func(t *shmem.Team, b bufs[float64], bc bufs[complex128], me int) error
}

var errCases = []errCase{
	{"bitwise op on floats", shmem.ErrInvalid, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return AllReduce(t, b.dst.Slice(0, 4), b.src.Slice(0, 4), Xor)
	}},
	{"Min on complex", shmem.ErrInvalid, false, func(t *shmem.Team, _ bufs[float64], bc bufs[complex128], me int) error {
		return AllReduce(t, bc.dst.Slice(0, 4), bc.src.Slice(0, 4), Min)
	}},
	{"Max on complex in a scan", shmem.ErrInvalid, false, func(t *shmem.Team, _ bufs[float64], bc bufs[complex128], me int) error {
		return InScan(t, bc.dst.Slice(0, 4), bc.src.Slice(0, 4), Max)
	}},
	{"bitwise op on complex", shmem.ErrInvalid, false, func(t *shmem.Team, _ bufs[float64], bc bufs[complex128], me int) error {
		return AllReduce(t, bc.dst.Slice(0, 4), bc.src.Slice(0, 4), Or)
	}},
	{"And on floats in a large ExScan", shmem.ErrInvalid, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return ExScan(t, b.dst.Slice(0, 60), b.src.Slice(0, 60), And)
	}},
	{"an operator that does not exist", shmem.ErrInvalid, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return Reduce(t, b.dst.Slice(0, 4), b.src.Slice(0, 4), Op(42), 0)
	}},
	{"one member's bitwise op", nil, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		op := Sum
		if me == t.NPEs()-1 {
			op = And
		}
		return AllReduce(t, b.dst.Slice(0, 4), b.src.Slice(0, 4), op)
	}},
	{"one member's dst too small", shmem.ErrOutOfBounds, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		d := b.dst.Slice(0, 4)
		if me == t.NPEs()-1 {
			d = b.dst.Slice(0, 3)
		}
		return AllReduce(t, d, b.src.Slice(0, 4), Sum)
	}},
	{"one member's large dst too small", shmem.ErrOutOfBounds, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		d := b.dst.Slice(0, 60)
		if me == 0 {
			d = b.dst.Slice(0, 59)
		}
		return Broadcast(t, d, b.src.Slice(0, 60), 0)
	}},
	{"different counts on the two paths", shmem.ErrAsymmetric, true, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		n := 60 // the direct path
		if me == 0 {
			n = 2 // recursive doubling
		}
		return AllReduce(t, b.dst.Slice(0, n), b.src.Slice(0, n), Sum)
	}},
	{"different counts", shmem.ErrAsymmetric, true, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		n := 3 + me%2
		return FCollect(t, b.dst.Slice(0, 4*t.NPEs()), b.src.Slice(0, n))
	}},
	{"different operators", shmem.ErrAsymmetric, true, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return AllReduce(t, b.dst.Slice(0, 4), b.src.Slice(0, 4), []Op{Sum, Max}[me%2])
	}},
	{"different collectives", shmem.ErrAsymmetric, true, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		if me%2 == 0 {
			return Broadcast(t, b.dst.Slice(0, 4), b.src.Slice(0, 4), 0)
		}
		return AllReduce(t, b.dst.Slice(0, 4), b.src.Slice(0, 4), Sum)
	}},
	{"different objects", shmem.ErrAsymmetric, true, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		d := b.dst.Slice(0, 40)
		if me == 0 {
			d = b.dst.Slice(8, 48)
		}
		return AllReduce(t, d, b.src.Slice(0, 40), Sum)
	}},
	{"different roots", shmem.ErrAsymmetric, true, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return Broadcast(t, b.dst.Slice(0, 4), b.src.Slice(0, 4), me%2)
	}},
	{"a root outside the team", shmem.ErrBadPE, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return Reduce(t, b.dst.Slice(0, 4), b.src.Slice(0, 4), Sum, t.NPEs())
	}},
	{"one member's root outside the team", shmem.ErrBadPE, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		root := 0
		if me == t.NPEs()-1 {
			root = -1
		}
		return Broadcast(t, b.dst.Slice(0, 40), b.src.Slice(0, 40), root)
	}},
	{"FCollect dst too small", shmem.ErrOutOfBounds, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return FCollect(t, b.dst.Slice(0, 4*t.NPEs()-1), b.src.Slice(0, 4))
	}},
	{"FCollect in place", shmem.ErrInvalid, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return FCollect(t, b.src.Slice(0, 4*t.NPEs()), b.src.Slice(0, 4))
	}},
	{"Collect total past one member's dst", shmem.ErrOutOfBounds, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		d := b.dst.Slice(0, 2*t.NPEs())
		if me == 0 {
			d = b.dst.Slice(0, 2*t.NPEs()-1)
		}
		_, err := Collect(t, d, b.src, 2)
		return err
	}},
	{"Collect src shorter than the count", shmem.ErrOutOfBounds, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		n := 2
		if me == t.NPEs()-1 {
			n = 65
		}
		_, err := Collect(t, b.dst, b.src.Slice(0, 64), n)
		return err
	}},
	{"Collect negative count", shmem.ErrInvalid, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		_, err := Collect(t, b.dst, b.src, -1-me)
		return err
	}},
	{"AllToAll src too small", shmem.ErrOutOfBounds, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return AllToAll(t, b.dst, b.src.Slice(0, 2*t.NPEs()-1), 2)
	}},
	{"AllToAll different counts", shmem.ErrAsymmetric, true, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return AllToAll(t, b.dst, b.src, 1+me%2)
	}},
	{"AllToAllS zero stride", shmem.ErrInvalid, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return AllToAllS(t, b.dst, b.src, 0, 1, 2)
	}},
	{"AllToAllS huge stride", shmem.ErrOutOfBounds, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return AllToAllS(t, b.dst, b.src, 1, math.MaxInt/2, 2)
	}},
	{"AllToAll count whose n×NPEs wraps", shmem.ErrOutOfBounds, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return AllToAll(t, b.dst, b.src, wrapCount(t.NPEs()))
	}},
	{"one member's AllToAll count whose n×NPEs wraps", shmem.ErrOutOfBounds, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		n := 2
		if me == 0 {
			n = wrapCount(t.NPEs())
		}
		return AllToAll(t, b.dst, b.src, n)
	}},
	{"AllToAllS count whose n×NPEs wraps", shmem.ErrOutOfBounds, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return AllToAllS(t, b.dst, b.src, 1, 1, wrapCount(t.NPEs()))
	}},
	{"one member's AllToAll dst too small", shmem.ErrOutOfBounds, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		d := b.dst.Slice(0, 2*t.NPEs())
		if me == t.NPEs()-1 {
			d = b.dst.Slice(0, 2*t.NPEs()-1)
		}
		return AllToAll(t, d, b.src, 2)
	}},
	{"one member's AllToAllS dst too small for its stride", shmem.ErrOutOfBounds, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		d := b.dst.Slice(0, (2*t.NPEs()-1)*3+1)
		if me == 0 {
			d = b.dst.Slice(0, (2*t.NPEs()-1)*3)
		}
		return AllToAllS(t, d, b.src, 3, 1, 2)
	}},
	{"AllToAll dst overlapping src", shmem.ErrInvalid, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		// Both inside dst, so that any write at all is seen.
		return AllToAll(t, b.dst.Slice(t.NPEs(), 3*t.NPEs()), b.dst.Slice(0, 2*t.NPEs()), 2)
	}},
	{"AllToAll in place", shmem.ErrInvalid, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return AllToAll(t, b.dst.Slice(0, 2*t.NPEs()), b.dst.Slice(0, 2*t.NPEs()), 2)
	}},
	{"AllToAll negative count", shmem.ErrInvalid, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return AllToAll(t, b.dst, b.src, -1)
	}},
	{"one member's negative AllToAll count", shmem.ErrInvalid, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		n := 2
		if me == t.NPEs()-1 {
			n = -2
		}
		return AllToAll(t, b.dst, b.src, n)
	}},
	{"Collect dst overlapping src", shmem.ErrInvalid, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		_, err := Collect(t, b.dst.Slice(2, 2+2*t.NPEs()), b.dst.Slice(0, 4), 2)
		return err
	}},
	{"one member's Collect dst overlapping its src", shmem.ErrInvalid, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		d := b.dst.Slice(8, 8+2*t.NPEs())
		if me == 0 {
			d = b.dst.Slice(0, 2*t.NPEs()) // same offset as src
		}
		_, err := Collect(t, d, b.dst.Slice(0, 2), 2)
		return err
	}},
	{"the Reduce root's dst too small", shmem.ErrOutOfBounds, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		root := t.NPEs() - 1
		d := b.dst.Slice(0, 4)
		if me == root {
			d = b.dst.Slice(0, 3)
		}
		return Reduce(t, d, b.src.Slice(0, 4), Sum, root)
	}},
	{"one non-root's large Reduce dst too small", shmem.ErrOutOfBounds, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		// Across hosts the good non-roots save their dst for the Reduce
		// ring before the entry exchange refuses the call.
		d := b.dst.Slice(0, 60)
		if me == t.NPEs()-1 {
			d = b.dst.Slice(0, 59)
		}
		return Reduce(t, d, b.src.Slice(0, 60), Sum, 0)
	}},
	{"one member's bad op in a large Reduce", nil, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		op := Max
		if me == t.NPEs()-1 {
			op = Or
		}
		return Reduce(t, b.dst.Slice(0, 60), b.src.Slice(0, 60), op, 0)
	}},
	{"the root's bad op in a large Reduce", nil, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		op := Sum
		if me == 0 {
			op = Xor
		}
		return Reduce(t, b.dst.Slice(0, 60), b.src.Slice(0, 60), op, 0)
	}},
	{"InScan dst too small", shmem.ErrOutOfBounds, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return InScan(t, b.dst.Slice(0, 3), b.src.Slice(0, 4), Sum)
	}},
	{"one member's large ExScan dst too small", shmem.ErrOutOfBounds, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		d := b.dst.Slice(0, 60)
		if me == t.NPEs()-1 {
			d = b.dst.Slice(0, 30)
		}
		return ExScan(t, d, b.src.Slice(0, 60), Prod)
	}},
	{"a negative Reduce root", shmem.ErrBadPE, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return Reduce(t, b.dst.Slice(0, 4), b.src.Slice(0, 4), Sum, -1)
	}},
	{"one member's negative large Reduce root", shmem.ErrBadPE, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		root := 0
		if me == t.NPEs()-1 {
			root = -3
		}
		return Reduce(t, b.dst.Slice(0, 60), b.src.Slice(0, 60), Sum, root)
	}},
	{"different element types", shmem.ErrAsymmetric, true, func(t *shmem.Team, b bufs[float64], bc bufs[complex128], me int) error {
		if me == 0 {
			return AllReduce(t, bc.dst.Slice(0, 4), bc.src.Slice(0, 4), Sum)
		}
		return AllReduce(t, b.dst.Slice(0, 4), b.src.Slice(0, 4), Sum)
	}},
	{"different element types of the same byte size", shmem.ErrAsymmetric, true, func(t *shmem.Team, b bufs[float64], bc bufs[complex128], me int) error {
		if me == t.NPEs()-1 {
			return Broadcast(t, bc.dst.Slice(0, 2), bc.src.Slice(0, 2), 0)
		}
		return Broadcast(t, b.dst.Slice(0, 4), b.src.Slice(0, 4), 0)
	}},
	{"different element types, large", shmem.ErrAsymmetric, true, func(t *shmem.Team, b bufs[float64], bc bufs[complex128], me int) error {
		if me%2 == 1 {
			return InScan(t, bc.dst.Slice(0, 60), bc.src.Slice(0, 60), Prod)
		}
		return InScan(t, b.dst.Slice(0, 60), b.src.Slice(0, 60), Prod)
	}},
	// dst and src partly overlapping (sharing elements, not the same
	// first element): refused on every path, small (the scratch) and
	// large (direct, ring and pushing algorithms). Both lie in dst, so
	// that any write at all is seen.
	{"AllReduce dst partly overlapping src", shmem.ErrInvalid, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return AllReduce(t, b.dst.Slice(1, 5), b.dst.Slice(0, 4), Sum)
	}},
	{"large AllReduce dst partly overlapping src", shmem.ErrInvalid, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return AllReduce(t, b.dst.Slice(2, 62), b.dst.Slice(0, 60), Max)
	}},
	{"one member's large Reduce dst partly overlapping its src", shmem.ErrInvalid, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		d := b.dst.Slice(30, 60)
		if me == t.NPEs()-1 {
			d = b.dst.Slice(29, 59)
		}
		return Reduce(t, d, b.dst.Slice(0, 30), Sum, 0)
	}},
	{"Reduce dst partly overlapping src, src after dst", shmem.ErrInvalid, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return Reduce(t, b.dst.Slice(0, 4), b.dst.Slice(3, 7), Prod, t.NPEs()-1)
	}},
	{"Broadcast dst partly overlapping src", shmem.ErrInvalid, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return Broadcast(t, b.dst.Slice(1, 5), b.dst.Slice(0, 4), 0)
	}},
	{"large Broadcast dst partly overlapping src", shmem.ErrInvalid, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return Broadcast(t, b.dst.Slice(3, 43), b.dst.Slice(0, 40), t.NPEs()-1)
	}},
	{"InScan dst partly overlapping src", shmem.ErrInvalid, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return InScan(t, b.dst.Slice(0, 4), b.dst.Slice(2, 6), Sum)
	}},
	{"large InScan dst partly overlapping src", shmem.ErrInvalid, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return InScan(t, b.dst.Slice(0, 40), b.dst.Slice(20, 60), Sum)
	}},
	{"large ExScan dst partly overlapping src", shmem.ErrInvalid, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return ExScan(t, b.dst.Slice(20, 60), b.dst.Slice(0, 40), Min)
	}},
	{"a freed-range slice", shmem.ErrOutOfBounds, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return AllReduce(t, b.dst.Slice(0, 4), b.src.Slice(5, 2), Sum)
	}},
	{"a zero Sym", shmem.ErrInvalid, false, func(t *shmem.Team, b bufs[float64], _ bufs[complex128], me int) error {
		return InScan(t, shmem.Sym[float64]{}, b.src.Slice(0, 4), Sum)
	}},
}

// wrapCount is the smallest count n for which n*np overflows an int and
// wraps round to a small number (below np; 0 when np is a power of two),
// so that a size check done with the product would pass. A 1- or 2-PE
// team has none: there it is math.MaxInt.
func wrapCount(np int) int {
	if np <= 2 {
		return math.MaxInt
	}
	return int(math.MaxUint/uint(np) + 1) // uint: the product wraps at the machine's width
}

var _ = register("errors", func(pe *shmem.PE) error {
	b, err := newBufs[float64](pe, 64)
	if err != nil {
		return err
	}
	bc, err := newBufs[complex128](pe, 64)
	if err != nil {
		return err
	}
	teams := []*shmem.Team{pe.World()}
	if pe.NPEs() >= 3 {
		t, err := pe.World().Split(pe.NPEs()-1, -1, pe.NPEs()-1)
		if err != nil {
			return err
		}
		if t != nil {
			teams = append(teams, t)
		}
	}
	for ti, t := range teams {
		me := t.MyPE()
		for i, c := range errCases {
			if c.multi && t.NPEs() == 1 {
				continue
			}
			fill(b.dst.Local(), sentinel[float64]())
			fill(bc.dst.Local(), sentinel[complex128]())
			err := c.call(t, b, bc, me)
			want := c.want
			if want == nil { // the member at fault: ErrInvalid; the others: ErrInvalid too
				want = shmem.ErrInvalid
			}
			if !errors.Is(err, want) {
				return fmt.Errorf("team %d, %s: member %d got %v, want %v", ti, c.name, me, err, want)
			}
			if err := untouched(b.dst.Local(), 0, 64); err != nil {
				return fmt.Errorf("team %d, %s: %w", ti, c.name, err)
			}
			if err := untouched(bc.dst.Local(), 0, 64); err != nil {
				return fmt.Errorf("team %d, %s: complex128 dst: %w", ti, c.name, err)
			}
			// The team still works.
			salt := 1000 + i
			if err := checkReduce(t, b, 5, Sum, -1, false, salt); err != nil {
				return fmt.Errorf("team %d, AllReduce after %s: %w", ti, c.name, err)
			}
			if err := checkBroadcast(t, b, 50, i%t.NPEs(), false, salt); err != nil {
				return fmt.Errorf("team %d, Broadcast after %s: %w", ti, c.name, err)
			}
			// A large Reduce: across hosts the Reduce ring, whose saved
			// dst and gather word a refused call must leave as they were.
			if err := checkReduce(t, b, 60, Max, (i+1)%t.NPEs(), false, salt); err != nil {
				return fmt.Errorf("team %d, large Reduce after %s: %w", ti, c.name, err)
			}
		}
	}
	return nil
})

// The error table under each forced algorithm: every path's argument
// checks, and each algorithm's good call after a refused one.
func TestErrorsAlgorithms(t *testing.T) {
	for _, a := range []string{"rd", "direct", "ring", "pushring", "halving", "chain"} {
		t.Run(a, func(t *testing.T) {
			each(t, "errors", []route{goroutines}, []string{envAlgo + "=" + a}, 4, 5)
			each(t, "errors", []route{tcp}, []string{envAlgo + "=" + a}, 4)
		})
	}
}

// Collect's counts, each at most collectMax, sum below 2^countBits on
// every team size, so the sum never carries into the header's count of
// members whose block did not ride along; one more element could (or
// it is math.MaxInt).
func TestCollectMax(t *testing.T) {
	for np := 1; np < 1<<(maxRounds+1); np++ {
		m := uint64(collectMax(np))
		if m*uint64(np) >= 1<<countBits {
			t.Fatalf("%d members of count %d sum to %d, past 2^%d", np, m, m*uint64(np), countBits)
		}
		if m < math.MaxInt && (m+1)*uint64(np) < 1<<countBits { // an int bounds it on a 32-bit machine
			t.Fatalf("%d members: the limit %d is lower than it needs to be", np, m)
		}
	}
}

func TestErrors(t *testing.T) {
	each(t, "errors", []route{goroutines}, nil, 1, 2, 3, 5, 10)
	each(t, "errors", []route{tcp, processes, mixed}, nil, 3)
}

// A bad GOSHMEM_COLLECTIVE_ALGO fails every call on every member with a
// message naming the variable, and writes no dst; once the variable is
// good again, the same team works.
var _ = register("bad-env", func(pe *shmem.PE) error {
	b, err := newBufs[int64](pe, 64)
	if err != nil {
		return err
	}
	t := pe.World()
	fill(b.dst.Local(), sentinel[int64]())
	err = AllReduce(t, b.dst.Slice(0, 8), b.src.Slice(0, 8), Sum)
	if !errors.Is(err, shmem.ErrInvalid) || !strings.Contains(err.Error(), envAlgo) {
		return fmt.Errorf("AllReduce with a bad %s: %v", envAlgo, err)
	}
	err = AllToAll(t, b.dst, b.src, 2)
	if !errors.Is(err, shmem.ErrInvalid) {
		return fmt.Errorf("AllToAll with a bad %s: %v", envAlgo, err)
	}
	if err := untouched(b.dst.Local(), 0, 64); err != nil {
		return fmt.Errorf("with a bad %s: %w", envAlgo, err)
	}
	// Every member has read the variable for both calls before any
	// returned from the second (its entry exchange waits for all), so
	// goroutine PEs, which share the environment, may set it now: each
	// writes the same value before its own next call.
	if err := os.Setenv(envAlgo, "auto"); err != nil {
		return err
	}
	if err := checkReduce(t, b, 8, Sum, -1, false, 1); err != nil {
		return fmt.Errorf("AllReduce after a bad %s: %w", envAlgo, err)
	}
	if err := checkBroadcast(t, b, 40, t.NPEs()-1, false, 2); err != nil {
		return fmt.Errorf("Broadcast after a bad %s: %w", envAlgo, err)
	}
	if err := checkAllToAll(t, b, 2, 1, 1, 3); err != nil {
		return fmt.Errorf("AllToAll after a bad %s: %w", envAlgo, err)
	}
	return nil
})

func TestBadAlgorithmEnv(t *testing.T) {
	each(t, "bad-env", []route{goroutines, processes}, []string{envAlgo + "=fastest"}, 1, 3)
}

// Across hosts, members whose counts make a long message (flat) and
// members whose counts make a short one (through member 0) take
// different ways through the first exchange of a call (exchangeGather):
// each member in turn, member 0 included, passes the odd count, short
// among long and long among short, for each one-exchange collective.
// Every member must get ErrAsymmetric (none may hang), nothing may be
// written into dst, and the next call on the team must succeed.
func TestGatherMix(t *testing.T) {
	const long, short = 1000, 3 // float64s: above and below the relay slots' payload on 4 and 5 members, within one message
	calls := []struct {
		name string
		call func(t *shmem.Team, b bufs[float64], n int) error
	}{
		{"AllReduce", func(t *shmem.Team, b bufs[float64], n int) error {
			return AllReduce(t, b.dst.Slice(0, n), b.src.Slice(0, n), Sum)
		}},
		{"Broadcast", func(t *shmem.Team, b bufs[float64], n int) error {
			return Broadcast(t, b.dst.Slice(0, n), b.src.Slice(0, n), 1)
		}},
		{"FCollect", func(t *shmem.Team, b bufs[float64], n int) error {
			return FCollect(t, b.dst.Slice(0, n*t.NPEs()), b.src.Slice(0, n))
		}},
		{"AllToAll", func(t *shmem.Team, b bufs[float64], n int) error {
			return AllToAll(t, b.dst, b.src, n/t.NPEs())
		}},
	}
	for _, np := range []int{4, 5} {
		err := shmem.Run(np, func(pe *shmem.PE) error {
			b, err := newBufs[float64](pe, long*np)
			if err != nil {
				return err
			}
			w, me := pe.World(), pe.MyPE()
			for _, c := range calls {
				for odd := range np {
					for _, base := range []int{long, short * np} {
						n, other := base, short*np
						if base != long {
							other = long
						}
						if me == odd {
							n = other
						}
						fill(b.dst.Local(), sentinel[float64]())
						if err := c.call(w, b, n); !errors.Is(err, shmem.ErrAsymmetric) {
							return fmt.Errorf("PE %d: %s with %d elements where PE %d passes %d: %v, want ErrAsymmetric", me, c.name, n, odd, other, err)
						}
						if err := untouched(b.dst.Local(), 0, len(b.dst.Local())); err != nil {
							return fmt.Errorf("PE %d: after %s with mixed counts: %w", me, c.name, err)
						}
						if err := checkReduce(w, b, base, Sum, -1, false, odd); err != nil {
							return fmt.Errorf("PE %d: AllReduce after %s with mixed counts: %w", me, c.name, err)
						}
					}
				}
			}
			return nil
		}, shmem.WithTimeout(30*time.Second), shmem.WithHosts(scenario.Hosts("remote", np)))
		if err != nil {
			t.Fatalf("%d PEs: %v", np, err)
		}
	}
}

// A handle of another PE, as dst or as src: ErrInvalid on every member,
// nothing written into either PE's dst, and the team still works. Only
// goroutine PEs (on one host or on pretend hosts) can hold another PE's
// handle, so this is not a scenario.
func TestForeignHandle(t *testing.T) {
	for _, hosts := range [][]string{nil, {"a", "b", "c"}} {
		var mu sync.Mutex // guards hs
		hs := make([]bufs[float64], 3)
		err := shmem.Run(3, func(pe *shmem.PE) error {
			b, err := newBufs[float64](pe, 64)
			if err != nil {
				return err
			}
			mu.Lock()
			hs[pe.MyPE()] = b
			mu.Unlock()
			if err := Barrier(pe.World()); err != nil {
				return err
			}
			mu.Lock()
			other := hs[(pe.MyPE()+1)%3]
			mu.Unlock()
			w := pe.World()
			for i, name := range []string{"dst", "src"} {
				dst, src := b.dst.Slice(0, 4), b.src.Slice(0, 4)
				if pe.MyPE() == 2-i {
					if name == "dst" {
						dst = other.dst.Slice(0, 4)
					} else {
						src = other.src.Slice(0, 4)
					}
				}
				fill(b.dst.Local(), sentinel[float64]())
				if err := AllReduce(w, dst, src, Sum); !errors.Is(err, shmem.ErrInvalid) {
					return fmt.Errorf("PE %d: AllReduce where PE %d passes another PE's %s: %v, want ErrInvalid", pe.MyPE(), 2-i, name, err)
				}
				if err := untouched(b.dst.Local(), 0, 64); err != nil {
					return fmt.Errorf("PE %d: after a %s of another PE: %w", pe.MyPE(), name, err)
				}
				if err := checkReduce(w, b, 4, Sum, -1, false, i); err != nil {
					return fmt.Errorf("PE %d: AllReduce after a %s of another PE: %w", pe.MyPE(), name, err)
				}
			}
			return nil
		}, shmem.WithTimeout(30*time.Second), shmem.WithHosts(hosts))
		if err != nil {
			t.Fatalf("hosts %v: %v", hosts, err)
		}
	}
}

// A member that dies mid-job makes the others' collectives end with
// ErrPeerLost, not hang.
func TestPeerLost(t *testing.T) {
	errDie := errors.New("this PE dies")
	for _, hosts := range [][]string{nil, {"a", "b", "c"}} {
		got := make([]error, 3)
		err := shmem.Run(3, func(pe *shmem.PE) error {
			b, err := newBufs[float64](pe, 1000)
			if err != nil {
				return err
			}
			if err := AllReduce(pe.World(), b.dst, b.src, Sum); err != nil && pe.MyPE() != 2 {
				got[pe.MyPE()] = err // PE 2 may already have died
				return nil
			}
			if pe.MyPE() == 2 {
				return errDie
			}
			for i := 0; ; i++ {
				n := []int{3, 1000}[i%2]
				if err := AllReduce(pe.World(), b.dst.Slice(0, n), b.src.Slice(0, n), Sum); err != nil {
					got[pe.MyPE()] = err
					return nil
				}
			}
		}, shmem.WithTimeout(30*time.Second), shmem.WithHosts(hosts))
		if !errors.Is(err, errDie) {
			t.Fatalf("hosts %v: Run returned %v", hosts, err)
		}
		for r := range 2 {
			if !errors.Is(got[r], shmem.ErrPeerLost) {
				t.Fatalf("hosts %v: PE %d's collective ended with %v, want ErrPeerLost", hosts, r, got[r])
			}
		}
	}
}

// Finalize while another goroutine of the PE is in a collective that can
// never complete (the other PE does not join): the collective returns
// ErrFinalized, and Finalize completes. PE 1 calls Finalize once the
// collective is inside its first step (testhook.Step), and PE 0 begins
// its own Finalize only once the collective has ended: one that began it
// earlier would be seen as a member that skipped the call for Finalize
// (ErrAsymmetric, finalize_test.go), the other way to end it.
func TestFinalizeDuringCollective(t *testing.T) {
	var armed atomic.Bool // PE 1's collective is about to start
	var inCall chan struct{}
	hook := func(rank, step int) {
		if rank == 1 && armed.CompareAndSwap(true, false) {
			close(inCall)
		}
	}
	testhook.Step.Store(&hook)
	defer testhook.Step.Store(nil)
	for _, hosts := range [][]string{nil, {"a", "b"}} {
		var got error
		ended := make(chan struct{})
		inCall = make(chan struct{})
		err := shmem.Run(2, func(pe *shmem.PE) error {
			b, err := newBufs[float64](pe, 1000)
			if err != nil {
				return err
			}
			if pe.MyPE() == 0 {
				<-ended
				return nil // to Finalize
			}
			done := make(chan error, 1)
			armed.Store(true)
			go func() { done <- AllReduce(pe.World(), b.dst, b.src, Sum); close(ended) }()
			<-inCall
			ferr := pe.Finalize()
			got = <-done
			return ferr
		}, shmem.WithTimeout(30*time.Second), shmem.WithHosts(hosts))
		if err != nil && !errors.Is(err, shmem.ErrFinalized) {
			t.Fatalf("hosts %v: Run: %v", hosts, err)
		}
		if !errors.Is(got, shmem.ErrFinalized) {
			t.Fatalf("hosts %v: the collective ended with %v, want ErrFinalized", hosts, got)
		}
	}
}

// Under SHMEM_DEBUG, a collective on a team against a world call (Malloc)
// on the other member: both time out, and both are told ErrAsymmetric
// (shmem's check of the order of calls across teams, which sees the
// collective through BeginCollective/EndCollective).
func TestDebugCollectiveAgainstWorldCall(t *testing.T) {
	errDone := errors.New("done")
	for _, hosts := range [][]string{nil, {"a", "b"}} {
		got := make([]error, 2)
		err := shmem.Run(2, func(pe *shmem.PE) error {
			b, err := newBufs[int64](pe, 4)
			if err != nil {
				return err
			}
			count, err := shmem.Malloc[int64](pe, 1)
			if err != nil {
				return err
			}
			team, err := pe.World().Split(0, 1, 2)
			if err != nil {
				return err
			}
			if pe.MyPE() == 0 {
				got[0] = AllReduce(team, b.dst, b.src, Sum)
			} else {
				_, got[1] = shmem.Malloc[int64](pe, 8)
			}
			// Meet through a polled counter before ending the job, so the
			// first to fail does not end the other's wait.
			if err := shmem.AtomicAdd(count, 0, 1, 0); err != nil {
				return err
			}
			for {
				if v, err := shmem.AtomicFetch(count, 0, 0); err != nil || v == 2 {
					return errors.Join(err, errDone)
				}
			}
		}, shmem.WithDebug(true), shmem.WithTimeout(time.Second), shmem.WithHosts(hosts))
		if !errors.Is(err, errDone) {
			t.Fatalf("hosts %v: Run returned %v", hosts, err)
		}
		for r, e := range got {
			if !errors.Is(e, shmem.ErrAsymmetric) || !errors.Is(e, shmem.ErrTimeout) {
				t.Errorf("hosts %v: PE %d: %v, want ErrTimeout and ErrAsymmetric", hosts, r, e)
			}
		}
	}
}
