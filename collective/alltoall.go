package collective

import (
	"fmt"
	"math"

	"github.com/goshmem/goshmem/shmem"
)

// AllToAll sends n elements from every member to every member: member
// i's src[j*n:(j+1)*n] lands in member j's dst[i*n:(i+1)*n]. Every
// member passes the same n; src and dst hold at least n*NPEs elements
// and must not overlap.
func AllToAll[T shmem.Elem](t *shmem.Team, dst, src shmem.Sym[T], n int) error {
	return allToAll(t, dst, src, 1, 1, n, false)
}

// AllToAllS is AllToAll with strides (shmem_alltoalls): element e of
// the block member i sends to member j is src[(j*n+e)*srcStride], and
// it lands in member j's dst[(i*n+e)*dstStride]. Strides are at least
// 1 and the same on every member.
func AllToAllS[T shmem.Elem](t *shmem.Team, dst, src shmem.Sym[T], dstStride, srcStride, n int) error {
	return allToAll(t, dst, src, dstStride, srcStride, n, true)
}

func allToAll[T shmem.Elem](t *shmem.Team, dst, src shmem.Sym[T], dstStride, srcStride, n int, strided bool) (err error) {
	var c call
	if err := c.begin(t); err != nil {
		return err
	}
	defer func() { err = c.end(err) }()
	k := kindOf[T]()
	coll := uint64(collAllToAll)
	c.what = info{name: "AllToAll", k: k, n: n, per: "per pair", root: -1}
	if strided {
		coll = collAllToAllS
		c.what = info{name: "AllToAllS", k: k, n: n, per: "per pair", root: -1, dstStride: dstStride, srcStride: srcStride}
	}
	c.fail(symCheck(&c, src, "src"))
	c.fail(symCheck(&c, dst, "dst"))
	if n < 0 || dstStride < 1 || srcStride < 1 {
		c.fail(fmt.Errorf("collective: %v: %w", c.what, shmem.ErrInvalid))
	}
	if c.local == nil {
		// n*NPEs is checked before it is used: a product that wrapped
		// round would pass the length checks and index past the buffers.
		cnt, err := product(n, c.n, c.what)
		c.fail(err)
		if err == nil {
			c.fail(stridedLen(src, cnt, srcStride, "src", c.what))
			c.fail(stridedLen(dst, cnt, dstStride, "dst", c.what))
		}
	}
	if c.local == nil && overlaps(dst, src) {
		c.fail(fmt.Errorf("collective: %v: dst and src overlap: %w", c.what, shmem.ErrInvalid))
	}
	c.desc = digest(coll, uint64(k), uint64(n), uint64(dstStride), uint64(srcStride), uint64(c.algo), dst.Offset(), src.Offset())
	if c.local == nil && c.oneMessage(n*c.n*sizeOf[T]()) {
		return allToAllFlat(&c, dst, src, dstStride, srcStride, n)
	}
	if _, err := c.sync(); err != nil {
		return err
	}
	sl := src.Local()
	for s := 1; s <= c.n && n > 0; s++ {
		j := (c.me + s) % c.n
		w := c.world(j)
		var err error
		if !strided {
			traceRange(&c, tWrite, dst, c.me*n, (c.me+1)*n, w)
			err = shmem.Put(dst.Slice(c.me*n, (c.me+1)*n), sl[j*n:(j+1)*n], w)
		} else {
			traceRange(&c, tWrite, dst, c.me*n*dstStride, c.me*n*dstStride+(n-1)*dstStride+1, w)
			d := dst.Slice(c.me*n*dstStride, dst.Len())
			err = shmem.IPut(d, dstStride, sl[j*n*srcStride:], srcStride, n, w)
		}
		if err != nil {
			return err
		}
	}
	if err := c.complete(); err != nil {
		return err
	}
	_, err = c.sync()
	return err
}

// allToAllFlat is AllToAll(S) through a flat team's scratch, when every
// block a member sends fits one message: each member packs its src (all
// its blocks, strides removed) into its exchange message, and takes its
// own block out of every member's message in its inbox. One exchange,
// and no member touches another's buffers.
func allToAllFlat[T shmem.Elem](c *call, dst, src shmem.Sym[T], dstStride, srcStride, n int) error {
	sz := sizeOf[T]()
	msg := c.message(n * c.n * sz)
	c.newHeader(c.desc).put(msg)
	out, sl := elems[T](msg[hdrBytes:], n*c.n), src.Local()
	if srcStride == 1 {
		copy(out, sl)
	} else {
		for x := range out {
			out[x] = sl[x*srcStride]
		}
	}
	if err := c.exchange(msg, nil); err != nil {
		return err
	}
	if err := c.verdict(readHeader(msg)); err != nil {
		return err
	}
	dl := dst.Local()
	for i := range c.n {
		in := msg
		if i != c.me {
			in = c.inbox(i, len(msg))
		}
		block := elems[T](in[hdrBytes:], n*c.n)[c.me*n : (c.me+1)*n]
		if dstStride == 1 {
			copy(dl[i*n:(i+1)*n], block)
			continue
		}
		for e, v := range block {
			dl[(i*n+e)*dstStride] = v
		}
	}
	return nil
}

// stridedLen checks that s holds cnt elements spaced stride apart: the
// last at (cnt-1)*stride, computed without overflow.
func stridedLen[T shmem.Elem](s shmem.Sym[T], cnt, stride int, name string, what info) error {
	if cnt == 0 {
		return nil
	}
	if cnt < 0 || cnt-1 > (math.MaxInt-1)/stride {
		return fmt.Errorf("collective: %v: %s would need more than %d elements: %w", what, name, math.MaxInt, shmem.ErrOutOfBounds)
	}
	return lenCheck(s, (cnt-1)*stride+1, name, what)
}
