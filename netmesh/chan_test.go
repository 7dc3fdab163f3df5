package netmesh

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/errs"
	"github.com/goshmem/goshmem/internal/testhook"
)

// bound is how long a test waits for something that must happen before
// it fails: a hang, not a slowness, is what it catches.
const bound = 20 * time.Second

// holdStream makes the mesh of rank hold every frame of the channel
// stream in slot, opened by the peer, before it is applied, until the
// returned release is called. entered is closed when the first frame is
// held.
func holdStream(t *testing.T, rank, slot int) (entered <-chan struct{}, release func()) {
	t.Helper()
	return holdWhere(t, func(r, _, s, _ int) bool { return r == rank && s == slot })
}

// holdWhere holds every frame that match selects (by testhook.Apply's
// arguments) before it is applied, until release is called; entered is
// closed when the first frame is held. Every applier passes through
// appliesSeen first (stripe_test.go).
func holdWhere(t *testing.T, match func(rank, from, slot, stream int) bool) (entered <-chan struct{}, release func()) {
	t.Helper()
	in, out := make(chan struct{}), make(chan struct{})
	var once, rel sync.Once
	hook := func(r, from, s, idx int) {
		appliesSeen()
		if !match(r, from, s, idx) {
			return
		}
		once.Do(func() { close(in) })
		<-out
	}
	testhook.Apply.Store(&hook)
	release = func() { rel.Do(func() { close(out) }) }
	t.Cleanup(func() {
		release()
		testhook.Apply.CompareAndSwap(&hook, nil)
	})
	return in, release
}

func waitDone(t *testing.T, what string, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(bound):
		t.Fatalf("%s did not complete within %v", what, bound)
	}
}

