package collective

import (
	"fmt"
	"math"
	"sync/atomic"

	"github.com/goshmem/goshmem/shmem"
)

// FCollect concatenates every member's src in team order into dst on
// every member: member j's src.Len() elements land at dst[j*n:(j+1)*n].
// Every member passes a src of the same length n and a dst of at least
// n*NPEs elements; dst and src must not overlap.
func FCollect[T shmem.Elem](t *shmem.Team, dst, src shmem.Sym[T]) (err error) {
	var c call
	if err := c.begin(t); err != nil {
		return err
	}
	defer func() { err = c.end(err) }()
	k := kindOf[T]()
	n := src.Len()
	c.what = info{name: "FCollect", k: k, n: n, per: "per PE", root: -1}
	c.fail(symCheck(&c, src, "src"))
	c.fail(symCheck(&c, dst, "dst"))
	need, perr := product(n, c.n, c.what)
	c.fail(perr)
	c.fail(lenCheck(dst, need, "dst", c.what))
	if c.local == nil && overlaps(dst, src) {
		c.fail(fmt.Errorf("collective: %v: dst and src overlap: %w", c.what, shmem.ErrInvalid))
	}
	c.desc = digest(collFCollect, uint64(k), uint64(n), uint64(c.algo), dst.Offset(), src.Offset())
	if c.local == nil && c.oneMessage(n*sizeOf[T]()) {
		return fcollectFlat(&c, dst, src)
	}
	if c.far {
		return fcollectPush(&c, dst, src)
	}
	if !mutantNoEntry {
		if _, err := c.sync(); err != nil {
			return err
		}
	}
	if err := pushAll(&c, dst, src.Local()[:n], c.me*n); err != nil {
		return err
	}
	_, err = c.sync()
	return err
}

