package collective

import (
	"fmt"
	"slices"
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// The matrix: every collective × every operator × a float, a signed, an
// unsigned and a complex type × teams of 1, 2, 3, 4, 5, 7 and 8 members
// (as many as the job has PEs; split off the world with positive and
// negative strides) × vector lengths 0, 1, odd ones on the
// recursive-doubling and the direct paths, each checked on every member
// against the serial reference. No barrier separates the calls: each PE
// refills its src and dst as soon as a call returns, which the
// ownership rule allows.

// Teams of up to flatMax (8) members exchange flat; 9, 11 and 12 take
// the recursive-doubling exchange, with and without extras.
var teamSizes = []int{1, 2, 3, 4, 5, 7, 8, 9, 11, 12}

func matrixLens() []int {
	if small {
		return []int{0, 1, 7, 41}
	}
	return []int{0, 1, 7, 13, 301}
}

// bufs are a type's symmetric buffers, allocated on the world.
type bufs[T shmem.Elem] struct{ src, dst shmem.Sym[T] }

func newBufs[T shmem.Elem](pe *shmem.PE, n int) (bufs[T], error) {
	s, err := shmem.Malloc[T](pe, n)
	if err != nil {
		return bufs[T]{}, err
	}
	d, err := shmem.Malloc[T](pe, n)
	return bufs[T]{s, d}, err
}

var _ = register("matrix", func(pe *shmem.PE) error {
	w := pe.NPEs()
	lens := matrixLens()
	capN := 3*slices.Max(lens)*w + 2
	bf, err1 := newBufs[float64](pe, capN)
	bi, err2 := newBufs[int32](pe, capN)
	bu, err3 := newBufs[uint16](pe, capN)
	bc, err4 := newBufs[complex64](pe, capN)
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			return err
		}
	}
	run := func(t *shmem.Team) error {
		salt := 0
		if err := suite(t, bf, lens, &salt); err != nil {
			return fmt.Errorf("float64: %w", err)
		}
		if err := suite(t, bi, lens, &salt); err != nil {
			return fmt.Errorf("int32: %w", err)
		}
		if err := suite(t, bu, lens, &salt); err != nil {
			return fmt.Errorf("uint16: %w", err)
		}
		if err := suite(t, bc, lens, &salt); err != nil {
			return fmt.Errorf("complex64: %w", err)
		}
		return nil
	}
	// The world team itself, the shared team (on mixed hosts, one per
	// host pair, all on the same slot), then split teams.
	if err := run(pe.World()); err != nil {
		return fmt.Errorf("world team of %d: %w", w, err)
	}
	if err := run(pe.Shared()); err != nil {
		return fmt.Errorf("shared team of %d: %w", pe.Shared().NPEs(), err)
	}
	return splitTeams(pe, func(size int) bool { return size <= w && !(small && size == w) }, run)
})

// splitTeams runs run on a team split off the world for each of
// teamSizes that want takes (splitFor says where), on its members,
// destroying each team after it: the matrices' loop over split teams.
func splitTeams(pe *shmem.PE, want func(size int) bool, run func(*shmem.Team) error) error {
	w := pe.NPEs()
	for _, size := range teamSizes {
		if !want(size) {
			continue
		}
		start, stride := splitFor(w, size)
		t, err := pe.World().Split(start, stride, size)
		if err != nil {
			return err
		}
		if t == nil {
			continue
		}
		if err := run(t); err != nil {
			return fmt.Errorf("team of %d (start %d, stride %d), member %d: %w", size, start, stride, t.MyPE(), err)
		}
		if err := t.Destroy(); err != nil {
			return err
		}
	}
	return nil
}

// splitFor is where the matrices split a team of size members off a
// world of w: odd sizes count down from the last PE (a negative stride);
// even ones take every other PE where the world is big enough.
func splitFor(w, size int) (start, stride int) {
	switch {
	case size%2 == 1:
		return w - 1, -1
	case 2*size <= w:
		return 1, 2
	}
	return 0, 1
}

// Every route runs an 8-PE job, so teams of 5, 7 and 8 also run over
// sockets, across processes and on mixed hosts.
func TestMatrix(t *testing.T) {
	each(t, "matrix", []route{goroutines}, nil, 1, 2, 3, 8, 12)
	each(t, "matrix", []route{tcp, processes}, nil, 3, 8)
	each(t, "matrix", []route{mixed, processesMixed}, nil, 4, 8)
}

// The forced algorithms over the same matrix, on one job each.
func TestMatrixAlgorithms(t *testing.T) {
	for _, a := range []string{"rd", "direct", "ring", "pushring", "halving", "chain"} {
		t.Run(a, func(t *testing.T) {
			each(t, "matrix", []route{goroutines}, []string{envAlgo + "=" + a}, 5, 10)
			each(t, "matrix", []route{mixed}, []string{envAlgo + "=" + a}, 4)
		})
	}
}

