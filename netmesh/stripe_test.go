package netmesh

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/errs"
	"github.com/goshmem/goshmem/internal/testhook"
)

// Striped transfers of odd sizes at odd offsets, mixed with small puts
// and gets into the same bytes and no Fence, leave exactly what applying
// every operation in program order would: the link keeps its streams as
// ordered as one (Link.order).
func TestStripedExact(t *testing.T) {
	for _, k := range []int{0, 2, 3} { // 0: the default count
		t.Run(fmt.Sprintf("streams=%d", k), func(t *testing.T) {
			const size = 4 << 20
			pes := newJob(t, 2, size, "127.0.0.1", func(c *Config) { c.Streams = k })
			l := link(t, pes, 0, 1)
			seeApplies(t)
			if k == 0 && len(l.streams) != defaultStreams {
				t.Fatalf("default: %d streams", len(l.streams))
			}
			seed := rand.Uint64()
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 2))
			model := make([]byte, size)
			var nbiBufs [][]byte // must stay unchanged until the next Flush
			var gets []func() error
			var getAt [][2]uint64 // the pending gets' ranges
			settle := func(step int) {
				if err := l.Flush(); err != nil {
					t.Fatal(err)
				}
				for _, g := range gets {
					if err := g(); err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
				}
				gets, getAt, nbiBufs = nil, nil, nil
			}
			for step := 0; step < 60; step++ {
				n := stripeMin + rng.IntN(2*stripeMin)
				if rng.IntN(3) == 0 {
					n = 1 + rng.IntN(3000)
				}
				off := uint64(rng.IntN(size - n + 1))
				kind := rng.IntN(5)
				// Known bug (docs/memory-model.md, "Gets over TCP"): a put
				// into the bytes of a pending non-blocking get can show in
				// the get, so it is preceded by a Flush until that is fixed.
				for _, r := range getAt {
					if kind <= 2 && off < r[1] && r[0] < off+uint64(n) {
						settle(step)
						break
					}
				}
				switch kind {
				case 0, 1: // blocking put
					src := make([]byte, n)
					fillRand(rng, src)
					if err := l.Put(off, src); err != nil {
						t.Fatal(err)
					}
					copy(model[off:], src)
				case 2: // non-blocking put
					src := make([]byte, n)
					fillRand(rng, src)
					if err := l.PutNBI(off, src); err != nil {
						t.Fatal(err)
					}
					copy(model[off:], src)
					nbiBufs = append(nbiBufs, src)
				case 3: // blocking get: sees every earlier put
					dst := make([]byte, n)
					if err := l.Get(dst, off); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(dst, model[off:off+uint64(n)]) {
						t.Fatalf("step %d: get of %d bytes at %d differs from program order", step, n, off)
					}
				case 4: // non-blocking get: sees earlier puts, not later ones
					dst := make([]byte, n)
					want := append([]byte(nil), model[off:off+uint64(n)]...)
					if err := l.GetNBI(dst, off); err != nil {
						t.Fatal(err)
					}
					getAt = append(getAt, [2]uint64{off, off + uint64(n)})
					gets = append(gets, func() error {
						if !bytes.Equal(dst, want) {
							return fmt.Errorf("non-blocking get of %d bytes at %d differs from program order", n, off)
						}
						return nil
					})
				}
				if rng.IntN(8) == 0 {
					settle(step)
				}
			}
			if err := l.Flush(); err != nil {
				t.Fatal(err)
			}
			for _, g := range gets {
				if err := g(); err != nil {
					t.Fatal(err)
				}
			}
			if seg := segment(pes[1]); firstDiff(seg, model) >= 0 {
				i := firstDiff(seg, model)
				t.Fatalf("segment byte %d is %#x, program order says %#x", i, seg[i], model[i])
			}
			_ = nbiBufs
		})
	}
}

