package netmesh

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/errs"
	"golang.org/x/sys/unix"
)

// Tests of who reads a stream (lead.go, watch.go): blocked callers lead,
// followers wait, the reader goroutine watches the free stream.

// Many goroutines on both PEs block in Get and fetch-add on the same
// link while PUTs cross both ways: every frame is applied once, in order,
// and nobody is left waiting.
func TestLeadersAndFollowers(t *testing.T) {
	for _, tr := range transports(t) {
		t.Run(tr.name, func(t *testing.T) {
			const mem = 1 << 20
			pes := tr.job(t, 2, mem, nil)
			// Each side's words [1024, 2048) hold a pattern the other reads.
			for _, p := range pes {
				copy(p.mem[8192:16384], pattern(8192, 7))
			}
			const workers, rounds = 16, 200
			var wg sync.WaitGroup
			errc := make(chan error, 4*workers)
			for side := 0; side < 2; side++ {
				l := link(t, pes, side, 1-side)
				for w := 0; w < workers; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						dst := make([]byte, 64)
						src := pattern(64, byte(w))
						want := pattern(8192, 7)
						for i := 0; i < rounds; i++ {
							switch i % 3 {
							case 0:
								off := uint64(64 * ((w*rounds + i) % 128))
								if err := l.Get(dst, 8192+off); err != nil {
									errc <- err
									return
								}
								if !bytes.Equal(dst, want[off:off+64]) {
									errc <- fmt.Errorf("side %d worker %d: get %d: wrong bytes", side, w, i)
									return
								}
							case 1:
								if _, err := l.Atomic(8, OpFetchAdd, 0, 1, 0); err != nil {
									errc <- err
									return
								}
							default:
								if err := l.PutNBI(uint64(65536+64*w), src); err != nil {
									errc <- err
									return
								}
							}
						}
						if err := l.Flush(); err != nil {
							errc <- err
						}
					}()
				}
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
			// Every fetch-add was applied exactly once on each side.
			const adds = workers * ((rounds + 1) / 3)
			for side, p := range pes {
				p.sync()
				got, err := link(t, pes, 1-side, side).Atomic(8, OpFetch, 0, 0, 0)
				if err != nil {
					t.Fatal(err)
				}
				if got != adds {
					t.Fatalf("PE %d: counter %d, want %d", side, got, adds)
				}
			}
		})
	}
}

// Callers blocked behind a leader that waits in vain all time out, each
// within its own deadline, and the link stays up for later operations.
func TestTimeoutsOfLeaderAndFollowers(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("busy=%v", busy), func(t *testing.T) {
			p, r := rawJob(t, 1<<16, func(c *Config) {
				c.Timeout = 300 * time.Millisecond
				c.Heartbeat = 10 * time.Second
				c.Spin = spinMode(busy)
			})
			l := p.m.Link(0)
			const n = 6
			start := time.Now()
			var wg sync.WaitGroup
			errc := make(chan error, n)
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errc <- l.Get(make([]byte, 8), uint64(8*i))
				}()
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				if !errors.Is(err, errs.Timeout) {
					t.Fatalf("unanswered get: %v", err)
				}
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("timeouts took %v", d)
			}
			// The link works: answer the next request, whatever came before.
			done := make(chan error, 1)
			go func() {
				old, err := l.Atomic(8, OpFetch, 0, 0, 0)
				if err == nil && old != 77 {
					err = fmt.Errorf("old %d", old)
				}
				done <- err
			}()
			f, err := r.readUntil(typeAtomic, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			r.send(appendAtomicResp(nil, f.ID, statusOK, 77))
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if l.Err() != nil {
				t.Fatal(l.Err())
			}
		})
	}
}

// Close ends a caller blocked reading the stream at once, not after the
// goodbye wait.
func TestCloseEndsLeader(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("busy=%v", busy), func(t *testing.T) {
			p, r := rawJob(t, 1<<16, func(c *Config) { c.Heartbeat = 10 * time.Second; c.Spin = spinMode(busy) })
			l := p.m.Link(0)
			res := make(chan error, 3)
			for i := 0; i < 3; i++ { // a leader and two followers
				go func() { res <- l.Get(make([]byte, 8), 0) }()
			}
			for i := 0; i < 3; i++ {
				if _, err := r.readUntil(typeGet, 2*time.Second); err != nil {
					t.Fatal(err)
				}
			}
			closed := make(chan struct{})
			start := time.Now()
			go func() { p.m.Close(); close(closed) }()
			for i := 0; i < 3; i++ {
				select {
				case err := <-res:
					if !errors.Is(err, errs.Finalized) {
						t.Fatalf("get pending at Close: %v", err)
					}
				case <-time.After(time.Second):
					t.Fatal("get still blocked a second after Close began")
				}
			}
			if d := time.Since(start); d > time.Second {
				t.Fatalf("gets returned %v after Close began", d)
			}
			<-closed
		})
	}
}

