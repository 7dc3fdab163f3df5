package collective

import (
	"fmt"
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// Vectors of 100,003 elements (an odd length, not a multiple of any team
// size) through the large-vector algorithms: AllReduce and Reduce of a
// float, a signed, an unsigned and a complex type, Broadcast, the scans,
// FCollect and AllToAll, on the world and on a team with a negative
// stride.
const largeN = 100003

var _ = register("large", func(pe *shmem.PE) error {
	np := pe.NPEs()
	bf, err := newBufs[float64](pe, largeN+1)
	if err != nil {
		return err
	}
	bi, err := newBufs[int32](pe, largeN+1)
	if err != nil {
		return err
	}
	bu, err := newBufs[uint16](pe, largeN+1)
	if err != nil {
		return err
	}
	bc, err := newBufs[complex64](pe, largeN+1)
	if err != nil {
		return err
	}
	rev, err := pe.World().Split(np-1, -1, np)
	if err != nil {
		return err
	}
	for ti, t := range []*shmem.Team{pe.World(), rev} {
		s := 77 + ti
		if err := checkReduce(t, bf, largeN, Sum, -1, false, s); err != nil {
			return fmt.Errorf("team %d: AllReduce(Sum) float64: %w", ti, err)
		}
		if err := checkReduce(t, bi, largeN, Xor, -1, true, s); err != nil {
			return fmt.Errorf("team %d: AllReduce(Xor) int32 in place: %w", ti, err)
		}
		if small {
			continue
		}
		if err := checkReduce(t, bf, largeN, Max, np-1, true, s); err != nil {
			return fmt.Errorf("team %d: Reduce(Max) float64 in place: %w", ti, err)
		}
		if err := checkReduce(t, bi, largeN, Prod, 0, false, s); err != nil {
			return fmt.Errorf("team %d: Reduce(Prod) int32: %w", ti, err)
		}
		if err := checkReduce(t, bu, largeN, Min, -1, false, s); err != nil {
			return fmt.Errorf("team %d: AllReduce(Min) uint16: %w", ti, err)
		}
		if err := checkReduce(t, bc, largeN, Prod, -1, false, s); err != nil {
			return fmt.Errorf("team %d: AllReduce(Prod) complex64: %w", ti, err)
		}
		if err := checkScan(t, bf, largeN, Max, false, true, s); err != nil {
			return fmt.Errorf("team %d: ExScan(Max) float64 in place: %w", ti, err)
		}
		if err := checkBroadcast(t, bf, largeN, 1%np, false, s); err != nil {
			return fmt.Errorf("team %d: Broadcast: %w", ti, err)
		}
		if err := checkScan(t, bi, largeN, Sum, true, false, s); err != nil {
			return fmt.Errorf("team %d: InScan: %w", ti, err)
		}
		if err := checkFCollect(t, bi, largeN/np, s); err != nil {
			return fmt.Errorf("team %d: FCollect: %w", ti, err)
		}
		if err := checkAllToAll(t, bi, largeN/np, 1, 1, s); err != nil {
			return fmt.Errorf("team %d: AllToAll: %w", ti, err)
		}
	}
	return nil
})

// AllReduce on two members across hosts (reducePair) with halves of
// several pieces: lengths whose halves are one piece exactly, one piece
// and an element, and two and a half pieces (an odd length, so the
// halves differ), of an 8-byte and a 4-byte type, back to back with the
// result checked and src refilled between calls; and Reduce to every
// root (reduceChain), whose whole vector goes along the chain in pieces
// of the same size: two exactly, two and an element (three pieces), five
// and an element (six). On three members a middle of the chain lands
// each piece in its dst, folds and passes it on, and restores its dst.
var _ = register("pair-pieces", func(pe *shmem.PE) error {
	per := pairPieceBytes / 8 // float64 elements in a piece
	lens := []int{2 * per, 2*per + 2, 5*per + 1}
	bf, err := newBufs[float64](pe, lens[2]+1)
	if err != nil {
		return err
	}
	bi, err := newBufs[int32](pe, 2*lens[2]+1)
	if err != nil {
		return err
	}
	t := pe.World()
	for i, n := range lens {
		if err := checkReduce(t, bf, n, Sum, -1, false, 500+i); err != nil {
			return fmt.Errorf("AllReduce(Sum) float64 of %d: %w", n, err)
		}
		if err := checkReduce(t, bi, 2*n, Xor, -1, false, 600+i); err != nil {
			return fmt.Errorf("AllReduce(Xor) int32 of %d: %w", 2*n, err)
		}
		for root := range t.NPEs() {
			if err := checkReduce(t, bf, n, Sum, root, false, 700+10*i+root); err != nil {
				return fmt.Errorf("Reduce(Sum) float64 of %d to %d: %w", n, root, err)
			}
			if err := checkReduce(t, bi, 2*n, Max, root, false, 800+10*i+root); err != nil {
				return fmt.Errorf("Reduce(Max) int32 of %d to %d: %w", 2*n, root, err)
			}
		}
	}
	return nil
})

func TestLarge(t *testing.T) {
	each(t, "pair-pieces", []route{tcp}, nil, 2, 3)
	each(t, "large", []route{goroutines}, nil, 1, 4)
	each(t, "large", []route{goroutines}, []string{envAlgo + "=ring"}, 3)
	each(t, "large", []route{goroutines}, []string{envAlgo + "=halving"}, 4)
	each(t, "large", []route{goroutines}, []string{envAlgo + "=pushring"}, 3)
	if !small {
		each(t, "large", []route{tcp}, nil, 3)
		each(t, "large", []route{mixed}, []string{envAlgo + "=ring"}, 4)
		each(t, "large", []route{mixed}, nil, 4) // recursive halving across hosts
		each(t, "large", []route{processes}, nil, 2)
	}
}

// The large matrix: every collective × every operator × float64, int32,
// uint16 and complex64 at 100,003 elements, on the world and on the
// teams of 1, 2, 3, 4, 5, 7 and 8 members smaller than it, split off it. The reductions, the scans and Broadcast move
// vectors of largeN elements; FCollect, Collect, AllToAll and AllToAllS
// (strides 2 and 3) give each member a share of about largeN/size, so
// each call's result holds at least largeN elements. Not in small mode.
var _ = register("large-matrix", func(pe *shmem.PE) error {
	w := pe.NPEs()
	capN := 3*(largeN+w) + 2
	bf, err1 := newBufs[float64](pe, capN)
	bi, err2 := newBufs[int32](pe, capN)
	bu, err3 := newBufs[uint16](pe, capN)
	bc, err4 := newBufs[complex64](pe, capN)
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			return err
		}
	}
	// Members of a team agree on the salts because each team starts its
	// own count (PEs outside a team skip it).
	run := func(t *shmem.Team) error {
		salt := 300 + 100*t.NPEs()
		if err := largeSuite(t, bf, &salt); err != nil {
			return fmt.Errorf("float64: %w", err)
		}
		if err := largeSuite(t, bi, &salt); err != nil {
			return fmt.Errorf("int32: %w", err)
		}
		if err := largeSuite(t, bu, &salt); err != nil {
			return fmt.Errorf("uint16: %w", err)
		}
		if err := largeSuite(t, bc, &salt); err != nil {
			return fmt.Errorf("complex64: %w", err)
		}
		return nil
	}
	if err := run(pe.World()); err != nil {
		return fmt.Errorf("world team of %d: %w", w, err)
	}
	// The world is the team of w; the serial reference, which every
	// member computes for every element, is most of the cost, so it is
	// not run a second time reversed (odd sizes have negative strides).
	return splitTeams(pe, func(size int) bool { return size < w }, run)
})

