package shmem_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// BenchmarkContextQuietBesideStream: on PE 0 of two pretend hosts (TCP
// loopback, one process), a goroutine with its own context does 8-byte
// put + Quiet to PE 1, alone or while another goroutine with its own
// context streams 1 MiB NBI puts (and Quiets) to the same PE. ns/op is
// the small put+Quiet; MB/s is what the streaming goroutine moved.
//
//	go test -run '^$' -bench ContextQuietBesideStream ./shmem/
func BenchmarkContextQuietBesideStream(b *testing.B) {
	for _, beside := range []bool{false, true} {
		name := "alone"
		if beside {
			name = "beside-1MiB-stream"
		}
		b.Run(name, func(b *testing.B) {
			err := shmem.Run(2, func(pe *shmem.PE) error {
				small, err := shmem.Malloc[int64](pe, 1)
				if err != nil {
					return err
				}
				big, err := shmem.Malloc[byte](pe, 1<<20)
				if err != nil {
					return err
				}
				if err := pe.BarrierAll(); err != nil {
					return err
				}
				if pe.MyPE() == 0 {
					cs, err := pe.NewContext()
					if err != nil {
						return err
					}
					defer cs.Close()
					h := small.Via(cs)
					if err := shmem.P(h, 0, 1, 1); err != nil { // opens its stream
						return err
					}
					if err := cs.Quiet(); err != nil {
						return err
					}
					var (
						stop  atomic.Bool
						moved atomic.Int64
						wg    sync.WaitGroup
						serrc = make(chan error, 1)
					)
					if beside {
						cb, err := pe.NewContext()
						if err != nil {
							return err
						}
						defer cb.Close()
						src := make([]byte, 1<<20)
						wg.Add(1)
						go func() {
							defer wg.Done()
							for !stop.Load() {
								for k := 0; k < 4; k++ {
									if err := shmem.PutNBI(big.Via(cb), src, 1); err != nil {
										serrc <- err
										return
									}
								}
								if err := cb.Quiet(); err != nil {
									serrc <- err
									return
								}
								moved.Add(4 << 20)
							}
						}()
						for moved.Load() == 0 && len(serrc) == 0 { // the stream is flowing
							time.Sleep(time.Millisecond)
						}
					}
					b.ResetTimer()
					start := time.Now()
					m0 := moved.Load()
					for i := 0; i < b.N; i++ {
						if err := shmem.P(h, 0, int64(i), 1); err != nil {
							return err
						}
						if err := cs.Quiet(); err != nil {
							return err
						}
					}
					b.StopTimer()
					if beside {
						b.ReportMetric(float64(moved.Load()-m0)/time.Since(start).Seconds()/1e6, "MB/s")
					}
					stop.Store(true)
					wg.Wait()
					select {
					case err := <-serrc:
						return err
					default:
					}
				}
				return pe.BarrierAll()
			}, shmem.WithTimeout(60*time.Second), shmem.WithHeapSize(8<<20), shmem.WithHosts(pretendHosts("remote", 2)))
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}
