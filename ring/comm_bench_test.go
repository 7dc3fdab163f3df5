package ring

import (
	"context"
	"fmt"
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// BenchmarkComm: ping-pong (one-way ns) and osu_bw-style windows between
// two goroutine PEs; goshbench's comm suites are the reported figures
// (docs/ring.md), this is for profiling.
func BenchmarkComm(b *testing.B) {
	for _, size := range []int{8, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("pingpong/%d", size), func(b *testing.B) { commBench(b, size, 0) })
		b.Run(fmt.Sprintf("window/%d", size), func(b *testing.B) { commBench(b, size, 64) })
	}
}

func commBench(b *testing.B, size, window int) {
	err := shmem.Run(2, func(pe *shmem.PE) error {
		c, err := NewComm(pe.World())
		if err != nil {
			return err
		}
		ctx, me := context.Background(), pe.MyPE()
		buf := make([]byte, size)
		var reply [4]byte
		if err := pe.BarrierAll(); err != nil {
			return err
		}
		if me == 0 {
			b.SetBytes(int64(size))
			b.ResetTimer()
		}
		for i := 0; i < b.N; i++ {
			switch {
			case window == 0 && me == 0:
				if err := Send(ctx, c, 1, 1, buf); err != nil {
					return err
				}
				if _, err := Recv(ctx, c, 1, 1, buf); err != nil {
					return err
				}
			case window == 0:
				if _, err := Recv(ctx, c, 0, 1, buf); err != nil {
					return err
				}
				if err := Send(ctx, c, 0, 1, buf); err != nil {
					return err
				}
			case me == 0:
				if err := Send(ctx, c, 1, 2, buf); err != nil {
					return err
				}
				if i%window == window-1 || i == b.N-1 {
					if _, err := Recv(ctx, c, 1, 3, reply[:]); err != nil {
						return err
					}
				}
			default:
				if _, err := Recv(ctx, c, 0, 2, buf); err != nil {
					return err
				}
				if i%window == window-1 || i == b.N-1 {
					if err := Send(ctx, c, 0, 3, reply[:]); err != nil {
						return err
					}
				}
			}
		}
		if me == 0 {
			b.StopTimer()
		}
		if err := pe.BarrierAll(); err != nil {
			return err
		}
		return c.Close()
	}, shmem.WithHeapSize(64<<20))
	if err != nil {
		b.Fatal(err)
	}
}
