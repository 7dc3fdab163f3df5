package netmesh

import (
	"testing"
	"time"

	"github.com/goshmem/goshmem/heap"
)

// A non-fetching atomic (AtomicNBI with no destination: shmem's
// AtomicAdd, a ring's acknowledgement) is corked like a small blocking
// Put: it wakes no writer goroutine, leaves with the next frame written
// on the stream (here a PutSignal, as a ring's next message carries its
// receiver's ack), is sent at once by Push, and alone still arrives
// within corkDelay. For the first part the cork is stretched to an hour
// (see TestPutCork).
func TestAtomicNoReplyCork(t *testing.T) {
	pes := newJob(t, 2, 1<<16, "127.0.0.1", func(c *Config) { c.Heartbeat = time.Hour })
	l := link(t, pes, 0, 1)
	q := l.streams[0].q
	batches, setCork := corkControls(q)
	p := pes[1]
	// The reader applies the adds atomically: read the word so too.
	word := func() uint64 { return heap.AtomicAt(p.mem, 64, 8, heap.OpFetch, 0, 0) }
	waitWord := func(want uint64, what string) {
		deadline := time.Now().Add(5 * time.Second)
		for word() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: word %d, want %d", what, word(), want)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	setCork(time.Hour)
	before := batches()
	if err := l.AtomicNBI(8, OpFetchAdd, 64, 1, 0, nil); err != nil {
		t.Fatal(err)
	}
	if !q.waiting.Load() {
		t.Fatal("a non-fetching atomic was not corked")
	}
	if err := l.PutSignal(0, []byte("12345678"), 128, false, 7); err != nil {
		t.Fatal(err)
	}
	if n := batches() - before; n != 1 {
		t.Errorf("atomic + PutSignal took %d writes, want 1", n)
	}
	waitWord(1, "atomic before a PutSignal")
	// Push sends what waits at once.
	if err := l.AtomicNBI(8, OpFetchAdd, 64, 2, 0, nil); err != nil {
		t.Fatal(err)
	}
	pes[0].m.Push()
	if q.waiting.Load() {
		t.Fatal("Push left a corked atomic waiting")
	}
	waitWord(3, "pushed atomic")
	// Alone, it leaves within corkDelay.
	setCork(corkDelay)
	if err := l.AtomicNBI(8, OpFetchAdd, 64, 4, 0, nil); err != nil {
		t.Fatal(err)
	}
	waitWord(7, "lone atomic")
	// A Flush covers it.
	if err := l.AtomicNBI(8, OpFetchAdd, 64, 8, 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	if w := word(); w != 15 {
		t.Fatalf("after Flush the word is %d, want 15", w)
	}
}

// corkControls reads how many batches q took (writes, when nobody else
// writes) and sets how long a corked frame waits (q.cork).
func corkControls(q *sendQueue) (batches func() uint64, setCork func(time.Duration)) {
	batches = func() uint64 {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.taken
	}
	setCork = func(d time.Duration) {
		q.mu.Lock()
		defer q.mu.Unlock()
		q.cork = d
	}
	return batches, setCork
}
