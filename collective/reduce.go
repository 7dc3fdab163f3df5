package collective

import (
	"fmt"
	"sync"

	"github.com/goshmem/goshmem/shmem"
)

// AllReduce sets dst[i], on every member of t, to src[i] of member 0 op
// src[i] of member 1 op ... for i < src.Len(). Every member passes the
// same op and a src of the same length; dst must have at least as many
// elements (the rest is left alone). In place, dst and src start at the
// same element; otherwise dst[0:src.Len()] must not overlap src
// (ErrInvalid).
func AllReduce[T shmem.Elem](t *shmem.Team, dst, src shmem.Sym[T], op Op) error {
	return reduce(t, dst, src, op, -1)
}

// Reduce is AllReduce with the result written on member root only; the
// other members' dst are as they were when the call returns (across
// hosts they serve as landing space during the call, saved and written
// back).
func Reduce[T shmem.Elem](t *shmem.Team, dst, src shmem.Sym[T], op Op, root int) error {
	if root < 0 {
		root = -2 // not "every member"; refused below as a bad root
	}
	return reduce(t, dst, src, op, root)
}

// reduce is Reduce to root, or AllReduce for root -1.
func reduce[T shmem.Elem](t *shmem.Team, dst, src shmem.Sym[T], op Op, root int) (err error) {
	var c call
	if err := c.begin(t); err != nil {
		return err
	}
	defer func() { err = c.end(err) }()
	k := kindOf[T]()
	n := src.Len()
	coll, name := uint64(collAllReduce), "AllReduce"
	if root != -1 {
		coll, name = collReduce, "Reduce"
	}
	// Field by field into the zeroed call: a composite literal was built
	// on the stack and copied, and the copy's wide loads of the narrow
	// stores just made stalled (about a twentieth of a 1-PE AllReduce).
	c.what.name, c.what.op, c.what.k, c.what.n, c.what.root = name, op, k, n, root
	c.fail(opCheck(op, k))
	c.fail(symCheck(&c, src, "src"))
	c.fail(symCheck(&c, dst, "dst"))
	if root != -1 && (root < 0 || root >= c.n) {
		c.fail(fmt.Errorf("collective: %v of a %d-PE team: %w", c.what, c.n, shmem.ErrBadPE))
	}
	c.fail(lenCheck(dst, n, "dst", c.what))
	c.fail(aliasCheck(dst, src, n, c.what))
	c.desc = digest(coll, uint64(op), uint64(k), uint64(n), uint64(root), uint64(c.algo), dst.Offset(), src.Offset())
	if c.local != nil {
		_, err := c.sync()
		return err
	}
	if c.useRD(n*sizeOf[T](), sizeOf[T]()) {
		return reduceRD(&c, k, dst, src, op, root)
	}
	return reduceLarge(&c, k, dst, src, op, root)
}