func fillRand(rng *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// applyMu orders, for the race detector, what the streams' readers
// write into a segment with what a test reads there: every reader takes
// it before it applies a frame (seeApplies), and a test takes it to read
// a segment after a Flush. The Flush's FLUSH frame was applied after the
// frames before it, so the test sees them; two frames applied at the same
// time are still unordered (each takes the lock before, not after, its
// writes), so real overlaps are still reported.
var applyMu sync.Mutex

func appliesSeen() { applyMu.Lock(); applyMu.Unlock() }

// seeApplies makes every frame's applier call appliesSeen first.
func seeApplies(t *testing.T) {
	f := func(_, _, _, _ int) { appliesSeen() }
	testhook.Apply.Store(&f)
	t.Cleanup(func() { testhook.Apply.CompareAndSwap(&f, nil) })
}

// segment returns a copy of p's segment as of the last Flush of a link
// to p.
func segment(p *tpe) []byte {
	applyMu.Lock()
	defer applyMu.Unlock()
	return append([]byte(nil), p.mem...)
}

// holdLinkStream holds the frames that rank applies from stream idx of
// its links (link streams only) until release is called.
func holdLinkStream(t *testing.T, rank, idx int) (held <-chan struct{}, release func()) {
	return holdWhere(t, func(r, _, _, stream int) bool { return r == rank && stream == idx })
}

// flushPending reports whether a FLUSH on stream idx of l waits for its
// reply.
func flushPending(l *Link, idx int) bool {
	t := &l.streams[idx].calls
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.m {
		if c.kind == typeFlush {
			return true
		}
	}
	return false
}

// Each case holds one stream of the target, issues two operations to
// overlapping bytes that travel on different streams, and checks the
// later one neither overtakes the earlier one nor is overtaken by it:
// either the second operation waits for a FLUSH of the held stream (the
// rule), or its frame reaches the target while the first one's is held
// (the bug), whichever comes first; then the hold ends and the bytes must
// be those of program order.
func TestStripedNoOvertaking(t *testing.T) {
	const size = 2 << 20
	big := make([]byte, 1<<20) // striped: [0, 512K) on stream 0, [512K, 1M) on stream 1
	for i := range big {
		big[i] = 0xBB
	}
	small := bytes.Repeat([]byte{0x55}, 64)
	at := uint64(600 << 10) // inside stream 1's part
	for _, tc := range []struct {
		name  string
		held  int                             // the target's stream that is held
		slack uint64                          // applied puts the earlier operation may still add
		first func(l *Link, got []byte) error // the earlier operation
		then  func(l *Link) error             // the later one
		want  []byte                          // the 64 bytes at `at` in the end
		wantG []byte                          // what got holds in the end (nil: not checked)
	}{
		{"striped put, then a small put", 1, 1,
			func(l *Link, _ []byte) error { return l.PutNBI(0, big) },
			func(l *Link) error { return l.Put(at, small) },
			small, nil},
		{"small put, then a striped put", 0, 0,
			func(l *Link, _ []byte) error { return l.Put(at, small) },
			func(l *Link) error { return l.Put(0, big) },
			big[:64], nil},
		{"striped get, then a small put", 1, 0,
			func(l *Link, got []byte) error { return l.GetNBI(got, 0) },
			func(l *Link) error { return l.Put(at, small) },
			small, make([]byte, 64)},
		{"striped put, then an atomic", 1, 1,
			func(l *Link, _ []byte) error { return l.PutNBI(0, big) },
			func(l *Link) error { _, err := l.Atomic(8, OpSet, at, 0x5555555555555555, 0); return err },
			append(bytes.Repeat([]byte{0x55}, 8), big[:56]...), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pes := newJob(t, 2, size, "127.0.0.1", func(c *Config) { c.Streams = 2 })
			l := link(t, pes, 0, 1)
			held, release := holdLinkStream(t, 1, tc.held)
			got := make([]byte, 1<<20)
			if err := tc.first(l, got); err != nil {
				t.Fatal(err)
			}
			<-held
			before := pes[1].applied.Load()
			done := make(chan error, 1)
			go func() { done <- tc.then(l) }()
			overtook := false
			for deadline := time.Now().Add(10 * time.Second); ; runtime.Gosched() {
				if flushPending(l, tc.held) {
					break
				}
				if pes[1].applied.Load() > before+tc.slack {
					overtook = true
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("neither a FLUSH of the held stream nor the later operation's frame")
				}
			}
			release()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if err := l.Flush(); err != nil {
				t.Fatal(err)
			}
			if seg := segment(pes[1]); !bytes.Equal(seg[at:at+64], tc.want) {
				t.Fatalf("target bytes %x, program order says %x (overtook: %v)", seg[at:at+64], tc.want, overtook)
			}
			if tc.wantG != nil && !bytes.Equal(got[at:at+64], tc.wantG) {
				t.Fatalf("the get saw %x, program order says %x", got[at:at+64], tc.wantG)
			}
			if overtook {
				t.Fatal("the later operation reached the target before the held part of the earlier one")
			}
		})
	}
}

// A peer lost in the middle of a striped transfer: every call ends with
// PeerLost, and a striped get writes nothing into dst after it returned.
func TestStripedPeerLost(t *testing.T) {
	for _, op := range []string{"put", "get"} {
		t.Run(op, func(t *testing.T) {
			const size = 4 << 20
			pes := newJob(t, 2, size, "127.0.0.1", func(c *Config) { c.Streams = 2; c.Heartbeat = 50 * time.Millisecond })
			l := link(t, pes, 0, 1)
			held, release := holdLinkStream(t, 1, 1)
			buf := make([]byte, 3<<20)
			done := make(chan error, 1)
			go func() {
				var err error
				for err == nil {
					if op == "put" {
						err = l.Put(0, buf)
					} else {
						err = l.Get(buf, 0)
					}
				}
				done <- err
			}()
			<-held
			// The target's stream 1 is stuck inside a transfer: cut it.
			link(t, pes, 1, 0).streams[1].conn.SetLinger(0)
			link(t, pes, 1, 0).streams[1].conn.Close()
			var err error
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("the striped transfer did not end after the cut")
			}
			release()
			if !errors.Is(err, errs.PeerLost) {
				t.Fatalf("%s after the cut: %v", op, err)
			}
			if op == "get" {
				snap := append([]byte(nil), buf...)
				runtime.Gosched()
				l.quiesce()
				if !bytes.Equal(snap, buf) {
					t.Fatal("the failed get's destination changed after it returned")
				}
			}
			if err := l.Put(0, buf); !errors.Is(err, errs.PeerLost) {
				t.Fatalf("a put after the loss: %v", err)
			}
		})
	}
}
