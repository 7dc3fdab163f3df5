package ring

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// BenchmarkCommCost times the calls of one 8-byte message, one at a
// time, between two goroutine PEs, for a Comm and for a raw ring lane
// (Safe, capacity 8, acknowledged every Depth/2 as ring-latency does):
// PE 0's Send, and PE 1's Recv of a message that is complete in its lane
// (PE 1 first waits for the lane's pub word, untimed, then times the
// call). So neither figure holds a wait: what is left is the CPU each
// layer spends per message on top of the cache lines it moves, which a
// ping-pong's one-way time adds up (send-ns and recv-ns). PE 0 waits for
// PE 1's word before the next message (untimed).
func BenchmarkCommCost(b *testing.B) {
	for _, kind := range []string{"comm", "lane"} {
		b.Run(kind, func(b *testing.B) {
			var send, recv time.Duration
			err := shmem.Run(2, func(pe *shmem.PE) error {
				s, r, err := costSteps(pe, kind, b.N)
				if pe.MyPE() == 0 {
					send = s
				} else {
					recv = r
				}
				return err
			}, shmem.WithHeapSize(64<<20))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(send.Nanoseconds())/float64(b.N), "send-ns")
			b.ReportMetric(float64(recv.Nanoseconds())/float64(b.N), "recv-ns")
			b.ReportMetric(float64((send+recv).Nanoseconds())/float64(b.N), "ns/op")
		})
	}
}

func costSteps(pe *shmem.PE, kind string, n int) (send, recv time.Duration, err error) {
	me := pe.MyPE()
	flag, err := shmem.Malloc[uint64](pe, 16)
	if err != nil {
		return 0, 0, err
	}
	defer shmem.Free(flag)
	var sendOne func() error
	var recvOne func() error
	var pub *uint64
	buf := make([]byte, 8)
	ctx := context.Background()
	if kind == "comm" {
		c, err := NewComm(pe.World())
		if err != nil {
			return 0, 0, err
		}
		defer c.Close()
		if me == 1 {
			pub = c.e.r.inFr[0].pubWord
		}
		sendOne = func() error { return Send(ctx, c, 1, 1, buf) }
		recvOne = func() error { _, err := Recv(ctx, c, 0, 1, buf); return err }
	} else {
		const depth = 64
		r, err := New(pe, []Lane{{From: 0, To: 1, Depth: depth, Capacity: 8}}, Safe)
		if err != nil {
			return 0, 0, err
		}
		defer r.Close()
		if me == 1 {
			pub = r.inFr[0].pubWord
		}
		sendOne = func() error { _, err := r.Send(1, buf); return err }
		recvOne = func() error {
			m, err := r.Recv()
			if err != nil {
				return err
			}
			copy(buf, m.Data)
			if m.Seq%(depth/2) == 0 {
				return r.Ack(0, m.Seq)
			}
			return nil
		}
	}
	if err := pe.BarrierAll(); err != nil {
		return 0, 0, err
	}
	for i := uint64(1); i <= uint64(n); i++ {
		if me == 0 {
			t := time.Now()
			if err := sendOne(); err != nil {
				return 0, 0, err
			}
			send += time.Since(t)
			if err := shmem.WaitUntil(flag, 0, shmem.CmpGE, i); err != nil {
				return 0, 0, err
			}
			continue
		}
		for atomic.LoadUint64(pub) < i { // lanes are new: message i is seq i
		}
		t := time.Now()
		if err := recvOne(); err != nil {
			return 0, 0, err
		}
		recv += time.Since(t)
		if err := shmem.P(flag, 0, i, 0); err != nil {
			return 0, 0, err
		}
	}
	return send, recv, pe.BarrierAll()
}