// Context A's operations to PE 1 are held at PE 1 before they are
// applied; context B's put and flush to the same PE complete meanwhile,
// and A's complete once released.
func TestChannelFlushIndependent(t *testing.T) {
	for _, streams := range []int{1, 3} {
		t.Run(fmt.Sprintf("streams=%d", streams), func(t *testing.T) {
			pes := newJob(t, 2, 1<<20, "127.0.0.1", func(c *Config) { c.Streams = streams })
			l := link(t, pes, 0, 1)
			a, err := l.OpenChannel()
			if err != nil {
				t.Fatal(err)
			}
			b, err := l.OpenChannel()
			if err != nil {
				t.Fatal(err)
			}
			if !a.Own() || !b.Own() || a.slot == b.slot {
				t.Fatalf("channels share: slots %d and %d", a.slot, b.slot)
			}
			entered, release := holdStream(t, 1, a.slot)
			big := pattern(300<<10, 7) // striped on the link's own streams, not on a channel's
			if err := a.PutNBI(0, big); err != nil {
				t.Fatal(err)
			}
			var word [8]byte
			binary.LittleEndian.PutUint64(word[:], 77)
			if err := a.PutNBI(512<<10, word[:]); err != nil {
				t.Fatal(err)
			}
			doneA := make(chan error, 1)
			go func() { doneA <- a.Flush() }()
			select {
			case <-entered:
			case <-time.After(bound):
				t.Fatal("PE 1 never started applying channel A's frames")
			}
			// B: a put, a get, an atomic and a flush, all while A is held.
			doneB := make(chan error, 1)
			go func() {
				if err := b.Put(600<<10, pattern(64, 9)); err != nil {
					doneB <- err
					return
				}
				if _, err := b.Atomic(8, OpFetchAdd, 700<<10, 5, 0); err != nil {
					doneB <- err
					return
				}
				doneB <- b.Flush()
			}()
			waitDone(t, "channel B's put, atomic and flush while A is held", doneB)
			pes[1].sync()
			if got := pes[1].mem[600<<10 : 600<<10+64]; string(got) != string(pattern(64, 9)) {
				t.Fatalf("B's put not applied after its flush: % x", got[:8])
			}
			if got := binary.LittleEndian.Uint64(pes[1].mem[700<<10:]); got != 5 {
				t.Fatalf("B's atomic: word is %d, want 5", got)
			}
			select {
			case err := <-doneA:
				t.Fatalf("A's flush returned (%v) while PE 1 held its frames", err)
			default:
			}
			if !a.Outstanding() || b.Outstanding() {
				t.Fatalf("outstanding: A %v (want true), B %v (want false)", a.Outstanding(), b.Outstanding())
			}
			release()
			waitDone(t, "channel A's flush after release", doneA)
			pes[1].sync()
			if string(pes[1].mem[:len(big)]) != string(big) || binary.LittleEndian.Uint64(pes[1].mem[512<<10:]) != 77 {
				t.Fatal("A's puts not applied after its flush")
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The link's Flush (a PE's Quiet: the default context's operations) does
// not wait for a channel's frames, held at the target; FlushAll (a PE's
// Finalize) does.
func TestLinkFlushAndChannels(t *testing.T) {
	pes := newJob(t, 2, 1<<16, "127.0.0.1", nil)
	l := link(t, pes, 1, 0) // the higher rank opens a channel stream: it dials
	ch, err := l.OpenChannel()
	if err != nil {
		t.Fatal(err)
	}
	if !ch.Own() {
		t.Fatal("no channel stream of its own")
	}
	entered, release := holdStream(t, 0, ch.slot)
	if err := ch.PutNBI(64, []byte("channel")); err != nil {
		t.Fatal(err)
	}
	if l.Outstanding() || !l.OutstandingAll() {
		t.Fatalf("a channel's outstanding put: Outstanding %v (want false), OutstandingAll %v (want true)", l.Outstanding(), l.OutstandingAll())
	}
	if err := l.Flush(); err != nil {
		t.Fatalf("the link's own Flush, which the held channel must not delay: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- l.FlushAll() }()
	<-entered
	select {
	case err := <-done:
		t.Fatalf("the link's FlushAll returned (%v) before the channel's put was applied", err)
	default:
	}
	release()
	waitDone(t, "the link's FlushAll", done)
	pes[0].sync()
	if string(pes[0].mem[64:71]) != "channel" {
		t.Fatalf("got %q", pes[0].mem[64:71])
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ch.Put(0, []byte{1}); !errors.Is(err, errs.Finalized) {
		t.Fatalf("put on a closed channel: %v", err)
	}
}

// Several goroutines, each with its own channel, put, get, add and
// flush with exact results, on both sides of a link at once; beyond the
// bound channels share streams; closing frees the slots on both sides.
func TestChannelsConcurrent(t *testing.T) {
	const workers, rounds = 6, 200
	pes := newJob(t, 2, 1<<20, "127.0.0.1", func(c *Config) { c.ChanStreams = 4 })
	counter := uint64(1 << 19) // an 8-byte counter on each PE
	var wg sync.WaitGroup
	errc := make(chan error, 2*workers)
	for side := 0; side < 2; side++ {
		l := link(t, pes, side, 1-side)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ch, err := l.OpenChannel()
				if err != nil {
					errc <- err
					return
				}
				defer ch.Close()
				if !ch.Own() {
					errc <- fmt.Errorf("side %d worker %d: no channel stream", side, w)
					return
				}
				base := uint64(side*workers+w) * 4096
				for i := 0; i < rounds; i++ {
					v := pattern(64, byte(i+w))
					if err := ch.PutNBI(base+uint64(i%32)*64, v); err != nil {
						errc <- err
						return
					}
					if _, err := ch.Atomic(8, OpFetchAdd, counter, 1, 0); err != nil {
						errc <- err
						return
					}
					if err := ch.Flush(); err != nil {
						errc <- err
						return
					}
					got := make([]byte, 64)
					if err := ch.Get(got, base+uint64(i%32)*64); err != nil {
						errc <- err
						return
					}
					if string(got) != string(v) {
						errc <- fmt.Errorf("side %d worker %d round %d: read back % x", side, w, i, got[:8])
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for side := 0; side < 2; side++ {
		pes[side].sync()
		if got := binary.LittleEndian.Uint64(pes[side].mem[counter:]); got != workers*rounds {
			t.Fatalf("PE %d's counter is %d, want %d", side, got, workers*rounds)
		}
	}
	// Every channel closed: only the links' own streams are left, on both
	// sides (the acceptor retired the channel streams).
	for side := 0; side < 2; side++ {
		l := link(t, pes, side, 1-side)
		deadline := time.Now().Add(bound)
		for len(l.allStreams()) != len(l.streams) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if n := len(l.allStreams()); n != len(l.streams) {
			t.Fatalf("PE %d: %d streams left on the link, want %d", side, n, len(l.streams))
		}
		if err := l.Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// Beyond Config.ChanStreams, channels share the stream with the fewest
// channels, and a stream closes with its last channel.
func TestChannelBound(t *testing.T) {
	pes := newJob(t, 2, 1<<16, "127.0.0.1", func(c *Config) { c.ChanStreams = 2 })
	l := link(t, pes, 0, 1)
	var chs []*Channel
	for i := 0; i < 5; i++ {
		ch, err := l.OpenChannel()
		if err != nil {
			t.Fatal(err)
		}
		chs = append(chs, ch)
	}
	slots := map[int]int{}
	for _, ch := range chs {
		slots[ch.slot]++
	}
	if len(slots) != 2 || slots[0] < 2 || slots[1] < 2 {
		t.Fatalf("5 channels over 2 streams: %v", slots)
	}
	if n := len(l.allStreams()); n != len(l.streams)+2 {
		t.Fatalf("%d streams, want %d", n, len(l.streams)+2)
	}
	for _, ch := range chs {
		if ch.slot == 0 {
			ch.Close()
		}
	}
	if n := len(l.allStreams()); n != len(l.streams)+1 {
		t.Fatalf("slot 0's channels closed: %d streams, want %d", n, len(l.streams)+1)
	}
	// Slot 0 is free again: the next channel gets a stream of its own there.
	ch, err := l.OpenChannel()
	if err != nil {
		t.Fatal(err)
	}
	if ch.slot != 0 || l.own.refs[0] != 1 {
		t.Fatalf("reopened channel in slot %d with %d channels", ch.slot, l.own.refs[0])
	}
	if err := ch.Put(8, []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if err := ch.Flush(); err != nil {
		t.Fatal(err)
	}
	pes[1].sync()
	if string(pes[1].mem[8:11]) != "\x01\x02\x03" {
		t.Fatal("put on the reopened channel not applied")
	}
}

// A lost channel stream is a lost link: ErrPeerLost, on both sides.
func TestChannelStreamLossIsLinkLoss(t *testing.T) {
	pes := newJob(t, 2, 1<<16, "127.0.0.1", nil)
	l := link(t, pes, 0, 1)
	ch, err := l.OpenChannel()
	if err != nil {
		t.Fatal(err)
	}
	ch.sts[0].conn.SetLinger(0)
	ch.sts[0].conn.Close() // a reset, as far as the peer can tell
	deadline := time.Now().Add(bound)
	for (l.Err() == nil || link(t, pes, 1, 0).Err() == nil) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	for side := 0; side < 2; side++ {
		if err := link(t, pes, side, 1-side).Err(); !errors.Is(err, errs.PeerLost) {
			t.Fatalf("PE %d's link after its channel stream was reset: %v", side, err)
		}
	}
	if err := ch.Put(0, []byte{1}); !errors.Is(err, errs.PeerLost) {
		t.Fatalf("put on the channel: %v", err)
	}
	if _, err := l.OpenChannel(); !errors.Is(err, errs.PeerLost) {
		t.Fatalf("OpenChannel on a lost link: %v", err)
	}
}

// An idle channel stream sends heartbeats: the link outlives several
// loss intervals with nothing to do.
func TestChannelStreamHeartbeats(t *testing.T) {
	// Under the race detector on a loaded 2-core machine a goroutine can
	// stay unscheduled for longer than 4 × 50 ms (a false loss that is
	// the machine's, not the stream's): there the interval is 4x longer.
	hb := 50 * time.Millisecond
	if raceEnabled {
		hb *= 4
	}
	pes := newJob(t, 2, 1<<16, "127.0.0.1", func(c *Config) { c.Heartbeat = hb; c.Misses = 4 })
	ch, err := link(t, pes, 0, 1).OpenChannel()
	if err != nil {
		t.Fatal(err)
	}
	st := ch.sts[0]
	before := st.q.activity.Load()
	time.Sleep(5 * 4 * hb) // five loss intervals
	if err := ch.Err(); err != nil {
		t.Fatal(err)
	}
	if st.q.activity.Load() == before {
		t.Fatal("the idle channel stream sent nothing")
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
}

// A link-wide Flush (a PE's Quiet) that looked at a channel stream just
// before the stream's last channel closed it (so it saw the channel's put
// outstanding, and then finds the stream shut) does not fail: that Close
// flushed the stream before it said goodbye.
func TestLinkFlushBesideChannelClose(t *testing.T) {
	pes := newJob(t, 2, 1<<16, "127.0.0.1", nil)
	l := link(t, pes, 0, 1)
	ch, err := l.OpenChannel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.PutNBI(8, []byte{1, 2, 3, 4, 5, 6, 7, 8}); err != nil {
		t.Fatal(err)
	}
	st := ch.sts[0]
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	// The link-wide Flush's view from before the Close: the stream in its
	// list, and the put not yet flushed.
	st.q.flushed.Store(0)
	if err := l.flush([]*stream{st}); err != nil {
		t.Fatalf("link flush of a stream its channel's Close ended: %v", err)
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	pes[1].sync()
	if pes[1].mem[8] != 1 {
		t.Fatal("the closed channel's put was not applied")
	}
}

// Poll's list has every link's own streams before any channel stream, so
// that past pollMax streams a Poll still reads the ones that carry the
// runtime's signals.
func TestPollListOwnStreamsFirst(t *testing.T) {
	pes := newJob(t, 3, 1<<16, "127.0.0.1", func(c *Config) { c.Streams = 2 })
	for r := 1; r < 3; r++ {
		for i := 0; i < 3; i++ {
			if _, err := link(t, pes, 0, r).OpenChannel(); err != nil {
				t.Fatal(err)
			}
		}
	}
	list := *pes[0].m.pollList.Load()
	if len(list) != 2*2+2*3 {
		t.Fatalf("%d streams on Poll's list, want %d", len(list), 2*2+2*3)
	}
	for i, st := range list {
		if (st.chanSlot >= 0) != (i >= 4) {
			t.Fatalf("Poll's list entry %d is a stream of slot %d", i, st.chanSlot)
		}
	}
}
