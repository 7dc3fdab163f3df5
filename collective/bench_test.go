package collective

import (
	"fmt"
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// Per-call latency of each collective on 2 and 4 goroutine PEs of one
// process (shared memory), at a few sizes: the time PE 0 measures over
// b.N back-to-back calls. Next to it, copy() of the same bytes on this
// machine, measured in the same run, as the limit to compare with.
//
//	go test -run '^$' -bench . -benchtime 2000x ./collective/

var benchSizes = []int{8, 1 << 10, 64 << 10, 1 << 20} // bytes

func sizeName(b int) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%dMiB", b>>20)
	case b >= 1<<10:
		return fmt.Sprintf("%dKiB", b>>10)
	}
	return fmt.Sprintf("%dB", b)
}

// benchColl runs f(pe, i) b.N times on every PE of an n-PE job and
// reports PE 0's time per call.
func benchColl(b *testing.B, n, elems int, f func(t *shmem.Team, d, s shmem.Sym[float64]) error, dstElems int) {
	err := shmem.Run(n, func(pe *shmem.PE) error {
		src, err := shmem.Malloc[float64](pe, elems)
		if err != nil {
			return err
		}
		dst, err := shmem.Malloc[float64](pe, max(dstElems, elems))
		if err != nil {
			return err
		}
		for i := range src.Local() {
			src.Local()[i] = float64(i % 7)
		}
		t := pe.World()
		for range 10 { // warm up: fault the pages in, settle the scheduler
			if err := f(t, dst, src); err != nil {
				return err
			}
		}
		if err := pe.BarrierAll(); err != nil {
			return err
		}
		if pe.MyPE() == 0 {
			b.ResetTimer()
		}
		for range b.N {
			if err := f(t, dst, src); err != nil {
				return err
			}
		}
		if pe.MyPE() == 0 {
			b.StopTimer()
		}
		return pe.BarrierAll()
	}, shmem.WithHeapSize(64<<20))
	if err != nil {
		b.Fatal(err)
	}
}

func benchAll(b *testing.B, name string, dstFactor int, f func(t *shmem.Team, d, s shmem.Sym[float64]) error) {
	for _, n := range []int{2, 4} {
		for _, sz := range benchSizes {
			elems := sz / 8
			b.Run(fmt.Sprintf("%dPE/%s", n, sizeName(sz)), func(b *testing.B) {
				b.SetBytes(int64(sz))
				benchColl(b, n, elems, f, elems*map[bool]int{true: n, false: 1}[dstFactor > 1])
			})
		}
	}
}

func BenchmarkAllReduce(b *testing.B) {
	benchAll(b, "AllReduce", 1, func(t *shmem.Team, d, s shmem.Sym[float64]) error { return AllReduce(t, d, s, Sum) })
}

func BenchmarkReduce(b *testing.B) {
	benchAll(b, "Reduce", 1, func(t *shmem.Team, d, s shmem.Sym[float64]) error { return Reduce(t, d, s, Sum, 0) })
}

func BenchmarkBroadcast(b *testing.B) {
	benchAll(b, "Broadcast", 1, func(t *shmem.Team, d, s shmem.Sym[float64]) error { return Broadcast(t, d, s, 0) })
}

func BenchmarkFCollect(b *testing.B) {
	benchAll(b, "FCollect", 2, func(t *shmem.Team, d, s shmem.Sym[float64]) error { return FCollect(t, d, s) })
}

func BenchmarkAllToAll(b *testing.B) {
	// sz is the block per pair; src and dst hold a block per PE.
	for _, n := range []int{2, 4} {
		for _, sz := range benchSizes {
			elems := sz / 8
			b.Run(fmt.Sprintf("%dPE/%s", n, sizeName(sz)), func(b *testing.B) {
				b.SetBytes(int64(sz))
				err := shmem.Run(n, func(pe *shmem.PE) error {
					src, err := shmem.Malloc[float64](pe, elems*n)
					if err != nil {
						return err
					}
					dst, err := shmem.Malloc[float64](pe, elems*n)
					if err != nil {
						return err
					}
					if err := pe.BarrierAll(); err != nil {
						return err
					}
					if pe.MyPE() == 0 {
						b.ResetTimer()
					}
					for range b.N {
						if err := AllToAll(pe.World(), dst, src, elems); err != nil {
							return err
						}
					}
					if pe.MyPE() == 0 {
						b.StopTimer()
					}
					return pe.BarrierAll()
				}, shmem.WithHeapSize(64<<20))
				if err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

func BenchmarkBarrier(b *testing.B) {
	for _, n := range []int{2, 4} {
		b.Run(fmt.Sprintf("%dPE", n), func(b *testing.B) {
			benchColl(b, n, 1, func(t *shmem.Team, d, s shmem.Sym[float64]) error { return Barrier(t) }, 1)
		})
	}
}

// BenchmarkCopy is the limit: copy() of the same sizes, one goroutine.
func BenchmarkCopy(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sizeName(sz), func(b *testing.B) {
			s, d := make([]byte, sz), make([]byte, sz)
			b.SetBytes(int64(sz))
			for range b.N {
				copy(d, s)
			}
		})
	}
}

// BenchmarkSum4 is the direct algorithm's reduction step alone: a
// float64 Sum of four inputs into a fifth, one goroutine, with the
// vector loops (sum_amd64.s) where the machine has them and with the Go
// loops; bytes are one input's, as BenchmarkCopy's.
func BenchmarkSum4(b *testing.B) {
	was := vecSum
	defer func() { vecSum = was }()
	for _, v := range []bool{was, false} {
		for _, sz := range []int{4 << 10, 256 << 10} {
			b.Run(fmt.Sprintf("vector=%v/%s", v, sizeName(sz)), func(b *testing.B) {
				vecSum = v
				n := sz / 8
				in := make([][]float64, 5)
				for r := range in {
					in[r] = make([]float64, n)
				}
				b.SetBytes(int64(sz))
				for range b.N {
					combine4(kFloat64, Sum, in[4], in[0], in[1], in[2], in[3])
				}
			})
		}
		if !was {
			break
		}
	}
}
