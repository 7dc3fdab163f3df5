package shmem_test

import (
	"slices"
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// atomicWords are one word of each width and kind on every PE, each in
// a 128-byte stretch of its own.
type atomicWords struct {
	u64 shmem.Sym[uint64]
	f64 shmem.Sym[float64]
	u32 shmem.Sym[uint32]
	f32 shmem.Sym[float32]
}

// onAtomicRoutes runs fn on PE 0 of a 2-PE job over shared memory
// (goroutine PEs) and over TCP (pretend hosts) in turn; PE 1 is idle.
func onAtomicRoutes(b *testing.B, fn func(route string, w atomicWords)) {
	for _, route := range []struct {
		name  string
		hosts []string
	}{{"shm", nil}, {"tcp", pretendHosts("remote", 2)}} {
		opts := []shmem.Option{shmem.WithTimeout(10 * time.Minute), shmem.WithHeapSize(1 << 20)}
		if route.hosts != nil {
			opts = append(opts, shmem.WithHosts(route.hosts))
		}
		err := shmem.Run(2, func(pe *shmem.PE) error {
			var w atomicWords
			var err error
			if w.u64, err = shmem.Malloc[uint64](pe, 16); err != nil {
				return err
			}
			if w.f64, err = shmem.Malloc[float64](pe, 16); err != nil {
				return err
			}
			if w.u32, err = shmem.Malloc[uint32](pe, 32); err != nil {
				return err
			}
			if w.f32, err = shmem.Malloc[float32](pe, 32); err != nil {
				return err
			}
			if pe.MyPE() == 0 {
				fn(route.name, w)
			}
			return pe.BarrierAll()
		}, opts...)
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExtendedAtomics compares the float atomics with the integer
// atomics of the same width: blocking fetch and swap from PE 0 on a word
// of PE 1, over shared memory and over TCP. The sub-benchmarks of one
// route share one job and alternate float and integer.
func BenchmarkExtendedAtomics(b *testing.B) {
	onAtomicRoutes(b, func(route string, w atomicWords) {
		for _, op := range []string{"fetch", "swap"} {
			swap := op == "swap"
			b.Run(route+"/"+op+"-uint64", func(b *testing.B) { burstAtomic(b, w.u64, swap, b.N) })
			b.Run(route+"/"+op+"-float64", func(b *testing.B) { burstAtomic(b, w.f64, swap, b.N) })
			b.Run(route+"/"+op+"-uint32", func(b *testing.B) { burstAtomic(b, w.u32, swap, b.N) })
			b.Run(route+"/"+op+"-float32", func(b *testing.B) { burstAtomic(b, w.f32, swap, b.N) })
		}
	})
}

// BenchmarkFloatVsIntAtomics measures the float atomics against the
// integer atomics of their width under a noisy load: each iteration
// times a burst of the integer op and a burst of the float op back to
// back (in alternating order) on words of the same PE, and the result is
// the median of the per-pair ratios (float/int; 1 is the same cost), so
// a load that drifts between bursts cancels out. Run it with a fixed
// count, e.g. -benchtime 101x.
func BenchmarkFloatVsIntAtomics(b *testing.B) {
	onAtomicRoutes(b, func(route string, w atomicWords) {
		burst := 20000
		if route == "tcp" {
			burst = 200
		}
		for _, op := range []string{"fetch", "swap"} {
			swap := op == "swap"
			b.Run(route+"/"+op+"-64", func(b *testing.B) {
				pairedRatio(b, burst, func(n int) { burstAtomic(b, w.u64, swap, n) }, func(n int) { burstAtomic(b, w.f64, swap, n) })
			})
			b.Run(route+"/"+op+"-32", func(b *testing.B) {
				pairedRatio(b, burst, func(n int) { burstAtomic(b, w.u32, swap, n) }, func(n int) { burstAtomic(b, w.f32, swap, n) })
			})
		}
	})
}

func pairedRatio(b *testing.B, burst int, intOp, floatOp func(n int)) {
	ratios := make([]float64, 0, b.N)
	var intNs, floatNs float64
	for i := 0; i < b.N; i++ {
		var ti, tf time.Duration
		if i%2 == 0 {
			start := time.Now()
			intOp(burst)
			ti = time.Since(start)
			start = time.Now()
			floatOp(burst)
			tf = time.Since(start)
		} else {
			start := time.Now()
			floatOp(burst)
			tf = time.Since(start)
			start = time.Now()
			intOp(burst)
			ti = time.Since(start)
		}
		ratios = append(ratios, float64(tf)/float64(ti))
		intNs += float64(ti.Nanoseconds()) / float64(burst)
		floatNs += float64(tf.Nanoseconds()) / float64(burst)
	}
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "float/int")
	b.ReportMetric(intNs/float64(b.N), "int-ns/op")
	b.ReportMetric(floatNs/float64(b.N), "float-ns/op")
}

func burstAtomic[T shmem.ExtendedElem](b *testing.B, s shmem.Sym[T], swap bool, n int) {
	for i := 0; i < n; i++ {
		var err error
		if swap {
			_, err = shmem.AtomicSwap(s, 0, T(i), 1)
		} else {
			_, err = shmem.AtomicFetch(s, 0, 1)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}