// reduceLarge is reduce of a vector that does not go through the
// scratch: an entry exchange, then the algorithm the team and the
// arguments choose. It is apart from reduce so that reduce, which every
// small call runs, keeps only the call's one deferred end: a second,
// conditional defer (saved's release) would put both on the runtime's
// slower path for every call (about a tenth of a 1-PE AllReduce of 8
// bytes).
func reduceLarge[T shmem.Elem](c *call, k kind, dst, src shmem.Sym[T], op Op, root int) (err error) {
	n := src.Len()
	far := c.algo == algoAuto && c.far
	// Reduce across hosts by the chain (reduceChain, up to chainMax
	// members) or the ring (reduceRootRing) lands in non-roots' dst, and
	// a non-root's dst must be as it was when the call returns: such a
	// member saves it before the entry exchange lets anyone write it.
	// Whether the path is taken is known only after that exchange
	// (every member must have dst apart from src); when it is not,
	// nobody wrote the dst and the copy is dropped.
	rooted := root >= 0 && c.n > 1 && (far || c.algo == algoPushRing || c.algo == algoChain)
	chain := rooted && (c.n <= chainMax && c.algo != algoPushRing || c.n == 2 || c.algo == algoChain)
	var saved *dstCopy[T]
	var g0 uint64 // this member's gather word
	pos := chainPos(c.n, root, c.me)
	if rooted && (chain && pos > 0 || !chain && c.me == root) {
		// Every push of the calls before was awaited, and none of
		// this call's can come before the entry exchange. (An error
		// here goes to every member through that exchange.)
		g0, err = shmem.SignalFetch(c.words.Slice(wordGather, wordGather+1))
		c.fail(err)
	}
	if rooted && !overlaps(dst, src) {
		switch {
		case chain && pos > 0 && pos < c.n-1:
			saved = saveDst(c, dst, n, 0, 0)
		case !chain && c.me != root:
			lo, hi := partition(n, c.n, ringUnwritten(c.n, c.me))
			saved = saveDst(c, dst, n, lo, hi)
		}
		defer saved.release()
	}
	// The entry exchange of the large algorithms. Its header's minimum
	// aux is 1 when no member reduces in place: then the others' dst
	// may serve as landing space, and every member learns it alike.
	h := c.newHeader(c.desc)
	h.minAux = 0
	if !overlaps(dst, src) {
		h.minAux = 1
	}
	h, err = c.syncHeader(c.message(0), h)
	if err != nil {
		return err
	}
	apart := h.minAux == 1
	switch {
	case root >= 0 && apart && chain:
		return reduceChain(c, k, dst, src, op, root, g0, saved)
	case root >= 0 && apart && rooted:
		return reduceRootRing(c, k, dst, src, op, root, g0, saved)
	case root >= 0:
	case c.n == 2 && far && apart:
		return reducePair(c, k, dst, src, op)
	case c.n > 2 && apart && halvingFits(n, c.n) && (c.algo == algoHalving || far):
		return reduceHalving(c, k, dst, src, op)
	case c.n > 2 && apart && (c.algo == algoPushRing || far):
		return reducePushRing(c, k, dst, src, op)
	case c.n > 2 && (far || c.algo == algoRing):
		// Over TCP the ring, where each member talks to its neighbours
		// only, beats the direct algorithm (4 processes on pretend hosts,
		// 1 MiB: 2.4 against 3.1 ms); over shared memory it loses.
		return reduceRing(c, k, dst, src, op)
	}
	return reduceDirect(c, k, dst, src, op, root)
}

// reduceRD reduces through the team's scratch, one exchange per piece:
// on a flat team every member sends its src to every other and folds all
// of them in rank order; on a larger team recursive doubling folds a
// partner's partial result in each round. No member touches another's
// buffers, and the result lands in this member's dst only. A vector
// longer than one message (payloadCap bytes) goes in pieces
// (GOSHMEM_COLLECTIVE_ALGO=rd); the first exchange decides the verdict.
func reduceRD[T shmem.Elem](c *call, k kind, dst, src shmem.Sym[T], op Op, root int) error {
	n, sz := src.Len(), sizeOf[T]()
	per := c.g.payloadCap() / sz
	sl, dl := src.Local(), dst.Local()
	for off := 0; ; off += per {
		m := min(per, n-off)
		msg := c.message(m * sz)
		c.newHeader(c.desc).put(msg)
		acc := elems[T](msg[hdrBytes:], m)
		copy(acc, sl[off:off+m])
		var merge func([]byte)
		if !c.g.flat {
			merge = func(in []byte) { combine(k, op, acc, acc, elems[T](in[hdrBytes:], m)) }
		}
		if err := c.exchange(msg, merge); err != nil {
			return err
		}
		if off == 0 {
			if err := c.verdict(readHeader(msg)); err != nil {
				return err
			}
		}
		switch {
		case root >= 0 && c.me != root: // Reduce: only the root keeps the result
		case c.g.flat && c.n > 1:
			// Fold in rank order, so every member computes the same bits.
			d := dl[off : off+m]
			at := func(j int) []T {
				if j == c.me {
					return acc
				}
				return elems[T](c.inbox(j, len(msg))[hdrBytes:], m)
			}
			combine(k, op, d, at(0), at(1))
			for j := 2; j < c.n; j++ {
				combine(k, op, d, d, at(j))
			}
		default:
			copy(dl[off:off+m], acc)
		}
		if off+m >= n {
			return nil
		}
	}
}

