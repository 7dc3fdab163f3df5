package collective

import (
	"fmt"

	"github.com/goshmem/goshmem/shmem"
)

// FCollect concatenates every member's src in team order into dst on
// every member: member j's src.Len() elements land at dst[j*n:(j+1)*n].
// Every member passes a src of the same length n and a dst of at least
// n*NPEs elements; dst and src must not overlap.
func FCollect[T shmem.Elem](t *shmem.Team, dst, src shmem.Sym[T]) error {
	var c call
	if err := c.begin(t); err != nil {
		return err
	}
	defer c.end()
	k := kindOf[T]()
	n := src.Len()
	c.what = info{name: "FCollect", k: k, n: n, per: "per PE", root: -1}
	c.fail(symCheck(&c, src, "src"))
	c.fail(symCheck(&c, dst, "dst"))
	c.fail(lenCheck(dst, n*c.n, "dst", c.what))
	if c.local == nil && overlaps(dst, src) {
		c.fail(fmt.Errorf("collective: %v: dst and src overlap: %w", c.what, shmem.ErrInvalid))
	}
	c.desc = digest(collFCollect, uint64(k), uint64(n), uint64(c.algo))
	if c.local == nil && c.oneMessage(n*sizeOf[T]()) {
		return fcollectFlat(&c, dst, src)
	}
	if _, err := c.sync(); err != nil {
		return err
	}
	if err := pushAll(&c, dst, src.Local()[:n], c.me*n); err != nil {
		return err
	}
	_, err := c.sync()
	return err
}

// fcollectFlat is FCollect through a flat team's scratch, for blocks
// that fit one message: every member sends its src in its exchange
// message and copies every member's block out of its own inbox into its
// dst. One exchange, and no member touches another's buffers.
func fcollectFlat[T shmem.Elem](c *call, dst, src shmem.Sym[T]) error {
	n, sz := src.Len(), sizeOf[T]()
	msg := c.message(n * sz)
	c.newHeader(c.desc).put(msg)
	copy(msg[hdrBytes:], bytesOf(src.Local()[:n]))
	if err := c.exchange(msg, nil); err != nil {
		return err
	}
	if err := c.verdict(readHeader(msg)); err != nil {
		return err
	}
	dl := dst.Local()
	for j := range c.n {
		in := msg
		if j != c.me {
			in = c.inbox(j, len(msg))
		}
		copy(dl[j*n:(j+1)*n], elems[T](in[hdrBytes:], n))
	}
	return nil
}

// Collect is FCollect with counts that may differ: member j gives its
// first n elements of src (n may be 0), and they land in team order, so
// member j's start at the sum of the counts of members 0..j-1. It
// returns the total count. dst must hold the total on every member;
// dst and src must not overlap.
func Collect[T shmem.Elem](t *shmem.Team, dst, src shmem.Sym[T], n int) (int, error) {
	var c call
	if err := c.begin(t); err != nil {
		return 0, err
	}
	defer c.end()
	k := kindOf[T]()
	c.what = info{name: "Collect", k: k, n: n, root: -1}
	c.fail(symCheck(&c, src, "src"))
	c.fail(symCheck(&c, dst, "dst"))
	if n < 0 {
		c.fail(fmt.Errorf("collective: %v: a negative count: %w", c.what, shmem.ErrInvalid))
	}
	c.fail(lenCheck(src, n, "src", c.what))
	if c.local == nil && overlaps(dst, src) {
		c.fail(fmt.Errorf("collective: %v: dst and src overlap: %w", c.what, shmem.ErrInvalid))
	}
	c.desc = digest(collCollect, uint64(k), uint64(c.algo))
	h := c.newHeader(c.desc)
	if c.local == nil {
		h.minAux, h.sum = uint64(dst.Len()), uint64(n)
		c.lw[wordCount] = uint64(n) // read by the others until the exit exchange
	}
	h, err := c.syncHeader(c.message(0), h)
	if err != nil {
		return 0, err
	}
	total := int(h.sum)
	if h.minAux < h.sum {
		// Every member sees the same sums and decides the same.
		return 0, fmt.Errorf("collective: %v: the total is %d elements, and a member's dst (%d here) has only %d: %w",
			c.what, total, dst.Len(), h.minAux, shmem.ErrOutOfBounds)
	}
	off := 0
	for j := 0; j < c.me; j++ {
		cnt, err := shmem.G(c.words, wordCount, c.world(j))
		if err != nil {
			return 0, err
		}
		off += int(cnt)
	}
	if err := pushAll(&c, dst, src.Local()[:n], off); err != nil {
		return 0, err
	}
	_, err = c.sync()
	return total, err
}

// pushAll puts v into dst[off:off+len(v)] on every member, this one
// included, starting with the right-hand neighbour so that no member is
// written by all at once, and completes them for the exit exchange
// (complete).
func pushAll[T shmem.Elem](c *call, dst shmem.Sym[T], v []T, off int) error {
	d := dst.Slice(off, off+len(v))
	for s := 1; s <= c.n; s++ {
		if err := shmem.Put(d, v, c.world((c.me+s)%c.n)); err != nil {
			return err
		}
	}
	return c.complete()
}
