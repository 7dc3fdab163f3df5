package netmesh

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/errs"
)

// A peer that sends many small GETs and reads none of the replies makes
// this side hold at most replyCopyMax bytes of copied reply payloads;
// the replies past that go out by reference to the segment, and every
// reply still carries the right bytes.
func TestReplyCopiesBounded(t *testing.T) {
	const (
		mem  = 1 << 16
		n    = 40000 // replies of 2 KiB: 80 MiB, more than the kernel buffers and the cap
		size = copyMax
	)
	p, r := rawJob(t, mem, func(c *Config) { c.Heartbeat = time.Hour })
	copy(p.mem, pattern(mem, 3))
	want := pattern(mem, 3)
	var reqs []byte
	for i := 0; i < n; i++ {
		reqs = appendGet(reqs, uint32(i+1), uint64(i%16)*size, size)
	}
	// A fetch-add that asks for no reply, after the GETs: once Notify saw
	// it, every GET was applied (frames are applied in order).
	reqs = appendAtomic(reqs, 0, byte(OpFetchAdd), 8, mem-8, 1, 0)
	r.send(reqs)
	deadline := time.Now().Add(20 * time.Second)
	for p.applied.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the GETs were not all applied")
		}
		time.Sleep(time.Millisecond)
	}
	q := p.m.Link(0).streams[0].q
	q.mu.Lock()
	copied, resps := q.copied, q.resps
	q.mu.Unlock()
	t.Logf("copied %d, resps %d", copied, resps)
	if copied > replyCopyMax {
		t.Fatalf("%d copied reply bytes queued, past the %d cap", copied, replyCopyMax)
	}
	if resps == 0 {
		t.Fatal("no reply was left queued: the test did not fill the queue")
	}
	for i := 0; i < n; i++ {
		f, err := r.read(10 * time.Second)
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		off := (i % 16) * size
		if f.Type != typeGetResp || f.ID != uint32(i+1) || !bytes.Equal(f.Payload, want[off:off+size]) {
			t.Fatalf("reply %d: %s id %d, %d bytes, right bytes %v", i, typeName(f.Type), f.ID, len(f.Payload), bytes.Equal(f.Payload, want[off:off+size]))
		}
	}
}

// A Flush that gets no reply within the timeout fails with errs.Timeout
// and takes the link down before it returns: the GetNBI it was to
// complete is failed, no reader is left, and a reply that comes later is
// never written into the caller's slice.
func TestFailedFlushWritesNothingLate(t *testing.T) {
	p, r := rawJob(t, 1<<16, func(c *Config) {
		c.Timeout = 300 * time.Millisecond
		c.Heartbeat = time.Hour
	})
	l := p.m.Link(0)
	dst := make([]byte, 8)
	if err := l.GetNBI(dst, 0); err != nil {
		t.Fatal(err)
	}
	get, err := r.readUntil(typeGet, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	err = l.Flush()
	if !errors.Is(err, errs.Timeout) {
		t.Fatalf("unanswered flush: %v", err)
	}
	if !errors.Is(l.Err(), errs.PeerLost) {
		t.Fatalf("link after the failed flush: %v", l.Err())
	}
	for _, st := range l.streams {
		st.rmu.Lock()
		live := !st.tok.ended || st.tok.held()
		st.rmu.Unlock()
		if live {
			t.Fatal("a stream still has a reader after the failed flush returned")
		}
	}
	// The late reply finds nobody to apply it.
	r.c.Write(append(appendGetResp(nil, get.ID, statusOK, 8), bytes.Repeat([]byte{0xEE}, 8)...))
	if !bytes.Equal(dst, make([]byte, 8)) {
		t.Fatalf("dst %x after the failed flush", dst)
	}
}