// reduceDirect is a reduce-scatter and an allgather by direct access:
// an entry exchange (every member is inside the call, so its src is
// stable and its dst may be written); each member reduces chunk me of
// the partition straight from every member's src (over shared memory,
// from the peers' mapped heaps, with no staging copy) and writes the
// result into every member's dst (AllReduce) or the root's (Reduce),
// block by block while the block is in its cache; an exit exchange,
// after which nobody reads or writes this member's buffers.
//
// In place (dst == src) works: chunk c of every member's src is read by
// member c alone, which overwrites it only with the finished result, a
// block after it has read that block from everyone; and it folds its
// own src (the one its own dst aliases) in first.
func reduceDirect[T shmem.Elem](c *call, k kind, dst, src shmem.Sym[T], op Op, root int) error {
	n := src.Len()
	lo, hi := partition(n, c.n, c.me)
	// Chunk me of the members whose heaps are not mapped here, fetched
	// all at once (one round trip for all, not one per block).
	var far [][]T
	fetching := false
	for j := range c.n {
		if w := c.world(j); hi > lo && shmem.Ptr(src, w) == nil {
			if far == nil {
				far = make([][]T, c.n)
			}
			far[j] = make([]T, hi-lo)
			traceRange(c, tRead, src, lo, hi, w)
			if err := shmem.GetNBI(far[j], src.Slice(lo, hi), w); err != nil {
				return err
			}
			fetching = true
		}
	}
	if fetching {
		if err := c.pe.Quiet(); err != nil {
			return err
		}
	}
	if root >= 0 {
		// Into the root's dst: directly where it is mapped here,
		// otherwise reduced here and put.
		var d []T
		p := shmem.Ptr(dst, c.world(root))
		if p != nil {
			d = p[lo:hi]
			traceRange(c, tWrite, dst, lo, hi, c.world(root))
		} else {
			d = make([]T, hi-lo)
		}
		if err := reduceChunk(c, k, op, d, src, lo, hi, lo, root, far); err != nil {
			return err
		}
		if p == nil && hi > lo {
			traceRange(c, tWrite, dst, lo, hi, c.world(root))
			if err := shmem.Put(dst.Slice(lo, hi), d, c.world(root)); err != nil {
				return err
			}
		}
	} else {
		dl := dst.Local()
		step := max(blockBytes/sizeOf[T](), 1)
		for b := lo; b < hi; b += step {
			e := min(b+step, hi)
			if err := reduceChunk(c, k, op, dl[b:e], src, b, e, lo, c.me, far); err != nil {
				return err
			}
			for s := 1; s < c.n; s++ {
				w := c.world((c.me + s) % c.n)
				traceRange(c, tWrite, dst, b, e, w)
				if p := shmem.Ptr(dst, w); p != nil {
					copy(p[b:e], dl[b:e])
				} else if err := shmem.Put(dst.Slice(b, e), dl[b:e], w); err != nil {
					return err
				}
			}
		}
	}
	if err := c.complete(); err != nil {
		return err
	}
	_, err := c.sync()
	return err
}

// blockBytes is the piece of its chunk a member reduces and hands out
// at a time in reduceDirect: small enough to stay in the cache between
// the reduction and the copies out.
const blockBytes = 64 << 10

// reduceChunk sets d to the reduction of elements [lo, hi) of every
// member's src, folding member start's in first (d may alias it).
// far[j], when set, is member j's src from element base on, fetched
// because its heap is not mapped here.
func reduceChunk[T shmem.Elem](c *call, k kind, op Op, d []T, src shmem.Sym[T], lo, hi, base, start int, far [][]T) error {
	if hi == lo {
		return nil // an empty chunk (fewer elements than members): nothing was fetched
	}
	at := func(j int) []T {
		if far != nil && far[j] != nil {
			return far[j][lo-base : hi-base]
		}
		traceRange(c, tRead, src, lo, hi, c.world(j))
		return shmem.Ptr(src, c.world(j))[lo:hi]
	}
	if c.n == 1 {
		copyElems(d, at(start))
		return nil
	}
	// In rank order from start, four inputs a pass where there are
	// that many (combine4: one write of d instead of three).
	s := 2
	if c.n >= 4 {
		combine4(k, op, d, at(start), at((start+1)%c.n), at((start+2)%c.n), at((start+3)%c.n))
		s = 4
	} else {
		combine(k, op, d, at(start), at((start+1)%c.n))
	}
	for ; s+3 <= c.n; s += 3 {
		combine4(k, op, d, d, at((start+s)%c.n), at((start+s+1)%c.n), at((start+s+2)%c.n))
	}
	for ; s < c.n; s++ {
		combine(k, op, d, d, at((start+s)%c.n))
	}
	return nil
}