// suite runs every collective on team t for each length and operator.
func suite[T shmem.Elem](t *shmem.Team, b bufs[T], lens []int, salt *int) error {
	for _, n := range lens {
		for _, op := range allOps {
			if !valid[T](op) {
				continue
			}
			*salt++
			s := *salt
			if err := checkReduce(t, b, n, op, -1, s%3 == 0, s); err != nil {
				return fmt.Errorf("AllReduce(%v) of %d (salt %d): %w", op, n, s, err)
			}
			root := s % t.NPEs()
			if err := checkReduce(t, b, n, op, root, s%2 == 0, s); err != nil {
				return fmt.Errorf("Reduce(%v) of %d to %d (salt %d): %w", op, n, root, s, err)
			}
			if err := checkScan(t, b, n, op, true, s%2 == 1, s); err != nil {
				return fmt.Errorf("InScan(%v) of %d (salt %d): %w", op, n, s, err)
			}
			if err := checkScan(t, b, n, op, false, s%2 == 0, s); err != nil {
				return fmt.Errorf("ExScan(%v) of %d (salt %d): %w", op, n, s, err)
			}
		}
		*salt++
		s := *salt
		root := (s * 7) % t.NPEs()
		if err := checkBroadcast(t, b, n, root, s%2 == 0, s); err != nil {
			return fmt.Errorf("Broadcast of %d from %d (salt %d): %w", n, root, s, err)
		}
		if err := checkFCollect(t, b, n, s); err != nil {
			return fmt.Errorf("FCollect of %d (salt %d): %w", n, s, err)
		}
		if err := checkCollect(t, b, n, s); err != nil {
			return fmt.Errorf("Collect of up to %d (salt %d): %w", n, s, err)
		}
		if err := checkAllToAll(t, b, n, 1, 1, s); err != nil {
			return fmt.Errorf("AllToAll of %d (salt %d): %w", n, s, err)
		}
		if err := checkAllToAll(t, b, n, 2, 3, s); err != nil {
			return fmt.Errorf("AllToAllS of %d (salt %d): %w", n, s, err)
		}
	}
	return nil
}

// prepare fills this member's src[0:n] with its values and dst with the
// sentinel.
func prepare[T shmem.Elem](t *shmem.Team, b bufs[T], n, salt int) {
	sl := b.src.Local()
	for i := range n {
		sl[i] = val[T](t.MyPE(), i, salt)
	}
	fill(b.dst.Local(), sentinel[T]())
}

// untouched checks that d[lo:hi] still holds the sentinel.
func untouched[T shmem.Elem](d []T, lo, hi int) error {
	for i := lo; i < hi; i++ {
		if d[i] != sentinel[T]() {
			return fmt.Errorf("element %d was written (%v) outside the result", i, d[i])
		}
	}
	return nil
}

func checkReduce[T shmem.Elem](t *shmem.Team, b bufs[T], n int, op Op, root int, inPlace bool, salt int) error {
	prepare(t, b, n, salt)
	me, np := t.MyPE(), t.NPEs()
	dst, out := b.dst.Slice(0, n), b.dst.Local()
	if inPlace {
		dst, out = b.src.Slice(0, n), b.src.Local()
	}
	var err error
	if root < 0 {
		err = AllReduce(t, dst, b.src.Slice(0, n), op)
	} else {
		err = Reduce(t, dst, b.src.Slice(0, n), op, root)
	}
	if err != nil {
		return err
	}
	if root >= 0 && me != root {
		if inPlace {
			for i := range n {
				if out[i] != val[T](me, i, salt) {
					return fmt.Errorf("src[%d] on a non-root changed to %v", i, out[i])
				}
			}
			return nil
		}
		return untouched(out, 0, n+1)
	}
	for i := range n {
		want, _ := refReduce[T](op, 0, np-1, i, salt)
		if out[i] != want {
			return fmt.Errorf("member %d of %d: element %d is %v, want %v", me, np, i, out[i], want)
		}
	}
	return untouched(b.dst.Local(), map[bool]int{false: n, true: 0}[inPlace], n+1)
}