// While no caller reads, the reader goroutine applies what arrives: a
// PUT sent after a Get's reply (so after the caller freed the stream),
// and one that arrives in the same segment as the reply.
func TestWatchAfterLeader(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("busy=%v", busy), func(t *testing.T) {
			p, r := rawJob(t, 1<<16, func(c *Config) { c.Heartbeat = 10 * time.Second; c.Spin = spinMode(busy) })
			l := p.m.Link(0)
			for round := 0; round < 20; round++ {
				res := make(chan error, 1)
				go func() { res <- l.Get(make([]byte, 8), 0) }()
				f, err := r.readUntil(typeGet, 2*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				resp := append(appendGetResp(nil, f.ID, statusOK, 8), make([]byte, 8)...)
				put1 := append(appendPut(nil, 100, 8), bytes.Repeat([]byte{byte(2 * round)}, 8)...)
				put2 := append(appendPut(nil, 200, 8), bytes.Repeat([]byte{byte(2*round + 1)}, 8)...)
				before := p.applied.Load()
				if round%2 == 0 {
					r.send(append(resp, put1...)) // together with the reply
				} else {
					r.send(resp)
					r.send(put1)
				}
				if err := <-res; err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Millisecond) // the caller has freed the stream
				r.send(put2)
				deadline := time.Now().Add(2 * time.Second)
				for p.applied.Load() < before+2 {
					if time.Now().After(deadline) {
						t.Fatalf("round %d: %d of 2 PUTs applied", round, p.applied.Load()-before)
					}
					time.Sleep(100 * time.Microsecond)
				}
				p.sync()
				if p.mem[100] != byte(2*round) || p.mem[200] != byte(2*round+1) {
					t.Fatalf("round %d: segment %d %d", round, p.mem[100], p.mem[200])
				}
			}
		})
	}
}

// A holder that frees the stream with a whole frame left in its read
// buffer gets that frame applied: here the reader goroutine yielded to a
// follower whose reply it had itself just applied (so the follower no
// longer wants the token), and the peer sends nothing more. The socket's
// readiness cannot announce bytes that were already read, so unless
// releasing the token wakes the reader goroutine, the frame stays in the
// buffer until the peer sends again; here it never does (no heartbeats),
// so a lost wake-up fails the test instead of slowing it.
func TestReleaseAppliesBufferedFrame(t *testing.T) {
	p, r := rawJob(t, 1<<16, func(c *Config) { c.Heartbeat = time.Hour })
	st := p.m.Link(0).streams[0]

	// Hold the token as the reader goroutine does while it serves.
	deadline := holdToken(t, st, heldReader)
	// Read a whole PUT ahead into the stream's buffer, as a holder does.
	r.send(append(appendPut(nil, 64, 8), bytes.Repeat([]byte{0xAB}, 8)...))
	st.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	for !st.frameBuffered() {
		k, err := st.conn.Read(st.buf[st.w:])
		if err != nil {
			t.Fatal(err)
		}
		st.w += k
	}
	st.conn.SetReadDeadline(time.Time{})

	// A follower that queued and was completed before the hand-over.
	c := getCall()
	c.state.Store(callDone)
	before := p.applied.Load()
	st.rmu.Lock()
	st.queueLocked(c)
	st.releaseLocked()
	st.rmu.Unlock()

	for p.applied.Load() == before {
		if time.Now().After(deadline) {
			t.Fatal("lost wake-up: the PUT read ahead was never applied after the token was freed")
		}
		runtime.Gosched()
	}
	p.sync()
	if !bytes.Equal(p.mem[64:72], bytes.Repeat([]byte{0xAB}, 8)) {
		t.Fatalf("segment %x after the PUT", p.mem[64:72])
	}
}