// reducePair is AllReduce on two members on different hosts, with dst
// and src apart: pushes only, no Get round trips and no exit exchange.
// After the entry exchange each member puts the half of its src that
// the other reduces (partition) into the other's dst, where that half
// of the result will be; once a piece of the other's half has landed in
// its own dst it folds its src in (other's op mine, the same on both
// members for the commutative operators) and puts that piece of the
// result back. A member returns once the other's whole result has
// landed: nothing more will be written into its dst, and no one reads
// its buffers, so no exit exchange is needed.
//
// Each half goes in pairPieces(...) pieces, each a PutSignal, and the
// two passes overlap: a member puts piece i+1 of the other's half before
// it waits for piece i of its own, and puts piece i of the result as
// soon as it folded it. So the result flows back while the halves still
// flow out, and a piece is folded while it is still in the cache it was
// read into. Piece i of the first pass sets the receiver's wordRingIn
// to base+1+i, piece i of the result its wordHalvIn (the partner at
// distance 1, as in reduceHalving) to base+1+i: one writer per word,
// and operations to one PE apply in order (docs/memory-model.md), so a
// value also says that every earlier piece landed.
func reducePair[T shmem.Elem](c *call, k kind, dst, src shmem.Sym[T], op Op) error {
	n := src.Len()
	other := c.world(1 - c.me)
	lo, hi := partition(n, 2, c.me)
	olo, ohi := partition(n, 2, 1-c.me)
	sl, dl := src.Local(), dst.Local()
	parts := pairPieces((n + 1) / 2 * sizeOf[T]()) // the larger half's: alike on both
	base := c.lw[wordStepSeq]
	c.lw[wordStepSeq] = base + uint64(parts)
	out := c.words.Slice(wordRingIn, wordRingIn+1)
	back := c.words.Slice(wordHalvIn, wordHalvIn+1)
	// put sends piece i of [a, b) of from into the other's dst.
	put := func(a, b, i int, from []T, sig shmem.Sym[uint64], w int) error {
		plo, phi := partition(b-a, parts, i)
		plo, phi = a+plo, a+phi
		traceSignal(c, dst.Slice(plo, phi), other, w, shmem.SignalSet, base+1+uint64(i))
		return shmem.PutSignal(dst.Slice(plo, phi), from[plo:phi], sig, base+1+uint64(i), shmem.SignalSet, other)
	}
	if err := put(olo, ohi, 0, sl, out, wordRingIn); err != nil {
		return err
	}
	for i := range parts {
		if i+1 < parts {
			if err := put(olo, ohi, i+1, sl, out, wordRingIn); err != nil {
				return err
			}
		}
		if err := c.await(wordRingIn, base+1+uint64(i)); err != nil {
			return err
		}
		plo, phi := partition(hi-lo, parts, i)
		plo, phi = lo+plo, lo+phi
		combine(k, op, dl[plo:phi], dl[plo:phi], sl[plo:phi])
		if err := put(lo, hi, i, dl, back, wordHalvIn); err != nil {
			return err
		}
	}
	return c.await(wordHalvIn, base+uint64(parts))
}

// pairPieces is how many pieces reducePair cuts a half of b bytes into,
// and reduceChain a vector of b bytes: pieces of up
// to pairPieceBytes. Over TCP, 2 PEs, alternated with the
// single-piece version in two sittings (docs/collectives.md), 512 KiB
// pieces made 2 to 16 MiB AllReduces 8 to 31 % faster; 256 KiB ones were
// as good at 4 MiB and worse at 16, and 64 or 128 KiB ones made 1 MiB
// slower (each piece is a blocking put and a wait). For the Reduce, ten
// alternated rounds: 2 to 16 MiB 19 to 39 % faster, 1 MiB within the
// noise. (broadcastPair keeps pieces of its own, pairPiece.)
func pairPieces(b int) int {
	return max(1, (b+pairPieceBytes-1)/pairPieceBytes)
}

const pairPieceBytes = 512 << 10

