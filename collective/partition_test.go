package collective

import (
	"fmt"
	"math"
	"math/bits"
	"testing"

	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/verify/explore"
)

// partition covers [0, n) exactly once with contiguous chunks in order
// whose sizes differ by at most one, for every team size up to 64 and
// every length up to 4096 (128 and 16384 with GOSHMEM_EXPLORE_DEEP=1),
// lengths below the team size included (docs/verification.md).
func TestPartition(t *testing.T) {
	maxParts, maxN := 64, 4096
	if explore.Deep() {
		maxParts, maxN = 128, 1<<14
	}
	for parts := 1; parts <= maxParts; parts++ {
		for n := 0; n <= maxN; n++ {
			next, smallest, largest := 0, n, 0
			for i := range parts {
				lo, hi := partition(n, parts, i)
				if lo != next || hi < lo {
					t.Fatalf("partition(%d, %d, %d) = [%d, %d), want it to start at %d", n, parts, i, lo, hi, next)
				}
				next = hi
				smallest, largest = min(smallest, hi-lo), max(largest, hi-lo)
			}
			if next != n {
				t.Fatalf("partition(%d, %d, ·) ends at %d", n, parts, next)
			}
			if largest-smallest > 1 {
				t.Fatalf("partition(%d, %d, ·): chunk sizes %d..%d", n, parts, smallest, largest)
			}
		}
	}
	big := math.MaxInt/8 + 3 // 2^60+2 (2^28+2 on a 32-bit machine)
	if lo, hi := partition(big, 7, 6); hi != big || hi-lo != big/7 {
		t.Fatalf("partition of %d by 7: last chunk [%d, %d)", big, lo, hi)
	}
}

// Driving the ring schedule step by step: every member's view of every
// chunk is the set of contributions folded into it (a bit mask). In each
// step a member receives from its left neighbour exactly the chunk the
// neighbour sends; in the reduce-scatter it folds its own contribution
// in, in the allgather it takes the finished chunk. At the end every
// member holds every chunk with every contribution exactly once.
//
// Every team size up to 64; with partition's cover (TestPartition) this
// holds element by element for every length.
func TestRingSchedule(t *testing.T) {
	for parts := 1; parts <= 64; parts++ {
		full := uint64(1)<<parts - 1
		have := make([][]uint64, parts) // have[m][c]: contributions in member m's copy of chunk c
		for m := range have {
			have[m] = make([]uint64, parts)
			for c := range have[m] {
				have[m][c] = 1 << m
			}
		}
		for s := 0; s < 2*(parts-1); s++ {
			next := make([][]uint64, parts)
			for m := range parts {
				next[m] = append([]uint64(nil), have[m]...)
				left := (m + parts - 1) % parts
				lsend, _ := ringStep(parts, left, s)
				_, recv := ringStep(parts, m, s)
				if lsend != recv {
					t.Fatalf("%d members, step %d: member %d receives chunk %d, its left neighbour sends %d", parts, s, m, recv, lsend)
				}
				if s > 0 && s != parts-1 {
					if send, _ := ringStep(parts, m, s); true {
						_, prev := ringStep(parts, m, s-1)
						if send != prev {
							t.Fatalf("%d members, step %d: member %d sends chunk %d, received %d before", parts, s, m, send, prev)
						}
					}
				}
				in := have[left][recv]
				if s < parts-1 {
					if in&(1<<m) != 0 || bits.OnesCount64(in) != s+1 {
						t.Fatalf("%d members, step %d: member %d gets chunk %d with contributions %b", parts, s, m, recv, in)
					}
					next[m][recv] = in | 1<<m
				} else {
					if in != full {
						t.Fatalf("%d members, allgather step %d: member %d gets unfinished chunk %d (%b)", parts, s, m, recv, in)
					}
					next[m][recv] = in
				}
			}
			have = next
			if s == parts-2 {
				for m := range parts {
					if have[m][m] != full {
						t.Fatalf("%d members: after the reduce-scatter member %d's chunk is %b", parts, m, have[m][m])
					}
				}
			}
		}
		for m := range parts {
			for c := range parts {
				if have[m][c] != full {
					t.Fatalf("%d members: at the end member %d's chunk %d is %b", parts, m, c, have[m][c])
				}
			}
		}
	}
}

