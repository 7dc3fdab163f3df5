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