// reduceRing is the ring reduce-scatter + allgather of ringStep, for
// AllReduce on teams of three or more: between the entry and exit
// exchanges, 2(n-1) steps in each of which a member reads one chunk
// from its left neighbour (the neighbour's src in step 0, its dst
// after) and then tells its right neighbour, through the wordRingIn
// word, that it may read. Each member reads only from its left
// neighbour, so every link carries the same 2(n-1)/n of the vector; over
// shared memory the direct algorithm, with three exchanges in all, is
// faster.
//
// A chunk a member reads from its left neighbour's dst is not written
// again by that neighbour until the chunk has gone round the ring and
// been finished by its owner, which needs this member's own step; in
// place, the chunk of src a member reads in step 0 (member left-1's) is
// one its left neighbour writes only in the allgather.
func reduceRing[T shmem.Elem](c *call, k kind, dst, src shmem.Sym[T], op Op) error {
	n, np := src.Len(), c.n
	base := c.lw[wordStepSeq]
	steps := 2 * (np - 1)
	c.lw[wordStepSeq] = base + uint64(steps)
	left, right := c.world((c.me+np-1)%np), c.world((c.me+1)%np)
	dl, sl := dst.Local(), src.Local()
	var buf []T
	for s := 0; s < steps; s++ {
		if s > 0 {
			if err := c.await(wordRingIn, base+uint64(s)); err != nil {
				return err
			}
		}
		_, ch := ringStep(np, c.me, s)
		lo, hi := partition(n, np, ch)
		if s < np-1 {
			from := dst
			if s == 0 {
				from = src
			}
			v, err := fetch(c, from, lo, hi, left, &buf)
			if err != nil {
				return err
			}
			combine(k, op, dl[lo:hi], v, sl[lo:hi])
		} else if err := fetchInto(c, dl[lo:hi], dst, lo, hi, left); err != nil {
			return err
		}
		// The last step's signal would have no reader: leave it out, so
		// every signal is awaited inside the call.
		if s < steps-1 {
			traceSignal(c, shmem.Sym[T]{}, right, wordRingIn, shmem.SignalSet, base+uint64(s)+1)
			if err := shmem.AtomicSet(c.words, wordRingIn, base+uint64(s)+1, right); err != nil {
				return err
			}
		}
	}
	_, err := c.sync()
	return err
}

// reducePushRing is the ring of ringStep with pushes instead of reads,
// for AllReduce on teams of three or more that span hosts when no member
// reduces in place: in each step a member puts the chunk it passes on
// straight into its right neighbour's dst, with the signal in the same
// PutSignal, so a step costs one one-way transfer, not a Get's round
// trip. In the reduce-scatter the neighbour folds its src into what
// landed (other's op mine) and passes that on; in the allgather it only
// passes it on.
//
// A member writes chunk c of its neighbour's dst in reduce-scatter step
// s, and again in allgather step s+1; in between, the neighbour sent
// the chunk on, which the chunk's finishing (and so its coming round
// again) waits for. It writes no other member's buffers and reads none,
// so, once its own last chunk has landed, it may return.
func reducePushRing[T shmem.Elem](c *call, k kind, dst, src shmem.Sym[T], op Op) error {
	// The last write into this member's dst is its left neighbour's
	// last step, awaited there, and its own last write into its right
	// neighbour's dst is awaited by it: no exit exchange.
	return pushRing(c, k, dst, src, op, 2*(c.n-1), nil)
}

// pushRing runs steps 0..steps-1 of ringStep with pushes: in each a
// member puts the chunk it passes on into its right neighbour's dst
// (from its src in step 0) with the signal in the same PutSignal, waits
// for its left neighbour's, and in the reduce-scatter (the first n-1
// steps) folds its src into what landed. All of the ring (AllReduce) or
// its reduce-scatter (Reduce, reduceRootRing). beforeLast, when set, runs
// before the last wait (a mutation check's hook).
func pushRing[T shmem.Elem](c *call, k kind, dst, src shmem.Sym[T], op Op, steps int, beforeLast func()) error {
	n, np := src.Len(), c.n
	base := c.lw[wordStepSeq]
	c.lw[wordStepSeq] = base + uint64(steps)
	right := c.world((c.me + 1) % np)
	dl, sl := dst.Local(), src.Local()
	sig := c.words.Slice(wordRingIn, wordRingIn+1)
	for s := 0; s < steps; s++ {
		send, recv := ringStep(np, c.me, s)
		lo, hi := partition(n, np, send)
		from := dl[lo:hi]
		if s == 0 {
			from = sl[lo:hi]
		}
		traceSignal(c, dst.Slice(lo, hi), right, wordRingIn, shmem.SignalSet, base+uint64(s)+1)
		if err := shmem.PutSignal(dst.Slice(lo, hi), from, sig, base+uint64(s)+1, shmem.SignalSet, right); err != nil {
			return err
		}
		if beforeLast != nil && s == steps-1 {
			beforeLast()
		}
		if err := c.await(wordRingIn, base+uint64(s)+1); err != nil {
			return err
		}
		if s < np-1 {
			rlo, rhi := partition(n, np, recv)
			combine(k, op, dl[rlo:rhi], dl[rlo:rhi], sl[rlo:rhi])
		}
	}
	return nil
}