// The size of the collective area shmem hands out (heap.TeamSlotSize
// less the slot's flags and split scratch), and of its message buffers.
const (
	areaLen    = 128512
	scratchLen = areaLen - scratchOff
)

// The recursive-doubling geometry fits the scratch for every team size
// the package takes, with room for at least the header.
func TestGeometry(t *testing.T) {
	for _, tc := range []struct {
		n   int
		far bool
	}{{1, false}, {2, false}, {2, true}, {3, false}, {3, true}, {4, false}, {4, true}, {5, false}, {7, true}, {8, false}, {8, true},
		{9, false}, {9, true}, {16, false}, {100, false}, {1 << 14, false}, {1<<15 - 1, true}} {
		n := tc.n
		g := newGeometry(n, scratchLen, tc.far)
		if g.relay != (tc.far && n >= relayMin && n <= flatMax) {
			t.Fatalf("geometry(%d, far %v): relay %v", n, tc.far, g.relay)
		}
		if g.relay {
			// The relay region follows the flat buffers, starts on a
			// line, and its last slot ends inside the scratch; the
			// release words are recursive-doubling signals, which flat
			// teams leave alone.
			if g.relayOff < g.bufOff(1, g.slots-1)-g.seq+g.slotBytes || g.relayOff%64 != 0 ||
				g.relayAt(1, n-1)+g.relaySlot > scratchLen || g.relayPayload() < 208 || g.relaySlot%64 != 0 || wordRelease+1 >= ctlWords {
				t.Fatalf("geometry(%d, far): relay region at %d of %+v", n, g.relayOff, g)
			}
		}
		if g.p2 > n || 2*g.p2 <= n || g.p2+g.rem != n || g.rounds > maxRounds {
			t.Fatalf("geometry(%d) = %+v", n, g)
		}
		if g.payloadCap() < 0 || g.bufOff(1, g.slots-1)-g.seq+g.slotBytes > scratchLen || g.flat != (n <= flatMax) || g.slotBytes%16 != 0 {
			t.Fatalf("geometry(%d): %d-byte buffers do not fit", n, g.slotBytes)
		}
		if g.flat {
			// A sequence word is 8-aligned, in the area's words past the
			// control words, and in the first line of its buffer with
			// the header and 8 bytes of payload where buffers are whole
			// lines.
			last := g.seqWord(1, g.slots-1)
			if g.seq != seqBytes || last < ctlWords || last >= areaLen/8 || (g.bufOff(1, g.slots-1)-g.seq)%8 != 0 {
				t.Fatalf("geometry(%d): sequence word %d of %+v", n, last, g)
			}
			if g.slotBytes >= 128 && (g.slotBytes%64 != 0 || g.seq+hdrBytes+8 > 64) {
				t.Fatalf("geometry(%d): %d-byte buffers are not whole lines", n, g.slotBytes)
			}
		}
	}
	// docs/collectives.md quotes a 4-member team's message.
	if g := newGeometry(4, scratchLen, false); g.payloadCap() != 15960 {
		t.Fatalf("a 4-PE team's messages carry %d bytes", g.payloadCap())
	}
	if g := newGeometry(4, scratchLen, true); g.payloadCap() != 11800 || g.relayPayload() != 4112 {
		t.Fatalf("a 4-PE team that spans hosts: its messages carry %d bytes, %d through member 0", g.payloadCap(), g.relayPayload())
	}
}

