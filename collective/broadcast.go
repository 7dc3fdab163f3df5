package collective

import (
	"fmt"
	"sync/atomic"

	"github.com/goshmem/goshmem/shmem"
)

// Broadcast copies src of member root into dst on every member of t,
// the root included: src.Len() elements, which must be the same on every
// member, into a dst at least as long. Only the root's src is read. In
// place, dst and src start at the same element; any other overlap of
// dst[0:src.Len()] with src is ErrInvalid on every member.
func Broadcast[T shmem.Elem](t *shmem.Team, dst, src shmem.Sym[T], root int) (err error) {
	var c call
	if err := c.begin(t); err != nil {
		return err
	}
	defer func() { err = c.end(err) }()
	k := kindOf[T]()
	n := src.Len()
	c.what.name, c.what.k, c.what.n, c.what.root = "Broadcast", k, n, root // as in reduce
	c.fail(symCheck(&c, src, "src"))
	c.fail(symCheck(&c, dst, "dst"))
	if root < 0 || root >= c.n {
		c.fail(fmt.Errorf("collective: %v of a %d-PE team: %w", c.what, c.n, shmem.ErrBadPE))
	}
	c.fail(lenCheck(dst, n, "dst", c.what))
	c.fail(aliasCheck(dst, src, n, c.what))
	c.desc = digest(collBroadcast, uint64(k), uint64(n), uint64(root), uint64(c.algo), dst.Offset(), src.Offset())
	if c.local != nil {
		_, err := c.sync()
		return err
	}
	if c.useRD(n*sizeOf[T](), sizeOf[T]()) {
		return broadcastRD(&c, dst, src, root)
	}
	if c.far && c.n == 2 {
		return broadcastPair(&c, dst, src, root)
	}
	if c.far {
		return broadcastScatter(&c, dst, src, root)
	}
	return broadcastDirect(&c, dst, src, root)
}

// broadcastRD sends the root's data through the team's scratch: a
// message's header sum is 1 when its payload holds the data, and a
// member without the data takes it from the first message that has it
// (on a flat team, the root's own; with recursive doubling, log2(n)
// message times, like a binomial tree). No entry handshake: no member
// writes another's dst. Longer vectors go in pieces, as in reduceRD.
func broadcastRD[T shmem.Elem](c *call, dst, src shmem.Sym[T], root int) error {
	n, sz := src.Len(), sizeOf[T]()
	per := c.g.payloadCap() / sz
	sl, dl := src.Local(), dst.Local()
	for off := 0; ; off += per {
		m := min(per, n-off)
		msg := c.message(m * sz)
		h := c.newHeader(c.desc)
		if c.me == root {
			h.sum = 1
			copy(msg[hdrBytes:], bytesOf(sl[off:off+m]))
		}
		h.put(msg)
		err := c.exchange(msg, func(in []byte) {
			if readHeader(msg).sum == 0 && readHeader(in).sum != 0 {
				copy(msg[hdrBytes:], in[hdrBytes:])
			}
		})
		if err != nil {
			return err
		}
		if off == 0 {
			if err := c.verdict(readHeader(msg)); err != nil {
				return err
			}
		}
		if c.me != root || dst.Offset() != src.Offset() {
			copy(dl[off:off+m], elems[T](msg[hdrBytes:], m))
		}
		if off+m >= n {
			return nil
		}
	}
}

// broadcastDirect: an entry exchange, then every member copies the
// root's src straight into its own dst (over shared memory, from the
// root's mapped heap: one copy per member, all at once), then an exit
// exchange so the root's src is not reused while others read it.
func broadcastDirect[T shmem.Elem](c *call, dst, src shmem.Sym[T], root int) error {
	if _, err := c.sync(); err != nil {
		return err
	}
	n := src.Len()
	if err := fetchInto(c, dst.Local()[:n], src, 0, n, c.world(root)); err != nil {
		return err
	}
	_, err := c.sync()
	return err
}