// reduceHalving is AllReduce by recursive halving and doubling with
// pushes (Rabenseifner), for teams of 4 or 8 members (halvingFits) that
// span hosts when no member reduces in place: log2(n) steps of
// reduce-scatter and as many of allgather, against the ring's 2(n-1),
// each a PutSignal to the step's partner and a wait for the partner's.
//
// Reduce-scatter: at distance d = n/2, n/4, ..., 1 a member keeps its
// aligned block of d chunks (blockOf) and puts its partial result of the
// partner's block (me^d) into the partner's dst: at the block's place
// for d = n/2 (its src, straight), into a slot of the partner's other
// half for the others (halvingLanding); it then folds what landed into
// its own block. Allgather: at d = 1, 2, ..., n/2 it puts its finished
// d-block into the partner's dst at the block's place.
//
// Signals: member me's word wordHalvIn+log2(d) is written only by its
// partner at distance d, with values from a per-call base (word
// wordStepSeq): base+1 in the reduce-scatter and base+2 in the
// allgather, except at d = n/2: base+1, then base+2 once that partner
// has folded every slot of its own (the slots lie in the half the
// allgather's last step overwrites, which waits for it), then base+3
// with its half. A write into a partner's dst goes only where the
// partner no longer reads: the blocks it already sent, or slots; every
// write is awaited by its target inside the call, so once its last
// block has landed a member may return.
func reduceHalving[T shmem.Elem](c *call, k kind, dst, src shmem.Sym[T], op Op) error {
	n, np := src.Len(), c.n
	base := c.lw[wordStepSeq]
	c.lw[wordStepSeq] = base + 3
	dl, sl := dst.Local(), src.Local()
	word := func(d int) int {
		w := wordHalvIn
		for ; d > 1; d /= 2 {
			w++
		}
		return w
	}
	put := func(d, at int, from []T, v uint64) error {
		sig := c.words.Slice(word(d), word(d)+1)
		w := c.world(c.me ^ d)
		traceSignal(c, dst.Slice(at, at+len(from)), w, word(d), shmem.SignalSet, v)
		return shmem.PutSignal(dst.Slice(at, at+len(from)), from, sig, v, shmem.SignalSet, w)
	}
	wait := func(d int, v uint64) error {
		return c.await(word(d), v)
	}
	half := np / 2
	for d := half; d >= 1; d /= 2 {
		plo, phi := blockSpan(n, np, c.me^d, d)
		mlo, mhi := blockSpan(n, np, c.me, d)
		from, at, land := sl[plo:phi], plo, mlo
		if d < half {
			from = dl[plo:phi]
			at, _ = halvingLanding(n, np, c.me^d, d)
			land, _ = halvingLanding(n, np, c.me, d)
		}
		if err := put(d, at, from, base+1); err != nil {
			return err
		}
		if err := wait(d, base+1); err != nil {
			return err
		}
		in := sl[mlo:mhi]
		if d < half {
			in = dl[land : land+mhi-mlo]
		}
		combine(k, op, dl[mlo:mhi], dl[mlo:mhi], in)
	}
	// Every slot is folded: the distance-n/2 partner may overwrite them.
	traceSignal(c, shmem.Sym[T]{}, c.world(c.me^half), word(half), shmem.SignalSet, base+2)
	if err := shmem.AtomicSet(c.words, word(half), base+2, c.world(c.me^half)); err != nil {
		return err
	}
	for d := 1; d <= half; d *= 2 {
		v := base + 2
		if d == half {
			if err := wait(d, base+2); err != nil {
				return err
			}
			v = base + 3
		}
		mlo, mhi := blockSpan(n, np, c.me, d)
		if err := put(d, mlo, dl[mlo:mhi], v); err != nil {
			return err
		}
		if mutantHalvingNoWait && d == half {
			break
		}
		if err := wait(d, v); err != nil {
			return err
		}
	}
	return nil
}