// The layout of the collective area (area.go) fits what shmem hands out
// and its word indices are pinned: other members address them by index.
func TestAreaLayout(t *testing.T) {
	err := shmem.Run(1, func(pe *shmem.PE) error {
		words, bytes := pe.World().CollectiveArea()
		if words.Len() != areaLen/8 || bytes.Len() != areaLen {
			return fmt.Errorf("collective area of %d words and %d bytes, want %d and %d", words.Len(), bytes.Len(), areaLen/8, areaLen)
		}
		if bytes.Offset() != words.Offset() || bytes.Offset()%64 != 0 {
			return fmt.Errorf("bytes at offset %d, words at %d", bytes.Offset(), words.Offset())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string][2]int{
		"wordSeq": {wordSeq, 0}, "wordCount": {wordCount, 1}, "wordStepSeq": {wordStepSeq, 2},
		"wordGather": {wordGather, 7},
		"wordRingIn": {wordRingIn, 3}, "wordSignals": {wordSignals, 8}, "slotsPer": {slotsPer, 16},
		"hdrBytes": {hdrBytes, 32}, "flatMax": {flatMax, 8}, "countBits": {countBits, 48},
		"ctlWords": {ctlWords, 40}, "seqBytes": {seqBytes, 8},
	} {
		if got[0] != got[1] {
			t.Errorf("%s = %d, want %d", name, got[0], got[1])
		}
	}
	if sigWord(1, slotsPer-1) >= 40 {
		t.Errorf("the last signal word, %d, is past the 40 words", sigWord(1, slotsPer-1))
	}
}

// TestHalving: the schedule of reduceHalving for every length and team
// size. A member's d-block holds chunk me, is its partner's sibling
// (together the 2d-block, where d < parts), and the blocks of one
// distance tile [0, n). Where halvingFits says yes, a member's slots lie
// in the half without chunk me, are its d-block's length and do not
// overlap; it says yes on 4 and 8 members from 64 elements (so at every
// size the auto choice gives it, far above) and never on other sizes.
func TestHalving(t *testing.T) {
	for parts := 1; parts <= 16; parts++ {
		for n := 0; n <= 300; n++ {
			pow := parts&(parts-1) == 0
			fits := halvingFits(n, parts)
			if fits && !(pow && parts >= 4 && parts <= halvingMax) {
				t.Fatalf("n=%d parts=%d: taken", n, parts)
			}
			if !fits && pow && parts >= 4 && parts <= halvingMax && n >= 64 {
				t.Fatalf("n=%d parts=%d: refused", n, parts)
			}
			if !pow {
				continue
			}
			for d := 1; d < parts; d *= 2 {
				cover := make([]int, n)
				for me := range parts {
					lo, hi := blockSpan(n, parts, me, d)
					clo, chi := partition(n, parts, me)
					if clo < lo || chi > hi {
						t.Fatalf("n=%d parts=%d me=%d d=%d: block [%d,%d) misses chunk [%d,%d)", n, parts, me, d, lo, hi, clo, chi)
					}
					plo, phi := blockSpan(n, parts, me^d, d)
					if plo != hi && phi != lo {
						t.Fatalf("n=%d parts=%d me=%d d=%d: partner's block [%d,%d) not beside [%d,%d)", n, parts, me, d, plo, phi, lo, hi)
					}
					if me%d == 0 {
						for e := lo; e < hi; e++ {
							cover[e]++
						}
					}
				}
				for e, k := range cover {
					if k != 1 {
						t.Fatalf("n=%d parts=%d d=%d: element %d in %d blocks", n, parts, d, e, k)
					}
				}
			}
			if !fits {
				continue
			}
			for me := range parts {
				flo, fhi := blockSpan(n, parts, me^(parts/2), parts/2)
				used := make([]bool, n)
				for d := 1; d < parts/2; d *= 2 {
					off, ok := halvingLanding(n, parts, me, d)
					lo, hi := blockSpan(n, parts, me, d)
					if !ok || off < flo || off+hi-lo > fhi {
						t.Fatalf("n=%d parts=%d me=%d d=%d: slot [%d,%d) outside the other half [%d,%d)", n, parts, me, d, off, off+hi-lo, flo, fhi)
					}
					for e := off; e < off+hi-lo; e++ {
						if used[e] {
							t.Fatalf("n=%d parts=%d me=%d d=%d: slots overlap at %d", n, parts, me, d, e)
						}
						used[e] = true
					}
				}
			}
		}
	}
}

// TestRootRingSchedule: the schedule of reduceRootRing (the ring's
// reduce-scatter, then every member's finished chunk to the root) in
// lock step, for every team size up to 33 and every root. Each
// member's dst chunk is written at most once by the reduce-scatter,
// never chunk ringUnwritten (the part a non-root does not save), and
// only with the chunk the left neighbour sends; after the reduce-scatter
// member m's chunk m holds every contribution once; a chunk the root
// receives in the gather was last read by the root (sent on) in an
// earlier step, or never landed there, and the root ends with every
// chunk complete.
func TestRootRingSchedule(t *testing.T) {
	for parts := 1; parts <= 33; parts++ {
		full := uint64(1)<<parts - 1
		for root := range parts {
			have := make([][]uint64, parts) // have[m][c]: the contributions in m's dst chunk c (0: not written)
			landed := make([][]int, parts)  // the step chunk c landed in m's dst, -1 if never
			sent := make([][]int, parts)    // the step m last sent chunk c from its dst, -1 if never
			for m := range parts {
				have[m] = make([]uint64, parts)
				landed[m] = make([]int, parts)
				sent[m] = make([]int, parts)
				for c := range parts {
					landed[m][c], sent[m][c] = -1, -1
				}
			}
			for s := 0; s < parts-1; s++ {
				next := make([][]uint64, parts)
				for m := range parts {
					next[m] = append([]uint64(nil), have[m]...)
				}
				for m := range parts {
					_, recv := ringStep(parts, m, s)
					left := (m + parts - 1) % parts
					lsend, _ := ringStep(parts, left, s)
					if lsend != recv {
						t.Fatalf("%d members, step %d: member %d receives chunk %d, its left neighbour sends %d", parts, s, m, recv, lsend)
					}
					if recv == ringUnwritten(parts, m) || landed[m][recv] >= 0 {
						t.Fatalf("%d members, step %d: chunk %d lands in member %d's dst (unwritten chunk %d, landed before in step %d)", parts, s, recv, m, ringUnwritten(parts, m), landed[m][recv])
					}
					in := uint64(1) << left // step 0: the neighbour's src
					if s > 0 {
						in = have[left][recv]
						sent[left][recv] = s
					}
					if in&(1<<m) != 0 || bits.OnesCount64(in) != s+1 {
						t.Fatalf("%d members, step %d: member %d gets chunk %d with contributions %b", parts, s, m, recv, in)
					}
					next[m][recv] = in | 1<<m
					landed[m][recv] = s
				}
				have = next
			}
			for m := range parts {
				if parts > 1 && have[m][m] != full {
					t.Fatalf("%d members: after the reduce-scatter member %d's chunk is %b", parts, m, have[m][m])
				}
			}
			// The gather, after every member's reduce-scatter.
			for m := range parts {
				if m == root {
					continue
				}
				if landed[root][m] >= 0 && sent[root][m] < landed[root][m] {
					t.Fatalf("%d members, root %d: chunk %d, landed in step %d, not sent on before the gather writes it", parts, root, m, landed[root][m])
				}
				have[root][m] = have[m][m]
			}
			for c := range parts {
				if parts > 1 && have[root][c] != full {
					t.Fatalf("%d members, root %d: chunk %d ends as %b", parts, root, c, have[root][c])
				}
			}
		}
	}
}

// TestChainSchedule: the order of reduceChain for every team size up
// to 33 and every root. The positions are a permutation with the root
// last; each member but the root sends to the member one position on,
// so each member's dst is written by one member only (none on position
// 0); and the partials passed along hold every member's contribution
// once when they reach the root.
func TestChainSchedule(t *testing.T) {
	for parts := 1; parts <= 33; parts++ {
		full := uint64(1)<<parts - 1
		for root := range parts {
			at := make([]int, parts) // at[p]: the member at position p
			seen := make([]bool, parts)
			for m := range parts {
				p := chainPos(parts, root, m)
				if p < 0 || p >= parts || seen[p] {
					t.Fatalf("%d members, root %d: member %d at position %d", parts, root, m, p)
				}
				seen[p], at[p] = true, m
			}
			if at[parts-1] != root {
				t.Fatalf("%d members, root %d: member %d is last", parts, root, at[parts-1])
			}
			var acc uint64 // the partial member at[p] holds
			for p, m := range at {
				if p > 0 && (at[p-1]+1)%parts != m {
					t.Fatalf("%d members, root %d: position %d (member %d) sends to member %d, not %d", parts, root, p-1, at[p-1], (at[p-1]+1)%parts, m)
				}
				if acc&(1<<m) != 0 {
					t.Fatalf("%d members, root %d: member %d's contribution twice", parts, root, m)
				}
				acc |= 1 << m
			}
			if acc != full {
				t.Fatalf("%d members, root %d: the root ends with %b", parts, root, acc)
			}
		}
	}
}
