package collective

// partition splits n elements into parts contiguous chunks, in order,
// covering [0, n) exactly once, with sizes differing by at most one: the
// first n%parts chunks have one element more. It returns chunk i as
// [lo, hi). Any n >= 0 and parts >= 1; chunks are empty when n < parts.
func partition(n, parts, i int) (lo, hi int) {
	q, r := n/parts, n%parts
	lo = i*q + min(i, r)
	hi = lo + q
	if i < r {
		hi++
	}
	return lo, hi
}

// ringStep is step s of the ring schedule over parts members, each
// sending to its right neighbour (me+1) and receiving from its left one
// (me-1). Steps 0..parts-2 are the reduce-scatter: member me passes on
// the partial result of chunk send and receives the partial of chunk
// recv, into which it combines its own contribution; the chunk it
// receives in step s is the one it sends in step s+1, and after the last
// step it holds chunk me complete. Steps parts-1..2*parts-3 are the
// allgather: it sends a finished chunk (its own first) and receives the
// finished chunk recv. A one-member ring has no steps.
func ringStep(parts, me, s int) (send, recv int) {
	mod := func(x int) int { return ((x % parts) + parts) % parts }
	if s < parts-1 {
		return mod(me - s - 1), mod(me - s - 2)
	}
	a := s - (parts - 1)
	return mod(me - a), mod(me - a - 1)
}

// blockSpan is the elements [lo, hi) of member me's block in the
// recursive halving of reduceHalving at distance d (a power of two): the
// aligned d chunks of partition(n, parts, .) that hold chunk me.
func blockSpan(n, parts, me, d int) (lo, hi int) {
	a := me - me%d
	lo, _ = partition(n, parts, a)
	_, hi = partition(n, parts, a+d-1)
	return lo, hi
}

// halvingLanding is where, in member me's dst of n elements, its
// partner at distance d (me^d, d < parts/2) puts its partial result of
// me's d-block in the reduce-scatter of reduceHalving: in the half of
// dst that does not hold chunk me (its first step gave that half away),
// after the slots of the larger distances, so that no two steps share a
// slot. ok is false when that half is too short (only when chunks
// hold fewer elements than there are members, about).
func halvingLanding(n, parts, me, d int) (off int, ok bool) {
	off, end := blockSpan(n, parts, me^(parts/2), parts/2)
	for e := parts / 4; e > d; e /= 2 {
		lo, hi := blockSpan(n, parts, me, e)
		off += hi - lo
	}
	lo, hi := blockSpan(n, parts, me, d)
	return off, off+hi-lo <= end
}

// halvingFits says whether reduceHalving takes a team of parts members
// and a vector of n elements: parts a power of two from 4 to
// halvingMax, and a slot for every step of every member. Every member
// answers alike.
func halvingFits(n, parts int) bool {
	if parts < 4 || parts > halvingMax || parts&(parts-1) != 0 {
		return false
	}
	for me := range parts {
		if _, ok := halvingLanding(n, parts, me, 1); !ok {
			return false
		}
	}
	return true
}

// chainPos is member me's position in the chain of a Reduce to root on
// a team of parts members (reduceChain): member root+1 first, the root
// last; the member at position p sends to member me+1, at p+1.
func chainPos(parts, root, me int) int { return (me - root - 1 + parts) % parts }

// ringUnwritten is the chunk of member me's dst that the reduce-scatter
// half of the ring (ringStep's steps 0..parts-2) never writes: the one
// it sends first, from its src, and never receives. Every other chunk
// it receives exactly once. reduceRootRing saves and restores the rest
// of a non-root's dst, which the reduce-scatter uses as landing space.
func ringUnwritten(parts, me int) int { return (me + parts - 1) % parts }