// reduceRootRing is Reduce on a team of more than chainMax members that
// spans hosts (on 3 or more under GOSHMEM_COLLECTIVE_ALGO=pushring),
// when no member reduces in place:
// the reduce-scatter of the pushing ring (ringStep's steps 0..n-2, as
// in reducePushRing), after which member i holds chunk i finished in
// its dst, then a gather: every member but the root puts its chunk into
// the root's dst with one PutSignal, adding 1 to the root's wordGather,
// and the root waits once for all of them. Each member sends (n-1)/n of
// the vector in the reduce-scatter and 1/n in the gather, with one wait
// per step, against the direct algorithm's Get of every remote chunk
// (a round trip each) and its exit exchange.
//
// Teams of up to chainMax members take reduceChain instead.
//
// The reduce-scatter lands in every member's dst; a non-root's dst must
// be as it was when the call returns, so the member copied the chunks
// that will land (all but ringUnwritten) before the entry exchange
// (saved) and writes them back once its last chunk has landed and its
// gather put has returned: nothing writes its dst after that.
//
// The root's dst: chunk c lands there once in the reduce-scatter, and
// the root sends it on (reading it) in the next step; the owner of c
// finishes it only after that send has landed further along the ring,
// so its gather write comes after the root has done with the chunk. Its
// own chunk needs no gather, and chunk ringUnwritten lands only by it.
// g0 is the root's wordGather, read before the entry exchange.
func reduceRootRing[T shmem.Elem](c *call, k kind, dst, src shmem.Sym[T], op Op, root int, g0 uint64, saved *dstCopy[T]) error {
	n, np := src.Len(), c.n
	gsig := c.words.Slice(wordGather, wordGather+1)
	var early func()
	if mutantRootRingEarlyRestore && saved != nil {
		early = func() { saved.restore(c, dst) }
	}
	if err := pushRing(c, k, dst, src, op, np-1, early); err != nil {
		return err
	}
	if c.me == root {
		return c.await(wordGather, g0+uint64(np-1))
	}
	lo, hi := partition(n, np, c.me)
	traceSignal(c, dst.Slice(lo, hi), c.world(root), wordGather, shmem.SignalAdd, 1)
	if err := shmem.PutSignal(dst.Slice(lo, hi), dst.Local()[lo:hi], gsig, 1, shmem.SignalAdd, c.world(root)); err != nil {
		return err
	}
	if !mutantRootRingEarlyRestore {
		saved.restore(c, dst)
	}
	return nil
}