func checkScan[T shmem.Elem](t *shmem.Team, b bufs[T], n int, op Op, inclusive, inPlace bool, salt int) error {
	prepare(t, b, n, salt)
	me := t.MyPE()
	dst, out := b.dst.Slice(0, n), b.dst.Local()
	if inPlace {
		dst, out = b.src.Slice(0, n), b.src.Local()
	}
	var err error
	if inclusive {
		err = InScan(t, dst, b.src.Slice(0, n), op)
	} else {
		err = ExScan(t, dst, b.src.Slice(0, n), op)
	}
	if err != nil {
		return err
	}
	hi := me
	if !inclusive {
		hi--
	}
	for i := range n {
		want, ok := refReduce[T](op, 0, hi, i, salt)
		if !ok { // member 0 of an ExScan: the identity
			x := val[T](7, i, salt)
			if ref(op, out[i], x) != x || ref(op, x, out[i]) != x {
				return fmt.Errorf("member 0: element %d is %v, not the identity of %v", i, out[i], op)
			}
			continue
		}
		if out[i] != want {
			return fmt.Errorf("member %d: element %d is %v, want %v", me, i, out[i], want)
		}
	}
	if !inPlace {
		return untouched(out, n, n+1)
	}
	return nil
}

func checkBroadcast[T shmem.Elem](t *shmem.Team, b bufs[T], n, root int, inPlace bool, salt int) error {
	prepare(t, b, n, salt)
	me := t.MyPE()
	dst, out := b.dst.Slice(0, n), b.dst.Local()
	if inPlace {
		dst, out = b.src.Slice(0, n), b.src.Local()
	}
	if err := Broadcast(t, dst, b.src.Slice(0, n), root); err != nil {
		return err
	}
	for i := range n {
		if want := val[T](root, i, salt); out[i] != want {
			return fmt.Errorf("member %d: element %d is %v, want %v", me, i, out[i], want)
		}
	}
	if !inPlace {
		return untouched(out, n, n+1)
	}
	return nil
}

func checkFCollect[T shmem.Elem](t *shmem.Team, b bufs[T], n, salt int) error {
	prepare(t, b, n, salt)
	np := t.NPEs()
	if err := FCollect(t, b.dst.Slice(0, n*np), b.src.Slice(0, n)); err != nil {
		return err
	}
	out := b.dst.Local()
	for j := range np {
		for i := range n {
			if want := val[T](j, i, salt); out[j*n+i] != want {
				return fmt.Errorf("member %d: element %d of member %d's block is %v, want %v", t.MyPE(), i, j, out[j*n+i], want)
			}
		}
	}
	return untouched(out, n*np, n*np+1)
}

// collectCount is member j's count in the Collect salted salt: 0..n,
// different across members.
func collectCount(j, n, salt int) int { return (j*3 + salt) % (n + 1) }

func checkCollect[T shmem.Elem](t *shmem.Team, b bufs[T], n, salt int) error {
	return checkCollectCounts(t, b, n, salt, func(j int) int { return collectCount(j, n, salt) })
}

// checkCollectCounts checks a Collect where member j contributes
// count(j) elements, none more than n.
func checkCollectCounts[T shmem.Elem](t *shmem.Team, b bufs[T], n, salt int, count func(j int) int) error {
	prepare(t, b, n, salt)
	np, me := t.NPEs(), t.MyPE()
	want := 0
	for j := range np {
		want += count(j)
	}
	got, err := Collect(t, b.dst.Slice(0, want), b.src, count(me))
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("member %d: total %d, want %d", me, got, want)
	}
	out := b.dst.Local()
	off := 0
	for j := range np {
		for i := range count(j) {
			if v := val[T](j, i, salt); out[off+i] != v {
				return fmt.Errorf("member %d: element %d of member %d's block is %v, want %v", me, i, j, out[off+i], v)
			}
		}
		off += count(j)
	}
	return untouched(out, want, want+1)
}

func checkAllToAll[T shmem.Elem](t *shmem.Team, b bufs[T], n, dstStride, srcStride, salt int) error {
	np, me := t.NPEs(), t.MyPE()
	fill(b.dst.Local(), sentinel[T]())
	sl := b.src.Local()
	for x := range n * np {
		sl[x*srcStride] = val[T](me, x, salt)
	}
	var err error
	if dstStride == 1 && srcStride == 1 {
		err = AllToAll(t, b.dst, b.src, n)
	} else {
		err = AllToAllS(t, b.dst, b.src, dstStride, srcStride, n)
	}
	if err != nil {
		return err
	}
	out := b.dst.Local()
	for j := range np {
		for e := range n {
			at := (j*n + e) * dstStride
			if want := val[T](j, me*n+e, salt); out[at] != want {
				return fmt.Errorf("member %d: element %d from member %d is %v, want %v", me, e, j, out[at], want)
			}
			for g := 1; g < dstStride; g++ {
				if out[at+g] != sentinel[T]() {
					return fmt.Errorf("member %d: element %d between strides was written", me, at+g)
				}
			}
		}
	}
	return untouched(out, n*np*dstStride, n*np*dstStride+1)
}
