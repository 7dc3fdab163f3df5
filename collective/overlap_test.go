package collective

import (
	"fmt"
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// The overlap rule of Reduce, AllReduce, Broadcast and the scans: the n
// elements a call writes, dst[0:n], are either src itself (dst and src
// start at the same element; dst may be longer) or share no element with
// src. Both kinds work, small and large; any other overlap is refused
// (errors_test.go's "partly overlapping" cases).

var _ = register("overlap", func(pe *shmem.PE) error {
	b, err := newBufs[int32](pe, 128)
	if err != nil {
		return err
	}
	t := pe.World()
	salt := 0
	for _, n := range []int{4, 40} {
		for _, tail := range []bool{false, true} {
			for _, coll := range []string{"AllReduce", "Reduce", "Broadcast", "InScan", "ExScan"} {
				salt++
				if err := checkOverlap(t, b.src, coll, n, tail, salt); err != nil {
					return fmt.Errorf("%s of %d, dst's tail over src %v: %w", coll, n, tail, err)
				}
			}
		}
	}
	return nil
})

// checkOverlap runs coll on s with src = s[0:n] and dst = s[0:n+3]
// (in place, with three more elements that must be left alone), or, for
// tail, src = s[n:2n] and dst = s[0:2n] (dst's first n elements apart
// from src, the rest of dst over src, which must be left alone).
func checkOverlap(t *shmem.Team, s shmem.Sym[int32], coll string, n int, tail bool, salt int) error {
	me, np := t.MyPE(), t.NPEs()
	root := np - 1
	l := s.Local()
	fill(l, sentinel[int32]())
	srcAt := 0
	dst := s.Slice(0, n+3)
	if tail {
		srcAt, dst = n, s.Slice(0, 2*n)
	}
	src := s.Slice(srcAt, srcAt+n)
	for i := range n {
		l[srcAt+i] = val[int32](me, i, salt)
	}
	var err error
	switch coll {
	case "AllReduce":
		err = AllReduce(t, dst, src, Xor)
	case "Reduce":
		err = Reduce(t, dst, src, Sum, root)
	case "Broadcast":
		err = Broadcast(t, dst, src, root)
	case "InScan":
		err = InScan(t, dst, src, Max)
	case "ExScan":
		err = ExScan(t, dst, src, Prod)
	}
	if err != nil {
		return err
	}
	for i := range n {
		var want int32
		ok := true
		switch coll {
		case "AllReduce":
			want, _ = refReduce[int32](Xor, 0, np-1, i, salt)
		case "Reduce":
			want, _ = refReduce[int32](Sum, 0, np-1, i, salt)
			if me != root { // dst as it was: src in place, else the sentinel
				want = sentinel[int32]()
				if !tail {
					want = val[int32](me, i, salt)
				}
			}
		case "Broadcast":
			want = val[int32](root, i, salt)
		case "InScan":
			want, _ = refReduce[int32](Max, 0, me, i, salt)
		case "ExScan":
			want, ok = refReduce[int32](Prod, 0, me-1, i, salt)
			if !ok {
				want = 1 // the identity of Prod on member 0
			}
		}
		if l[i] != want {
			return fmt.Errorf("member %d of %d: element %d is %v, want %v", me, np, i, l[i], want)
		}
	}
	if tail {
		// src, under dst's tail, is as it was.
		for i := range n {
			if l[n+i] != val[int32](me, i, salt) {
				return fmt.Errorf("member %d: src[%d] changed to %v", me, i, l[n+i])
			}
		}
		return untouched(l, 2*n, len(l))
	}
	return untouched(l, n, len(l))
}

func TestOverlapRule(t *testing.T) {
	each(t, "overlap", []route{goroutines}, nil, 1, 2, 3, 4, 9)
	each(t, "overlap", []route{tcp, mixed}, nil, 3, 4)
}