// reduceChain is Reduce on a team of up to chainMax members that spans
// hosts (on any team under GOSHMEM_COLLECTIVE_ALGO=chain, on 2 members
// under pushring), when no member reduces in place: a pipelined chain. The members in the order root+1,
// root+2, ..., root-1, root (positions 0..n-1, chainPos) pass the vector
// along in pairPieces pieces: position 0 puts piece i of its src into
// position 1's dst; position p (1..n-2) waits for piece i to land in its
// own dst, folds its src in (what landed op mine) and puts the piece on
// into position p+1's dst; the root folds its src into each piece as it
// lands. Every put is a
// PutSignal adding 1 to the receiver's wordGather (one writer per word:
// its upstream neighbour), which the receiver read before the entry
// exchange; operations to one PE apply in order (docs/memory-model.md),
// so base+1+i says pieces 0..i landed. On two members this is the
// non-root's whole src into the root's dst, folded there piece by piece.
//
// Each member sends the vector once, n-1 vectors through links in all:
// the fewest bytes a Reduce can move when every member's data must
// leave it, against (n-1)(1+1/n) for reduceRootRing, and no exit
// exchange: every write is awaited by its target inside the call.
//
// The middle positions' dst is landing space; a non-root's dst must be
// as it was when the call returns, so they copied it before the entry
// exchange (saved) and write it back once the last piece has landed and
// been put on (the put has returned, so it no longer reads the dst):
// nothing writes their dst after that. g0 is this member's wordGather,
// read before the entry exchange.
func reduceChain[T shmem.Elem](c *call, k kind, dst, src shmem.Sym[T], op Op, root int, g0 uint64, saved *dstCopy[T]) error {
	n, np := src.Len(), c.n
	pos := chainPos(np, root, c.me)
	parts := pairPieces(n * sizeOf[T]())
	gsig := c.words.Slice(wordGather, wordGather+1)
	next := c.world((c.me + 1) % np)
	dl, sl := dst.Local(), src.Local()
	for i := range parts {
		plo, phi := partition(n, parts, i)
		from := sl[plo:phi]
		if pos > 0 {
			if mutantChainEarlyRestore && saved != nil && i == parts-1 {
				saved.restore(c, dst)
			}
			if err := c.await(wordGather, g0+1+uint64(i)); err != nil {
				return err
			}
			combine(k, op, dl[plo:phi], dl[plo:phi], sl[plo:phi])
			from = dl[plo:phi]
		}
		if pos == np-1 {
			continue
		}
		traceSignal(c, dst.Slice(plo, phi), next, wordGather, shmem.SignalAdd, 1)
		if err := shmem.PutSignal(dst.Slice(plo, phi), from, gsig, 1, shmem.SignalAdd, next); err != nil {
			return err
		}
	}
	if saved != nil && !mutantChainEarlyRestore {
		saved.restore(c, dst)
	}
	return nil
}

// chainMax is the largest team Reduce across hosts runs as a chain
// (reduceChain); larger teams take the ring's reduce-scatter and a
// gather (reduceRootRing). The chain moves the fewest bytes, which is
// what counts over loopback TCP with more PEs than cores (4 PEs, 1 MiB:
// 935 µs against the ring's 1.54 ms, docs/collectives.md), but a piece
// crosses n-1 links one after another: with links of their own (PEs on
// real hosts) a vector of p pieces takes about (p+n-2)/p times one
// transfer of it along the chain, against about 2(n-1)/n for the ring,
// so beyond a few members the ring is the faster one there.
const chainMax = 4

// dstCopy is a non-root's copy of its dst[:n] outside [lo, hi) (the
// chunk reduceRootRing never lands there; empty for reduceChain), in a
// buffer from savePool.
type dstCopy[T shmem.Elem] struct {
	buf    *[]uint64
	lo, hi int
	n      int
}

// savePool holds the buffers of dstCopy, so that a Reduce across hosts
// does not allocate (and leave to the collector) most of a vector per
// call.
var savePool sync.Pool // *[]uint64

// saveDst copies dst[:n] outside [lo, hi), the part reduceRootRing or
// reduceChain lands on.
func saveDst[T shmem.Elem](c *call, dst shmem.Sym[T], n, lo, hi int) *dstCopy[T] {
	d := &dstCopy[T]{lo: lo, hi: hi, n: n}
	words := ((n-(hi-lo))*sizeOf[T]() + 7) / 8
	if p, _ := savePool.Get().(*[]uint64); p != nil && cap(*p) >= words {
		d.buf = p
	} else {
		b := make([]uint64, words)
		d.buf = &b
	}
	v := d.view()
	dl := dst.Local()
	copy(v, dl[:lo])
	copy(v[lo:], dl[hi:n])
	if tracer != nil {
		tracer.note(c.pe, traceOp{kind: tSave, pe: c.pe.MyPE(), word: -1})
	}
	return d
}

func (d *dstCopy[T]) view() []T {
	return elems[T](bytesOf((*d.buf)[:cap(*d.buf)]), d.n-(d.hi-d.lo))
}

// restore writes the copy back into dst.
func (d *dstCopy[T]) restore(c *call, dst shmem.Sym[T]) {
	if tracer != nil {
		tracer.note(c.pe, traceOp{kind: tRestore, pe: c.pe.MyPE(), word: -1})
	}
	v, dl := d.view(), dst.Local()
	copy(dl[:d.lo], v)
	copy(dl[d.hi:d.n], v[d.lo:])
}

func (d *dstCopy[T]) release() {
	if d != nil {
		savePool.Put(d.buf)
	}
}
