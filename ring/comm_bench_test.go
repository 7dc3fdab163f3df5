package ring

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// BenchmarkComm: ping-pong (one-way ns) and osu_bw-style windows (from
// PE 0 to PE 1, and rwindow from PE 1 to PE 0) between
// two goroutine PEs (over shared memory, and on two pretend hosts over
// loopback TCP), and between two processes (PE 1 is this test binary
// re-executed, as BenchmarkLane's processes; -cpuprofile then profiles
// PE 0); goshbench's comm suites are the reported figures
// (docs/ring.md), this is for profiling.
func BenchmarkComm(b *testing.B) {
	for _, route := range []string{"goroutines", "tcp", "processes"} {
		for _, size := range []int{8, 64 << 10, 1 << 20} {
			for _, window := range []int{0, 64, -64} {
				name := fmt.Sprintf("%s/pingpong/%d", route, size)
				if window > 0 {
					name = fmt.Sprintf("%s/window/%d", route, size)
				}
				if window < 0 {
					name = fmt.Sprintf("%s/rwindow/%d", route, size)
				}
				b.Run(name, func(b *testing.B) {
					b.SetBytes(int64(size))
					var d time.Duration
					var err error
					if route == "processes" {
						d, err = benchJobFor(b).run(stepComm, size, b.N, window)
					} else {
						opts := []shmem.Option{shmem.WithHeapSize(64 << 20)}
						if route == "tcp" {
							opts = append(opts, shmem.WithHosts([]string{"a", "b"}))
						}
						err = shmem.Run(2, func(pe *shmem.PE) error {
							t, err := commSteps(pe, size, b.N, window)
							if pe.MyPE() == 0 {
								d = t
							}
							return err
						}, opts...)
					}
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "ns/op")
				})
			}
		}
	}
}

// commSteps runs count ping-pongs (window 0) or count Sends in windows
// of window, each answered by a 4-byte reply, between PE 0 and PE 1 of
// a new Comm, and returns PE 0's time.
func commSteps(pe *shmem.PE, size, count, window int) (time.Duration, error) {
	c, err := NewComm(pe.World())
	if err != nil {
		return 0, err
	}
	ctx, me := context.Background(), pe.MyPE()
	peer := 1 - me
	if window < 0 {
		window, me = -window, 1-me // PE 1 sends, PE 0 (profiled) receives
	}
	buf := make([]byte, size)
	var reply [4]byte
	if err := pe.BarrierAll(); err != nil {
		return 0, err
	}
	start := time.Now()
	for i := 0; i < count; i++ {
		switch {
		case window == 0 && me == 0:
			if err := Send(ctx, c, peer, 1, buf); err != nil {
				return 0, err
			}
			if _, err := Recv(ctx, c, peer, 1, buf); err != nil {
				return 0, err
			}
		case window == 0:
			if _, err := Recv(ctx, c, peer, 1, buf); err != nil {
				return 0, err
			}
			if err := Send(ctx, c, peer, 1, buf); err != nil {
				return 0, err
			}
		case me == 0:
			if err := Send(ctx, c, peer, 2, buf); err != nil {
				return 0, err
			}
			if i%window == window-1 || i == count-1 {
				if _, err := Recv(ctx, c, peer, 3, reply[:]); err != nil {
					return 0, err
				}
			}
		default:
			if _, err := Recv(ctx, c, peer, 2, buf); err != nil {
				return 0, err
			}
			if i%window == window-1 || i == count-1 {
				if err := Send(ctx, c, peer, 3, reply[:]); err != nil {
					return 0, err
				}
			}
		}
	}
	d := time.Since(start)
	if window == 0 {
		d /= 2 // one way
	}
	if err := pe.BarrierAll(); err != nil {
		return 0, err
	}
	return d, c.Close()
}
