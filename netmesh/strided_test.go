package netmesh

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/errs"
)

// PutStrided places every element where its stride says, leaves the
// bytes between them alone, and sends a thousand elements in a few
// writes, not a thousand.
func TestPutStrided(t *testing.T) {
	pes := newJob(t, 2, 1<<20, "127.0.0.1", nil)
	l := link(t, pes, 0, 1)
	const width, n, dstStride, srcStride = 8, 1000, 3, 2
	src := pattern(n*srcStride*width, 9)
	q := l.streams[0].q
	q.mu.Lock()
	taken := q.taken
	q.mu.Unlock()
	if err := l.PutStrided(4096, dstStride, src, srcStride, width, n); err != nil {
		t.Fatal(err)
	}
	q.mu.Lock()
	writes := q.taken - taken
	q.mu.Unlock()
	if writes > 4 {
		t.Errorf("%d elements took %d batches", n, writes)
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	p := pes[1]
	p.sync()
	for k := 0; k < n; k++ {
		got := p.mem[4096+k*dstStride*width:][:width]
		want := src[k*srcStride*width:][:width]
		if string(got) != string(want) {
			t.Fatalf("element %d: %x, want %x", k, got, want)
		}
		if k < n-1 {
			gap := p.mem[4096+k*dstStride*width+width:][:(dstStride-1)*width]
			for _, c := range gap {
				if c != 0 {
					t.Fatalf("byte between elements %d and %d written", k, k+1)
				}
			}
		}
	}
}

// Bad arguments are errors before anything is queued, whatever the
// products of counts and strides would overflow to.
func TestPutStridedRefuses(t *testing.T) {
	pes := newJob(t, 2, 1<<16, "127.0.0.1", nil)
	l := link(t, pes, 0, 1)
	src := make([]byte, 64)
	q := l.streams[0].q
	for _, c := range []struct {
		name                    string
		off                     uint64
		dstStride, srcStride, n int
		width                   int
		want                    error
	}{
		{"zero stride", 0, 0, 1, 2, 8, errs.Invalid},
		{"wide element", 0, 1, 1, 1, copyMax + 1, errs.Invalid},
		{"source too short", 0, 1, 1, 9, 8, errs.OutOfBounds},
		{"huge source stride", 0, 1, math.MaxInt / 4, 2, 8, errs.OutOfBounds},
		{"huge destination stride", 0, 1 << 62, 1, 2, 8, errs.OutOfBounds},
		{"overflowing count", 0, 1 << 40, 1, 1 << 30, 8, errs.OutOfBounds},
		{"past the segment", 1<<16 - 8, 2, 1, 2, 8, errs.OutOfBounds},
	} {
		sent := q.sent.Load()
		err := l.PutStrided(c.off, c.dstStride, src, c.srcStride, c.width, c.n)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if q.sent.Load() != sent {
			t.Errorf("%s: frames were queued", c.name)
		}
	}
	if err := l.PutStrided(1<<16-8, 1, src, 1, 8, 1); err != nil {
		t.Fatalf("the last word: %v", err)
	}
}

// A small blocking Put waits in the batch for company: with a Flush after
// it, both leave in one write; alone, it still arrives, within corkDelay,
// with no other call to carry it.
func TestPutCork(t *testing.T) {
	pes := newJob(t, 2, 1<<16, "127.0.0.1", func(c *Config) { c.Heartbeat = time.Hour })
	l := link(t, pes, 0, 1)
	q := l.streams[0].q
	batches := func() uint64 {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.taken
	}
	before := batches()
	if err := l.Put(0, []byte("12345678")); err != nil {
		t.Fatal(err)
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := batches() - before; n != 1 {
		t.Errorf("Put + Flush took %d writes, want 1", n)
	}
	p := pes[1]
	base := p.applied.Load()
	if err := l.Put(8, []byte("abcdefgh")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.applied.Load() == base {
		if time.Now().After(deadline) {
			t.Fatal("a lone blocking Put never left its batch")
		}
		time.Sleep(100 * time.Microsecond)
	}
	p.sync()
	if string(p.mem[:16]) != "12345678abcdefgh" {
		t.Fatalf("segment %q", p.mem[:16])
	}
	// Push sends what waits at once.
	base = p.applied.Load()
	if err := l.Put(16, []byte("ABCDEFGH")); err != nil {
		t.Fatal(err)
	}
	pes[0].m.Push()
	if q.waiting.Load() {
		t.Fatal("Push left a corked put waiting")
	}
	for p.applied.Load() == base {
		if time.Now().After(deadline) {
			t.Fatal("a pushed Put never arrived")
		}
		time.Sleep(100 * time.Microsecond)
	}
}
