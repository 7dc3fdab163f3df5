package netmesh

import (
	"encoding/binary"
	"testing"
	"time"
)

// A thousand small blocks leave in a few writes, not a thousand, and
// land where their strides say.
func TestPutBlocksBatches(t *testing.T) {
	pes := newJob(t, 2, 1<<20, "127.0.0.1", nil)
	l := link(t, pes, 0, 1)
	const width, n, dstStride, srcStride = 8, 1000, 3 * 8, 2 * 8
	src := pattern(n*srcStride, 9)
	q := l.streams[0].q
	q.mu.Lock()
	taken := q.taken
	q.mu.Unlock()
	if err := l.PutBlocks(4096, dstStride, src, srcStride, width, n); err != nil {
		t.Fatal(err)
	}
	q.mu.Lock()
	writes := q.taken - taken
	q.mu.Unlock()
	if writes > 4 {
		t.Errorf("%d blocks took %d batches", n, writes)
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	p := pes[1]
	p.sync()
	for k := 0; k < n; k++ {
		if got, want := p.mem[4096+k*dstStride:][:width], src[k*srcStride:][:width]; string(got) != string(want) {
			t.Fatalf("block %d: %x, want %x", k, got, want)
		}
	}
}

// A small blocking Put waits in the batch for company: with a Flush after
// it, both leave in one write; alone, it still arrives, within corkDelay,
// with no other call to carry it. For the first part the wait is
// stretched to an hour, so that a test goroutine descheduled for longer
// than corkDelay between Put and Flush (under load, -race) cannot split
// them.
func TestPutCork(t *testing.T) {
	pes := newJob(t, 2, 1<<16, "127.0.0.1", func(c *Config) { c.Heartbeat = time.Hour })
	l := link(t, pes, 0, 1)
	q := l.streams[0].q
	batches, setCork := corkControls(q)
	setCork(time.Hour)
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
	setCork(corkDelay)
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

// A small PutNBI (up to copyMax, copied into the batch) is corked like a
// small blocking Put: it wakes no writer goroutine, a window of them
// leaves with the Flush's FLUSH in one write, Push sends what waits at
// once, and a lone one still arrives within corkDelay. A larger one is
// not corked: the writer goroutine takes it.
func TestPutNBICork(t *testing.T) {
	pes := newJob(t, 2, 1<<16, "127.0.0.1", func(c *Config) { c.Heartbeat = time.Hour })
	l := link(t, pes, 0, 1)
	q := l.streams[0].q
	batches, setCork := corkControls(q)
	p := pes[1]
	setCork(time.Hour)
	before := batches()
	for i := range 64 {
		if err := l.PutNBI(uint64(8*i), []byte{byte(i), 1, 2, 3, 4, 5, 6, 7}); err != nil {
			t.Fatal(err)
		}
		if !q.waiting.Load() {
			t.Fatalf("PutNBI %d was not corked", i)
		}
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := batches() - before; n != 1 {
		t.Errorf("64 PutNBIs + Flush took %d writes, want 1", n)
	}
	p.sync()
	for i := range 64 {
		if p.mem[8*i] != byte(i) || p.mem[8*i+7] != 7 {
			t.Fatalf("PutNBI %d: segment bytes %v", i, p.mem[8*i:8*i+8])
		}
	}
	// Push sends what waits at once.
	base := p.applied.Load()
	if err := l.PutNBI(600, []byte("ABCDEFGH")); err != nil {
		t.Fatal(err)
	}
	pes[0].m.Push()
	if q.waiting.Load() {
		t.Fatal("Push left a corked PutNBI waiting")
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.applied.Load() == base {
		if time.Now().After(deadline) {
			t.Fatal("a pushed PutNBI never arrived")
		}
		time.Sleep(100 * time.Microsecond)
	}
	// Alone, it leaves within corkDelay.
	setCork(corkDelay)
	base = p.applied.Load()
	if err := l.PutNBI(608, []byte("abcdefgh")); err != nil {
		t.Fatal(err)
	}
	for p.applied.Load() == base {
		if time.Now().After(deadline) {
			t.Fatal("a lone PutNBI never left its batch")
		}
		time.Sleep(100 * time.Microsecond)
	}
	// Past copyMax: not corked.
	big := make([]byte, copyMax+1)
	if err := l.PutNBI(1024, big); err != nil {
		t.Fatal(err)
	}
	if q.waiting.Load() {
		t.Error("a PutNBI of copyMax+1 bytes was corked")
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	p.sync()
	if string(p.mem[600:616]) != "ABCDEFGHabcdefgh" {
		t.Fatalf("segment %q", p.mem[600:616])
	}
}

// Small PutSignalNBIs are corked as small PutNBIs are: a window of them
// and its Flush leave in one write, each data before its signal; one of
// more than copyMax bytes is not corked.
func TestPutSignalNBICork(t *testing.T) {
	pes := newJob(t, 2, 1<<16, "127.0.0.1", func(c *Config) { c.Heartbeat = time.Hour })
	l := link(t, pes, 0, 1)
	q := l.streams[0].q
	batches, setCork := corkControls(q)
	p := pes[1]
	setCork(time.Hour)
	before := batches()
	for i := range 64 {
		if err := l.PutSignalNBI(uint64(8*i), []byte{byte(i), 1, 2, 3, 4, 5, 6, 7}, 4096, true, 1); err != nil {
			t.Fatal(err)
		}
		if !q.waiting.Load() {
			t.Fatalf("PutSignalNBI %d was not corked", i)
		}
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := batches() - before; n != 1 {
		t.Errorf("64 PutSignalNBIs + Flush took %d writes, want 1", n)
	}
	p.sync()
	for i := range 64 {
		if p.mem[8*i] != byte(i) || p.mem[8*i+7] != 7 {
			t.Fatalf("PutSignalNBI %d: segment bytes %v", i, p.mem[8*i:8*i+8])
		}
	}
	if s := binary.LittleEndian.Uint64(p.mem[4096:]); s != 64 {
		t.Fatalf("signal %d after 64 adds of 1", s)
	}
	big := make([]byte, copyMax+1)
	if err := l.PutSignalNBI(1024, big, 4104, false, 9); err != nil {
		t.Fatal(err)
	}
	if q.waiting.Load() {
		t.Error("a PutSignalNBI of copyMax+1 bytes was corked")
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	p.sync()
	if s := binary.LittleEndian.Uint64(p.mem[4104:]); s != 9 {
		t.Fatalf("signal %d after a set to 9", s)
	}
}