// largeSuite runs every collective on team t at the large matrix's sizes.
func largeSuite[T shmem.Elem](t *shmem.Team, b bufs[T], salt *int) error {
	np := t.NPEs()
	for _, op := range allOps {
		if !valid[T](op) {
			continue
		}
		*salt++
		s := *salt
		if err := checkReduce(t, b, largeN, op, -1, s%3 == 0, s); err != nil {
			return fmt.Errorf("AllReduce(%v) of %d (salt %d): %w", op, largeN, s, err)
		}
		root := s % np
		if err := checkReduce(t, b, largeN, op, root, s%2 == 0, s); err != nil {
			return fmt.Errorf("Reduce(%v) of %d to %d (salt %d): %w", op, largeN, root, s, err)
		}
		if err := checkScan(t, b, largeN, op, true, s%2 == 1, s); err != nil {
			return fmt.Errorf("InScan(%v) of %d (salt %d): %w", op, largeN, s, err)
		}
		if err := checkScan(t, b, largeN, op, false, s%2 == 0, s); err != nil {
			return fmt.Errorf("ExScan(%v) of %d (salt %d): %w", op, largeN, s, err)
		}
	}
	*salt++
	s := *salt
	root := (s * 7) % np
	if err := checkBroadcast(t, b, largeN, root, s%2 == 0, s); err != nil {
		return fmt.Errorf("Broadcast of %d from %d (salt %d): %w", largeN, root, s, err)
	}
	m := (largeN + np - 1) / np // each member's share: np*m >= largeN
	if err := checkFCollect(t, b, m, s); err != nil {
		return fmt.Errorf("FCollect of %d (salt %d): %w", m, s, err)
	}
	// Member j gives m plus up to a quarter of m more: the counts differ
	// and add up to at least largeN.
	count := func(j int) int { return m + (j*7919+s)%(m/4+1) }
	if err := checkCollectCounts(t, b, m+m/4, s, count); err != nil {
		return fmt.Errorf("Collect of %d to %d each (salt %d): %w", m, m+m/4, s, err)
	}
	if err := checkAllToAll(t, b, m, 1, 1, s); err != nil {
		return fmt.Errorf("AllToAll of %d (salt %d): %w", m, s, err)
	}
	if err := checkAllToAll(t, b, m, 2, 3, s); err != nil {
		return fmt.Errorf("AllToAllS of %d (salt %d): %w", m, s, err)
	}
	return nil
}

// The large matrix's heap: four types' src and dst of capN elements
// take about 13 MiB at 8 PEs, which leaves the default 16 MiB under 3 MiB
// to spare (8 MiB fails at the first Malloc, on every route); 48 MiB
// leaves room for longer vectors or strides.
const largeHeap = 48 << 20

func TestLargeMatrix(t *testing.T) {
	if small {
		t.Skip("-short or -race: the large matrix runs in the full mode only")
	}
	eachHeap(t, "large-matrix", []route{goroutines, processes, tcp, mixed}, nil, largeHeap, 8)
}