// TestPollerReleaseAnnounces: bytes that arrive while a poller holds a
// stream's token arrive quietly (watch.go: the socket's receive
// low-water mark is raised, so they signal no epoll set). When the
// poller frees the token without having read them, lowering the mark
// must announce them to the reader goroutine, which applies them; else
// they would wait for the peer's next bytes (a heartbeat, here an hour
// away), and a peer waiting for exactly this frame would hang.
func TestPollerReleaseAnnounces(t *testing.T) {
	p, r := rawJob(t, 1<<16, func(c *Config) { c.Heartbeat = time.Hour })
	st := p.m.Link(0).streams[0]
	deadline := holdToken(t, st, heldPoller)
	st.rmu.Lock()
	quiet := st.w8.quiet
	st.rmu.Unlock()
	if !quiet {
		t.Fatal("a poller's socket is not quiet")
	}
	before := p.applied.Load()
	frame := append(appendPut(nil, 64, 8), bytes.Repeat([]byte{0xCD}, 8)...)
	r.send(frame)
	// Wait until the PUT is queued in the socket, unread.
	for queued := 0; queued < len(frame); {
		var err error
		if cerr := st.raw.Control(func(fd uintptr) { queued, err = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); cerr != nil || err != nil {
			t.Fatal(cerr, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes of the PUT arrived", queued)
		}
		runtime.Gosched()
	}
	if p.applied.Load() != before {
		t.Fatal("the PUT was applied while the poller held the token")
	}
	st.rmu.Lock()
	st.unpollLocked(errYield)
	quiet = st.w8.quiet
	st.rmu.Unlock()
	if quiet {
		t.Fatal("the socket stayed quiet after the poller freed the token")
	}
	for p.applied.Load() == before {
		if time.Now().After(deadline) {
			t.Fatal("lost wake-up: the PUT that arrived under the poller was never applied after it freed the token")
		}
		runtime.Gosched()
	}
	p.sync()
	if !bytes.Equal(p.mem[64:72], bytes.Repeat([]byte{0xCD}, 8)) {
		t.Fatalf("segment %x after the PUT", p.mem[64:72])
	}
}

// holdToken takes st's read token as a holder of kind k once it is free
// (within 5 s) and returns the test's deadline, 5 s from now.
func holdToken(t *testing.T, st *stream, k holderKind) time.Time {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st.rmu.Lock()
		if st.takeLocked(k, nil) {
			st.rmu.Unlock()
			return deadline
		}
		st.rmu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("the stream's read token never came free")
		}
		runtime.Gosched()
	}
}

// TestLinger: a Poll whose wait was satisfied leaves the tokens it held
// lingering (token.linger): the next Poll takes them back without
// setting the sockets' marks again, and the mesh's linger timer frees
// them. Bytes that arrive while a token lingers arrive quietly, and
// nobody polls here afterwards: only the timer's release (lowering the
// mark, which announces them) gets them applied. Without it the PUT below
// would wait for the peer's next bytes, a heartbeat an hour away, and the
// test fails at its deadline.
func TestLinger(t *testing.T) {
	yes := func() bool { return true }
	lingerTest(t, func(p *tpe, _ *rawPeer) bool { return p.m.Poll(time.Second, yes) })
}

// TestCallerLingers: a caller whose call is done leaves the token
// lingering as a Poll does, so that a loop of blocking calls sets no
// mark per call; the timer frees it.
func TestCallerLingers(t *testing.T) {
	lingerTest(t, func(p *tpe, r *rawPeer) bool {
		done := make(chan error, 1)
		var old uint64
		go func() {
			var err error
			old, err = p.m.Link(0).Atomic(8, OpFetch, 0, 0, 0)
			done <- err
		}()
		f, err := r.readUntil(typeAtomic, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		r.send(appendAtomicResp(nil, f.ID, statusOK, 42))
		if err := <-done; err != nil || old != 42 {
			t.Fatalf("fetch: %d, %v", old, err)
		}
		return true
	})
}

// lingerTest runs TestLinger and TestCallerLingers: take (held by a
// Poll or a call, on PE 1 of a job with a raw peer), until two takes in
// a row left the token lingering with no mark set between them; then a
// PUT from the peer must be applied, which only the linger timer can do.
func lingerTest(t *testing.T, take func(*tpe, *rawPeer) bool) {
	p, r := rawJob(t, 1<<16, func(c *Config) { c.Heartbeat = time.Hour; c.Spin = SpinOn })
	st := p.m.Link(0).streams[0]
	now := func() (holderKind, int) {
		st.rmu.Lock()
		defer st.rmu.Unlock()
		return st.tok.kind, st.w8.marks
	}
	deadline := time.Now().Add(5 * time.Second)
	put := func(b byte) {
		before := p.applied.Load()
		r.send(append(appendPut(nil, 64, 8), bytes.Repeat([]byte{b}, 8)...))
		for p.applied.Load() == before {
			if time.Now().After(deadline.Add(5 * time.Second)) {
				k, _ := now()
				t.Fatalf("lost wake-up: a PUT of %#x was never applied (token %v)", b, k)
			}
			runtime.Gosched()
		}
		p.sync()
		if !bytes.Equal(p.mem[64:72], bytes.Repeat([]byte{b}, 8)) {
			t.Fatalf("segment %x after the PUT of %#x", p.mem[64:72], b)
		}
	}
	// First the reader goroutine applies a PUT, so that it has made its
	// first look at the stream and sleeps: it would take a lingering
	// token as a free one, and the PUT below would not need the timer.
	put(0xCD)
	for {
		if time.Now().After(deadline) {
			t.Fatal("no take of a lingering token left it lingering without setting the mark (or none lingered)")
		}
		resetSpin()
		if !take(p, r) {
			continue
		}
		k, marks := now()
		if k != heldLinger {
			continue // the token was not free, or the timer freed it already
		}
		if !take(p, r) {
			continue
		}
		if k, m := now(); k == heldLinger && m == marks {
			break // taken back and left again, with no system call
		}
		// The timer freed it between the takes (a loaded machine): again.
	}
	put(0xAB) // sent while the token lingers
	if k, _ := now(); k == heldLinger {
		t.Fatal("the PUT was applied, but the token still lingers")
	}
}

// lingerToken polls p's only stream until a Poll leaves its token
// lingering, then stops the linger timer so that it stays so; it returns
// a function that reads the token's holder kind.
func lingerToken(t *testing.T, p *tpe) func() holderKind {
	t.Helper()
	st := p.m.Link(0).streams[0]
	kind := func() holderKind {
		st.rmu.Lock()
		defer st.rmu.Unlock()
		return st.tok.kind
	}
	yes := func() bool { return true }
	deadline := time.Now().Add(5 * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatal("no Poll left the token lingering")
		}
		resetSpin()
		if p.m.Poll(time.Second, yes) && kind() == heldLinger {
			p.m.lingerT.Stop() // keep the timer out of it
			if kind() == heldLinger {
				return kind
			}
		}
	}
}

