package netmesh

import (
	"math/rand/v2"
	"testing"
)

// plan covers a transfer exactly, in order, with at most one part per
// stream, on stripe boundaries.
func TestPlan(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	for iter := 0; iter < 2000; iter++ {
		k := 1 + rng.IntN(maxStreams)
		l := &Link{streams: make([]*stream, k)}
		for i := range l.streams {
			l.streams[i] = &stream{idx: i}
		}
		n := 1 + rng.IntN(64<<20)
		if iter%3 == 0 {
			n = stripeMin + rng.IntN(4*stripeMin)
		}
		off := rng.Uint64N(1 << 40)
		var buf [maxStreams]part
		ps := plan(l.streams, off, n, &buf)
		if len(ps) > k || (n < stripeMin && len(ps) != 1) {
			t.Fatalf("n=%d k=%d: %d parts", n, k, len(ps))
		}
		lo := 0
		for i, p := range ps {
			if p.lo != lo || p.off != off+uint64(lo) || p.n <= 0 || p.st.idx != i {
				t.Fatalf("n=%d k=%d part %d: %+v", n, k, i, p)
			}
			if i < len(ps)-1 && p.n%stripeAlign != 0 {
				t.Fatalf("n=%d k=%d part %d of %d bytes: not on a stripe boundary", n, k, i, p.n)
			}
			lo += p.n
		}
		if lo != n {
			t.Fatalf("n=%d k=%d: parts cover %d", n, k, lo)
		}
	}
}
