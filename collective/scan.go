package collective

import "github.com/goshmem/goshmem/shmem"

// InScan sets dst[i] on member j to src[i] of member 0 op ... op src[i]
// of member j (an inclusive prefix reduction, OpenSHMEM 1.6). Arguments
// as for AllReduce, in place included (dst and src starting at the same
// element); any other overlap of dst[0:src.Len()] with src is ErrInvalid.
func InScan[T shmem.Elem](t *shmem.Team, dst, src shmem.Sym[T], op Op) error {
	return scan(t, dst, src, op, true)
}

// ExScan is InScan without member j's own src: dst[i] on member j is the
// reduction over members 0..j-1, and on member 0 the identity of op (0
// for Sum, Or and Xor, 1 for Prod, all ones for And, the largest value
// of the type for Min and the smallest for Max, ±Inf for floats).
func ExScan[T shmem.Elem](t *shmem.Team, dst, src shmem.Sym[T], op Op) error {
	return scan(t, dst, src, op, false)
}

// scan: on a flat team with a vector that fits one message, scanFlat.
// Otherwise an entry exchange; member j folds the src of members 0..j
// (or 0..j-1), read straight from their heaps where mapped, into a
// private buffer; an exit exchange, after which nobody reads this
// member's src, so the result may go into dst even in place.
func scan[T shmem.Elem](t *shmem.Team, dst, src shmem.Sym[T], op Op, inclusive bool) (err error) {
	var c call
	if err := c.begin(t); err != nil {
		return err
	}
	defer func() { err = c.end(err) }()
	k := kindOf[T]()
	n := src.Len()
	coll := uint64(collInScan)
	c.what = info{name: "InScan", op: op, k: k, n: n, root: -1}
	if !inclusive {
		coll = collExScan
		c.what = info{name: "ExScan", op: op, k: k, n: n, root: -1}
	}
	c.fail(opCheck(op, k))
	c.fail(symCheck(&c, src, "src"))
	c.fail(symCheck(&c, dst, "dst"))
	c.fail(lenCheck(dst, n, "dst", c.what))
	c.fail(aliasCheck(dst, src, n, c.what))
	c.desc = digest(coll, uint64(op), uint64(k), uint64(n), uint64(c.algo), dst.Offset(), src.Offset())
	last := c.me // members 0..last are folded in
	if !inclusive {
		last--
	}
	if c.local == nil && c.oneMessage(n*sizeOf[T]()) {
		return scanFlat(&c, k, dst, src, op, last)
	}
	if _, err := c.sync(); err != nil {
		return err
	}
	acc := make([]T, n)
	if last < 0 {
		fillIdentity(k, op, acc)
	} else {
		var buf []T
		for j := 0; j <= last; j++ {
			v, err := fetch(&c, src, 0, n, c.world(j), &buf)
			if err != nil {
				return err
			}
			if j == 0 {
				copy(acc, v)
			} else {
				combine(k, op, acc, acc, v)
			}
		}
	}
	if _, err := c.sync(); err != nil {
		return err
	}
	copy(dst.Local(), acc)
	return nil
}

// scanFlat is a scan through a flat team's scratch, for vectors that fit
// one message: every member sends its src in its exchange message and
// folds the messages of members 0..last, in rank order, out of its inbox
// into its own dst. One exchange; no member touches another's buffers.
func scanFlat[T shmem.Elem](c *call, k kind, dst, src shmem.Sym[T], op Op, last int) error {
	n := src.Len()
	msg := c.message(n * sizeOf[T]())
	c.newHeader(c.desc).put(msg)
	mine := elems[T](msg[hdrBytes:], n)
	copy(mine, src.Local()[:n])
	if err := c.exchange(msg, nil); err != nil {
		return err
	}
	if err := c.verdict(readHeader(msg)); err != nil {
		return err
	}
	at := func(j int) []T {
		if j == c.me {
			return mine
		}
		return elems[T](c.inbox(j, len(msg))[hdrBytes:], n)
	}
	d := dst.Local()[:n]
	switch last {
	case -1:
		fillIdentity(k, op, d)
	case 0:
		copy(d, at(0))
	default:
		combine(k, op, d, at(0), at(1))
		for j := 2; j <= last; j++ {
			combine(k, op, d, d, at(j))
		}
	}
	return nil
}
