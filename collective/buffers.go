package collective

import (
	"fmt"
	"math"

	"github.com/goshmem/goshmem/shmem"
)

// symCheck validates a buffer argument: a live handle of the team's PE.
func symCheck[T shmem.Elem](c *call, s shmem.Sym[T], name string) error {
	if s.PE() != c.pe {
		return fmt.Errorf("collective: %s is not a symmetric object of this PE: %w", name, shmem.ErrInvalid)
	}
	if s.Local() == nil { // a bad Slice, or a freed object

		return fmt.Errorf("collective: %s is out of range or freed: %w", name, shmem.ErrOutOfBounds)
	}
	return nil
}

// lenCheck fails when s has fewer than want elements.
func lenCheck[T shmem.Elem](s shmem.Sym[T], want int, name string, why info) error {
	if s.Len() < want {
		return fmt.Errorf("collective: %s has %d elements, %v needs %d: %w", name, s.Len(), why, want, shmem.ErrOutOfBounds)
	}
	return nil
}

// product is n*m for a count n and a team size m (both at least 0), or
// ErrOutOfBounds when the product does not fit an int: no buffer could
// hold it.
func product(n, m int, what info) (int, error) {
	if m > 0 && n > math.MaxInt/m {
		return 0, fmt.Errorf("collective: %v on a %d-PE team: %d×%d elements do not fit an int: %w", what, m, n, m, shmem.ErrOutOfBounds)
	}
	return n * m, nil
}

// aliasCheck refuses a dst whose first n elements, the ones the call
// writes, share some elements with src without being src itself: the
// call is either in place (dst and src start at the same element) or
// writes no element of src. The algorithms that read src while writing
// dst in place rely on element i of both being one element; with any
// other overlap one member's writes would change what another reads.
func aliasCheck[T shmem.Elem](dst, src shmem.Sym[T], n int, what info) error {
	if dst.Offset() == src.Offset() || n > dst.Len() {
		return nil // in place; a short dst is lenCheck's
	}
	if overlaps(dst.Slice(0, n), src) {
		return fmt.Errorf("collective: %v: dst (at byte %d) partly overlaps src (at byte %d); in place, dst and src start at the same element: %w",
			what, dst.Offset(), src.Offset(), shmem.ErrInvalid)
	}
	return nil
}

// overlaps reports whether a and b share an element on this PE.
func overlaps[T shmem.Elem](a, b shmem.Sym[T]) bool {
	sz := uint64(sizeOf[T]())
	if a.Len() <= 0 || b.Len() <= 0 {
		return false
	}
	a0, a1 := a.Offset(), a.Offset()+uint64(a.Len())*sz
	b0, b1 := b.Offset(), b.Offset()+uint64(b.Len())*sz
	return a0 < b1 && b0 < a1
}

// fetch returns world PE w's elements [lo, hi) of s: a view of its
// memory when its heap is mapped here (no copy), otherwise a copy read
// into *buf, which grows as needed.
func fetch[T shmem.Elem](c *call, s shmem.Sym[T], lo, hi, w int, buf *[]T) ([]T, error) {
	traceRange(c, tRead, s, lo, hi, w)
	if p := shmem.Ptr(s, w); p != nil {
		return p[lo:hi], nil
	}
	if cap(*buf) < hi-lo {
		*buf = make([]T, hi-lo)
	}
	b := (*buf)[:hi-lo]
	if len(b) == 0 {
		return b, nil
	}
	return b, shmem.Get(b, s.Slice(lo, hi), w)
}

// fetchInto copies world PE w's elements [lo, hi) of s into d.
func fetchInto[T shmem.Elem](c *call, d []T, s shmem.Sym[T], lo, hi, w int) error {
	traceRange(c, tRead, s, lo, hi, w)
	if p := shmem.Ptr(s, w); p != nil {
		copyElems(d, p[lo:hi])
		return nil
	}
	if hi == lo {
		return nil
	}
	return shmem.Get(d[:hi-lo], s.Slice(lo, hi), w)
}

// copyElems is copy that skips a copy onto itself (in place). Like
// shmem's own copies it moves 0.5 to 8 MiB in 64 KiB pieces: from about
// 1 MiB Go's copy switches to stores that bypass the cache, which on
// this project's machines run slower and leave the data where the next
// reader (a peer, or this member's own next step) does not find it.
func copyElems[T any](d, s []T) {
	if len(d) == 0 || len(s) == 0 || &d[0] == &s[0] {
		return
	}
	n := min(len(d), len(s))
	bytes := n * sizeOf[T]()
	if bytes <= 512<<10 || bytes > 8<<20 {
		copy(d, s)
		return
	}
	step := (64 << 10) / sizeOf[T]()
	for o := 0; o < n; o += step {
		e := min(o+step, n)
		copy(d[o:e], s[o:e])
	}
}

// newMsg returns a zeroed message buffer of hdrBytes+payload bytes,
// 8-byte aligned (enough for every element type).
func newMsg(payload int) []byte {
	w := make([]uint64, (hdrBytes+payload+7)/8)
	return bytesOf(w)[:hdrBytes+payload]
}

// message returns the zeroed buffer for this member's message of the
// next exchange, hdrBytes+payload bytes. On a flat team it is this
// member's own slot of the next exchange's parity in its own scratch,
// which no other member writes (each writes its own slot number), so the
// message is built where it is sent from and nothing is allocated; it
// stays valid until the exchange after next. Elsewhere it is Go memory.
func (c *call) message(payload int) []byte {
	if !c.g.flat {
		return newMsg(payload)
	}
	k := c.lw[wordSeq] + 1
	off := c.g.bufOff(int(k%2), c.me)
	b := c.lb[off : off+hdrBytes+payload]
	clear(b)
	return b
}
