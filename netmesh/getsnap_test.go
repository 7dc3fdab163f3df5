package netmesh

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// A GET reply carries the segment as it was when the GET was applied
// (docs/memory-model.md, "Gets over TCP"), also when the kernel takes the
// reply only after a later frame of the stream wrote those bytes. The
// raw peer sends a GET of 16 MiB, a GET of 64 KiB, then a frame that
// writes into both ranges, and reads nothing until PE 1 applied that
// frame: the socket buffers take a few MiB of the first reply, the rest
// of it waits for the writer goroutine, and the second reply is queued
// behind it. Both replies must carry the old bytes.
func TestGetReplyBeforeLaterWrite(t *testing.T) {
	const (
		mem   = 24 << 20
		big   = MaxPayload // more than the socket buffers take while nobody reads
		small = 64 << 10   // past copyMax: sent by reference too
	)
	writes := []struct {
		name    string
		notify  uint64 // Notify calls the frame makes
		enc     func() []byte
		touched func(seg []byte) // what the frame does to the segment
	}{
		{"put", 1, func() []byte {
			// From 1 MiB before the end of the first range to the end of the second.
			off, n := uint64(big-1<<20), uint32(1<<20+small)
			return append(appendPut(nil, off, n), pattern(int(n), 9)...)
		}, func(seg []byte) { copy(seg[big-1<<20:big+small], pattern(1<<20+small, 9)) }},
		{"put-signal", 2, func() []byte {
			// The payload at the end of the second range, the signal word at
			// the end of the first.
			return append(appendPutSignal(nil, big+small-4096, 4096, big-8, signalAdd, 5), pattern(4096, 9)...)
		}, func(seg []byte) {
			copy(seg[big+small-4096:big+small], pattern(4096, 9))
			le.PutUint64(seg[big-8:], le.Uint64(seg[big-8:])+5)
		}},
		{"atomic", 1, func() []byte {
			// A fetch-add that asks for no reply, on the last word of the first range.
			return appendAtomic(nil, 0, byte(OpFetchAdd), 8, big-8, 7, 0)
		}, func(seg []byte) { le.PutUint64(seg[big-8:], le.Uint64(seg[big-8:])+7) }},
	}
	for _, w := range writes {
		t.Run(w.name, func(t *testing.T) {
			p, r := rawJob(t, mem, func(c *Config) { c.Heartbeat = time.Hour })
			copy(p.mem, pattern(mem, 3))
			old := pattern(mem, 3)
			var reqs []byte
			reqs = appendGet(reqs, 1, 0, big)
			reqs = appendGet(reqs, 2, big, small)
			reqs = append(reqs, w.enc()...)
			r.send(reqs)
			// Frames are applied in order: once Notify saw the write, both
			// GETs were applied before it.
			deadline := time.Now().Add(20 * time.Second)
			for p.applied.Load() < w.notify {
				if time.Now().After(deadline) {
					t.Fatal("the frames were not applied")
				}
				time.Sleep(time.Millisecond)
			}
			q := p.m.Link(0).streams[0].q
			q.mu.Lock()
			resps := q.resps
			q.mu.Unlock()
			if resps < 2 {
				t.Fatalf("%d replies left queued when the write was applied: the test did not hold them", resps)
			}
			for i, want := range [][]byte{old[:big], old[big : big+small]} {
				f, err := r.readUntil(typeGetResp, 20*time.Second)
				if err != nil {
					t.Fatalf("reply %d: %v", i+1, err)
				}
				if f.ID != uint32(i+1) || len(f.Payload) != len(want) {
					t.Fatalf("reply %d: id %d, %d bytes; want id %d, %d bytes", i+1, f.ID, len(f.Payload), i+1, len(want))
				}
				if k := firstDiff(f.Payload, want); k >= 0 {
					t.Fatalf("reply %d differs from the segment as it was when its GET was applied from byte %d of %d on: it shows the later %s",
						i+1, k, len(want), w.name)
				}
			}
			want := pattern(mem, 3)
			w.touched(want)
			p.sync()
			if k := firstDiff(p.mem, want); k >= 0 {
				t.Fatalf("the segment differs from the write's result at byte %d", k)
			}
		})
	}
}

// The same through two meshes and the Link API, as a program uses it:
// GetNBI, then a Put into the bytes it reads, then Flush. PE 0 holds its
// own applier at the reply until PE 1 applied the put, so the reply is
// still being written when the put changes the bytes; dst must show the
// bytes before the put.
func TestGetNBIThenPutSameBytes(t *testing.T) {
	for _, n := range []int{64 << 10, 1 << 20, MaxPayload} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			pes := newJob(t, 2, MaxPayload, "127.0.0.1", func(c *Config) {
				c.Streams = 1
				c.Heartbeat = time.Hour
			})
			copy(pes[1].mem, pattern(MaxPayload, 4))
			old := pattern(n, 4)
			entered, release := holdWhere(t, func(rank, from, _, _ int) bool { return rank == 0 && from == 1 })
			l := link(t, pes, 0, 1)
			dst := make([]byte, n)
			if err := l.GetNBI(dst, 0); err != nil {
				t.Fatal(err)
			}
			select {
			case <-entered:
			case <-time.After(bound):
				t.Fatal("the reply did not arrive")
			}
			if err := l.Put(0, pattern(n, 8)); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(bound)
			for pes[1].applied.Load() == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the put was not applied")
				}
				time.Sleep(time.Millisecond)
			}
			release()
			if err := l.Flush(); err != nil {
				t.Fatal(err)
			}
			if k := firstDiff(dst, old); k >= 0 {
				t.Fatalf("dst differs from the bytes before the put from byte %d of %d on", k, n)
			}
			pes[1].sync()
			if !bytes.Equal(pes[1].mem[:n], pattern(n, 8)) {
				t.Fatal("the put did not land")
			}
		})
	}
}