// broadcastPair is Broadcast on two members on different hosts: after
// the entry exchange the root puts its src into the other's dst, the
// last piece as a PutSignal (and copies it into its own dst), and the
// other returns once the signal came. As in reducePair, nothing more is
// written into either dst and nobody reads the root's src once the
// blocking PutSignal returned, so there is no exit exchange (scatter +
// allgather would cost two more exchanges and gain nothing between two).
// The vector goes in pieces of up to pairPiece bytes, the signal with
// the last.
func broadcastPair[T shmem.Elem](c *call, dst, src shmem.Sym[T], root int) error {
	if _, err := c.sync(); err != nil {
		return err
	}
	n := src.Len()
	base := c.lw[wordStepSeq]
	c.lw[wordStepSeq] = base + 1
	if c.me != root {
		return c.await(wordRingIn, base+1)
	}
	sl := src.Local()
	other := c.world(1 - c.me)
	per := max(1, pairPiece/sizeOf[T]())
	off := 0
	for ; n-off > per; off += per {
		traceRange(c, tWrite, dst, off, off+per, other)
		if err := shmem.Put(dst.Slice(off, off+per), sl[off:off+per], other); err != nil {
			return err
		}
	}
	sig := c.words.Slice(wordRingIn, wordRingIn+1)
	traceSignal(c, dst.Slice(off, n), other, wordRingIn, shmem.SignalSet, base+1)
	if err := shmem.PutSignal(dst.Slice(off, n), sl[off:n], sig, base+1, shmem.SignalSet, other); err != nil {
		return err
	}
	// The root's own copy comes last, while the other member takes in
	// the data: not before the data leaves.
	if dst.Offset() != src.Offset() {
		copyElems(dst.Local()[:n], sl[:n])
	}
	return nil
}

// pairPiece is the most broadcastPair puts at once. Over TCP one 2 MiB
// PutSignal made a 2-PE Broadcast of 2 MiB 16 % slower than the two
// 1 MiB puts of scatter + allgather before it (451 against 389 µs,
// medians of 6 alternated rounds, docs/performance.md): netmesh's
// reader polls for payloads of up to 1 MiB and parks on larger ones.
// reducePair's 512 KiB pieces (pairPieceBytes), where the folds overlap
// the transfers, made it 1.6x slower at 2 and 4 MiB (ten alternated
// rounds, 2026-12-04, docs/collectives.md): here pieces only cost.
const pairPiece = 1 << 20

// broadcastScatter is scatter + allgather, for teams that span hosts,
// where every member reading the root's src (broadcastDirect) would make
// the root's link carry the vector once per member. After the entry
// exchange the root puts chunk j of its src (partition) into member j's
// dst, signalling j's word 3 with the call's step value, then its own
// chunk, adding 1 to j's word 7; it then copies its whole src into its
// own dst and returns. Member j, once its chunk is there, puts it into
// the dst of every member but the root and itself, each put adding 1 to
// that member's word 7, and returns once its word 7 has grown by n-1
// since before the entry exchange (the root's chunk and the n-2 others'):
// a pushing algorithm (docs/collectives.md, "The ownership rule"), every
// write into a member's dst counted by that member, so there is no
// middle or exit exchange. Each member sends about 2/n of the vector,
// the root included. An empty chunk is still sent, as its signal alone,
// so the counts are the same at every size.
//
// Word 7 is quiet when a call begins: every add into it of an earlier
// call (this one's, a Reduce's gather) was awaited by its owner before
// that call returned, and none of this call's comes before the entry
// exchange, so g0, read before it, is the base.
func broadcastScatter[T shmem.Elem](c *call, dst, src shmem.Sym[T], root int) error {
	g0 := atomic.LoadUint64(&c.lw[wordGather])
	if _, err := c.sync(); err != nil {
		return err
	}
	n := src.Len()
	base := c.lw[wordStepSeq]
	c.lw[wordStepSeq] = base + 1
	chunkSig := c.words.Slice(wordRingIn, wordRingIn+1)
	countSig := c.words.Slice(wordGather, wordGather+1)
	if c.me == root {
		sl := src.Local()
		rlo, rhi := partition(n, c.n, root)
		for s := 1; s < c.n; s++ {
			j := (c.me + s) % c.n
			w := c.world(j)
			lo, hi := partition(n, c.n, j)
			traceSignal(c, dst.Slice(lo, hi), w, wordRingIn, shmem.SignalSet, base+1)
			if err := shmem.PutSignal(dst.Slice(lo, hi), sl[lo:hi], chunkSig, base+1, shmem.SignalSet, w); err != nil {
				return err
			}
			traceSignal(c, dst.Slice(rlo, rhi), w, wordGather, shmem.SignalAdd, 1)
			if err := shmem.PutSignal(dst.Slice(rlo, rhi), sl[rlo:rhi], countSig, 1, shmem.SignalAdd, w); err != nil {
				return err
			}
		}
		copyElems(dst.Local()[:n], sl[:n])
		return nil
	}
	if err := c.await(wordRingIn, base+1); err != nil {
		return err
	}
	lo, hi := partition(n, c.n, c.me)
	mine := dst.Local()[lo:hi]
	for s := 1; s < c.n; s++ {
		j := (c.me + s) % c.n
		if j == root {
			continue
		}
		traceSignal(c, dst.Slice(lo, hi), c.world(j), wordGather, shmem.SignalAdd, 1)
		if err := shmem.PutSignal(dst.Slice(lo, hi), mine, countSig, 1, shmem.SignalAdd, c.world(j)); err != nil {
			return err
		}
	}
	return c.await(wordGather, g0+uint64(c.n-1))
}