// TestParkFreesLingering: a wait that parks (Mesh.Park, after a Poll
// that did not poll: here, polling paused) frees the tokens that linger,
// at once, since what it waits for may arrive on a lingering socket,
// which announces nothing until the timer fires (up to a millisecond
// when the process sleeps). While it is parked, a Poll done with a token
// frees it instead of leaving it lingering; after Unpark, lingering is
// back.
func TestParkFreesLingering(t *testing.T) {
	p, _ := rawJob(t, 1<<16, func(c *Config) { c.Heartbeat = time.Hour; c.Spin = SpinOn })
	defer resetSpin()
	kind := lingerToken(t, p)
	yes := func() bool { return true }
	spinOff.Store(mono() + int64(time.Hour)) // polling paused: Poll will not poll
	if p.m.Poll(time.Second, yes) {
		t.Fatal("Poll polled while polling was paused")
	}
	p.m.Park()
	if k := kind(); k == heldLinger {
		t.Fatal("Park left the token lingering")
	}
	resetSpin()
	for i := 0; i < 100; i++ {
		if p.m.Poll(time.Second, yes) && kind() == heldLinger {
			t.Fatal("a Poll left the token lingering while a wait was parked")
		}
	}
	p.m.Unpark()
	lingerToken(t, p)
}

// TestPollStopsWhenDone: a Poll whose condition holds after a frame it
// applied stops at that frame boundary instead of reading the socket
// once more (stream.serve's done): a barrier's wait is usually
// ended by one small frame, and the read that would find the socket
// empty was a system call per wait. Here the raw peer writes a second
// PUT from inside the Notify of the first one (called by the applier
// after the frame, before it reads again), so it is in the socket by the
// time a further read would be made: the Poll, whose condition is the
// first PUT, must leave it, and the next Poll applies it.
func TestPollStopsWhenDone(t *testing.T) {
	const a, b = 64, 128
	var afterA atomic.Pointer[func()]
	p, r := rawJob(t, 1<<16, func(c *Config) {
		c.Heartbeat, c.Spin = time.Hour, SpinOn
		prev := c.Notify
		c.Notify = func(off, n uint64) {
			prev(off, n)
			if f := afterA.Load(); f != nil && off == a {
				(*f)()
			}
		}
	})
	defer resetSpin()
	// Leave the token lingering (the socket quiet: the reader goroutine
	// hears of no small frame), as a barrier's previous wait does.
	lingerToken(t, p)
	put := func(off uint64) []byte { return append(appendPut(nil, off, 1), 1) }
	sendB := func() {
		afterA.Store(nil)
		r.send(put(b)) // loopback: queued at the receiver when the write returns
	}
	afterA.Store(&sendB)
	r.send(put(a))
	resetSpin()
	if !p.m.Poll(5*time.Second, func() bool { p.sync(); return p.mem[a] == 1 }) {
		t.Fatal("Poll did not see the first PUT")
	}
	p.sync()
	if p.mem[b] != 0 {
		t.Fatal("a Poll whose condition held read and applied the next frame: it read the socket again after its condition held")
	}
	resetSpin()
	if !p.m.Poll(5*time.Second, func() bool { p.sync(); return p.mem[b] == 1 }) {
		t.Fatal("the second PUT was never applied")
	}
}
