package shmem_test

import (
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// BenchmarkExtendedAtomics compares the float atomics with the integer
// atomics of the same width: blocking fetch and swap from PE 0 on a word
// of PE 1, over shared memory (goroutine PEs) and over TCP (pretend
// hosts). The sub-benchmarks of one route share one job and alternate
// float and integer, so that the machine's load drifts across both.
func BenchmarkExtendedAtomics(b *testing.B) {
	for _, route := range []struct {
		name  string
		hosts []string
	}{{"shm", nil}, {"tcp", pretendHosts("remote", 2)}} {
		opts := []shmem.Option{shmem.WithTimeout(10 * time.Minute), shmem.WithHeapSize(1 << 20)}
		if route.hosts != nil {
			opts = append(opts, shmem.WithHosts(route.hosts))
		}
		err := shmem.Run(2, func(pe *shmem.PE) error {
			u64, err := shmem.Malloc[uint64](pe, 16)
			if err != nil {
				return err
			}
			f64, err := shmem.Malloc[float64](pe, 16)
			if err != nil {
				return err
			}
			u32, err := shmem.Malloc[uint32](pe, 32)
			if err != nil {
				return err
			}
			f32, err := shmem.Malloc[float32](pe, 32)
			if err != nil {
				return err
			}
			if pe.MyPE() == 0 {
				for _, op := range []string{"fetch", "swap"} {
					swap := op == "swap"
					b.Run(route.name+"/"+op+"-uint64", func(b *testing.B) { benchAtomic(b, u64, swap) })
					b.Run(route.name+"/"+op+"-float64", func(b *testing.B) { benchAtomic(b, f64, swap) })
					b.Run(route.name+"/"+op+"-uint32", func(b *testing.B) { benchAtomic(b, u32, swap) })
					b.Run(route.name+"/"+op+"-float32", func(b *testing.B) { benchAtomic(b, f32, swap) })
				}
			}
			return pe.BarrierAll()
		}, opts...)
		if err != nil {
			b.Fatal(err)
		}
	}
}

func benchAtomic[T shmem.ExtendedElem](b *testing.B, s shmem.Sym[T], swap bool) {
	var sink T
	for i := 0; i < b.N; i++ {
		var v T
		var err error
		if swap {
			v, err = shmem.AtomicSwap(s, 0, T(i), 1)
		} else {
			v, err = shmem.AtomicFetch(s, 0, 1)
		}
		if err != nil {
			b.Fatal(err)
		}
		sink += v
	}
	_ = sink
}