// fcollectPush is FCollect on a team that spans hosts, for blocks that
// do not fit one message: after the entry exchange every member puts its
// src into every other member's dst, each put adding 1 to that member's
// word 7, copies it into its own, and returns once its word 7 has grown
// by n-1 since before the entry exchange. Every write into a member's
// dst is counted by that member, so, as in broadcastScatter, there is no
// exit exchange, which over TCP is a round of messages.
func fcollectPush[T shmem.Elem](c *call, dst, src shmem.Sym[T]) error {
	g0 := atomic.LoadUint64(&c.lw[wordGather]) // quiet: see broadcastScatter
	if _, err := c.sync(); err != nil {
		return err
	}
	n := src.Len()
	v := src.Local()[:n]
	d := dst.Slice(c.me*n, (c.me+1)*n)
	count := c.words.Slice(wordGather, wordGather+1)
	for s := 1; s < c.n; s++ {
		w := c.world((c.me + s) % c.n)
		traceSignal(c, d, w, wordGather, shmem.SignalAdd, 1)
		if err := shmem.PutSignal(d, v, count, 1, shmem.SignalAdd, w); err != nil {
			return err
		}
	}
	copyElems(dst.Local()[c.me*n:(c.me+1)*n], v)
	return c.await(wordGather, g0+uint64(c.n-1))
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
// dst and src must not overlap. On a flat team, when every member's
// block fits one scratch message, the call is one exchange.
func Collect[T shmem.Elem](t *shmem.Team, dst, src shmem.Sym[T], n int) (total int, err error) {
	var c call
	if err := c.begin(t); err != nil {
		return 0, err
	}
	defer func() { err = c.end(err) }()
	k := kindOf[T]()
	c.what = info{name: "Collect", k: k, n: n, root: -1}
	c.fail(symCheck(&c, src, "src"))
	c.fail(symCheck(&c, dst, "dst"))
	if n < 0 {
		c.fail(fmt.Errorf("collective: %v: a negative count: %w", c.what, shmem.ErrInvalid))
	}
	c.fail(lenCheck(src, n, "src", c.what))
	if n > collectMax(c.n) {
		c.fail(fmt.Errorf("collective: %v on a %d-PE team: counts above %d do not fit the header's sum: %w", c.what, c.n, collectMax(c.n), shmem.ErrOutOfBounds))
	}
	if c.local == nil && overlaps(dst, src) {
		c.fail(fmt.Errorf("collective: %v: dst and src overlap: %w", c.what, shmem.ErrInvalid))
	}
	c.desc = digest(collCollect, uint64(k), uint64(c.algo), dst.Offset(), src.Offset())
	// The entry exchange carries, in every header, the member's count
	// and whether its block rides in the message (the sum's low and high
	// bits: counts are below 2^48, teams below 2^15 members), and the
	// smallest dst. When every block rode along the call is over;
	// otherwise the blocks go by puts, as in FCollect.
	h := c.newHeader(c.desc)
	// A gathered exchange takes long messages only when they are all
	// long (exchangeGather): there a block rides along only if short.
	inMsg := c.local == nil && c.oneMessage(n*sizeOf[T]()) && (!c.gathers() || n*sizeOf[T]() <= c.g.relayPayload())
	payload := 0
	if c.local == nil {
		h.minAux, h.sum = uint64(dst.Len()), uint64(n)
		if inMsg {
			payload = n * sizeOf[T]()
		} else {
			h.sum += 1 << countBits
		}
		c.lw[wordCount] = uint64(n) // read by the others until the exit exchange
	}
	msg := c.message(payload)
	h.put(msg)
	if inMsg {
		copy(msg[hdrBytes:], bytesOf(src.Local()[:n]))
	}
	if err := c.exchange(msg, nil); err != nil {
		return 0, err
	}
	h = readHeader(msg)
	if err := c.verdict(h); err != nil {
		return 0, err
	}
	total, allIn := int(h.sum&(1<<countBits-1)), h.sum>>countBits == 0
	if h.minAux < uint64(total) {
		// Every member sees the same sums and decides the same.
		return 0, fmt.Errorf("collective: %v: the total is %d elements, and a member's dst (%d here) has only %d: %w",
			c.what, total, dst.Len(), h.minAux, shmem.ErrOutOfBounds)
	}
	// countOf is member j's count: from its message on a flat team,
	// else from its count word.
	countOf := func(j int) (int, error) {
		if j == c.me {
			return n, nil
		}
		if c.g.flat {
			return int(readHeader(c.inbox(j, hdrBytes)).sum & (1<<countBits - 1)), nil
		}
		cnt, err := shmem.G(c.words, wordCount, c.world(j))
		return int(cnt), err
	}
	if allIn {
		// Only flat teams get here (oneMessage): copy the blocks out.
		dl, off := dst.Local(), 0
		for j := range c.n {
			cnt, _ := countOf(j)
			in := msg
			if j != c.me {
				in = c.inbox(j, hdrBytes+cnt*sizeOf[T]())
			}
			copy(dl[off:off+cnt], elems[T](in[hdrBytes:], cnt))
			off += cnt
		}
		return total, nil
	}
	off := 0
	for j := 0; j < c.me; j++ {
		cnt, err := countOf(j)
		if err != nil {
			return 0, err
		}
		off += cnt
	}
	if err := pushAll(&c, dst, src.Local()[:n], off); err != nil {
		return 0, err
	}
	_, err = c.sync()
	return total, err
}

// countBits is the width of the count in a Collect header's sum; the
// bits above count the members whose block did not ride in the message.
const countBits = 48

// collectMax is the largest count a member of an np-member team may give
// Collect: np of them sum to less than 2^countBits, so the sum of the
// counts never carries into the bits above (on a 2-PE team, 2^47-1
// elements; on the largest team, 2^33), and no more than an int holds
// (math.MaxInt on a 32-bit machine).
func collectMax(np int) int { return int(min((1<<countBits-1)/uint64(np), math.MaxInt)) }

// pushAll puts v into dst[off:off+len(v)] on every member, this one
// included, starting with the right-hand neighbour so that no member is
// written by all at once, and completes them for the exit exchange
// (complete).
func pushAll[T shmem.Elem](c *call, dst shmem.Sym[T], v []T, off int) error {
	d := dst.Slice(off, off+len(v))
	for s := 1; s <= c.n; s++ {
		traceRange(c, tWrite, d, 0, len(v), c.world((c.me+s)%c.n))
		if err := shmem.Put(d, v, c.world((c.me+s)%c.n)); err != nil {
			return err
		}
	}
	return c.complete()
}
