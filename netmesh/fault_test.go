package netmesh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/auth"
	"github.com/goshmem/goshmem/internal/errs"
)

func zero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// waitErr waits for the link to go down and returns its error.
func waitErr(t *testing.T, l *Link, d time.Duration) error {
	t.Helper()
	deadline := time.Now().Add(d)
	for l.Err() == nil {
		if time.Now().After(deadline) {
			t.Fatalf("link still up after %v", d)
		}
		time.Sleep(time.Millisecond)
	}
	return l.Err()
}

// A malicious but authenticated peer sends frames that reach past the
// segment or break the format: each gets an ERROR frame, the link closes
// with errs.Protocol, and the segment is untouched.
func TestMaliciousFrames(t *testing.T) {
	const mem = 1 << 16
	payload := bytes.Repeat([]byte{0xEE}, 64)
	withPayload := func(h []byte, p []byte) []byte { return append(h, p...) }
	cases := []struct {
		name  string
		frame []byte
		code  uint16
	}{
		{"put straddling the end", withPayload(appendPut(nil, mem-32, 64), payload), codeBounds},
		{"put at a huge offset", withPayload(appendPut(nil, 1<<63, 64), payload), codeBounds},
		{"put offset overflow", withPayload(appendPut(nil, ^uint64(0)-8, 64), payload), codeBounds},
		{"put longer than MaxPayload", appendPut(nil, 0, MaxPayload+1), codeLength},
		{"put of zero bytes", appendPut(nil, 0, 0), codeLength},
		{"get past the end", appendGet(nil, 1, mem-8, 16), codeBounds},
		{"get longer than MaxPayload", appendGet(nil, 1, 0, MaxPayload+1), codeLength},
		{"atomic past the end", appendAtomic(nil, 1, byte(OpFetchAdd), 8, mem, 1, 0), codeBounds},
		{"atomic unaligned", appendAtomic(nil, 1, byte(OpFetchAdd), 8, 4, 1, 0), codeAtomic},
		{"atomic bad op", appendAtomic(nil, 1, 0x09, 8, 0, 1, 0), codeAtomic},
		{"atomic bad width", appendAtomic(nil, 1, byte(OpSet), 2, 0, 1, 0), codeAtomic},
		{"atomic 4-byte with a 64-bit operand", appendAtomic(nil, 0, byte(OpSet), 4, 0, 1<<40, 0), codeAtomic},
		{"put-signal with the signal past the end", withPayload(appendPutSignal(nil, 0, 64, mem, signalSet, 1), payload), codeBounds},
		{"put-signal with the data past the end", withPayload(appendPutSignal(nil, mem-8, 64, 0, signalAdd, 1), payload), codeBounds},
		{"put-signal with a bad op", withPayload(appendPutSignal(nil, 0, 64, 0, 3, 1), payload), codeMalformed},
		{"get reply longer than MaxPayload", appendGetResp(nil, 7, statusOK, MaxPayload+1), codeLength},
		{"flush with a reserved byte", []byte{Version, typeFlush, 1, 0, 1, 0, 0, 0}, codeMalformed},
		{"unknown type", []byte{Version, 0x7F, 0, 0}, codeType},
		{"another version", append([]byte{Version + 1, typeHeartbeat}, payload...), codeVersion},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, r := rawJob(t, mem, nil)
			l := p.m.Link(0)
			r.send(tc.frame)
			f, err := r.readUntil(typeError, 5*time.Second)
			if err != nil {
				t.Fatalf("no ERROR frame: %v", err)
			}
			if f.Code != tc.code {
				t.Fatalf("ERROR code %d (%s), want %d", f.Code, f.Payload, tc.code)
			}
			// Then the connection closes.
			if _, err := r.read(5 * time.Second); err == nil {
				t.Fatal("connection still open after ERROR")
			}
			err = waitErr(t, l, 5*time.Second)
			if !errors.Is(err, errs.Protocol) || !errors.Is(err, errs.PeerLost) || !strings.Contains(err.Error(), "PE 0") {
				t.Fatalf("link error %v: want errs.Protocol and errs.PeerLost naming PE 0", err)
			}
			if _, err := l.Atomic(8, OpFetch, 0, 0, 0); !errors.Is(err, errs.PeerLost) {
				t.Fatalf("operation after the violation: %v", err)
			}
			p.m.Close()
			if !zero(p.mem) {
				t.Fatal("segment changed by a refused frame")
			}
			if n := p.lostCount(0); n != 1 {
				t.Fatalf("OnLost called %d times", n)
			}
		})
	}
}

// Replies are matched by id, in any order, and a reply to a request whose
// caller timed out is dropped.
func TestRepliesOutOfOrder(t *testing.T) {
	p, r := rawJob(t, 1<<16, func(c *Config) { c.Heartbeat = 10 * time.Second })
	l := p.m.Link(0)
	const n = 16
	var wg sync.WaitGroup
	errc := make(chan error, n+1)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dst := make([]byte, 8*(i+1))
			if err := l.Get(dst, uint64(1000*i)); err != nil {
				errc <- err
				return
			}
			if want := bytes.Repeat([]byte{byte(i)}, len(dst)); !bytes.Equal(dst, want) {
				errc <- fmt.Errorf("get %d: wrong bytes", i)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		old, err := l.Atomic(8, OpFetchAdd, 64, 1, 0)
		if err == nil && old != 4242 {
			err = fmt.Errorf("atomic: old %d", old)
		}
		if err != nil {
			errc <- err
		}
	}()
	// Collect all requests, then answer them last to first.
	var reqs []Frame
	for len(reqs) < n+1 {
		f, err := r.read(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if f.Type == typeGet || f.Type == typeAtomic {
			reqs = append(reqs, f)
		}
	}
	for i := len(reqs) - 1; i >= 0; i-- {
		f := reqs[i]
		if f.Type == typeAtomic {
			r.send(appendAtomicResp(nil, f.ID, statusOK, 4242))
			continue
		}
		r.send(append(appendGetResp(nil, f.ID, statusOK, f.Len), bytes.Repeat([]byte{byte(f.Off / 1000)}, int(f.Len))...))
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if l.Err() != nil {
		t.Fatal(l.Err())
	}
}

func TestBlockingTimeoutKeepsLink(t *testing.T) {
	p, r := rawJob(t, 1<<16, func(c *Config) {
		c.Timeout = 300 * time.Millisecond
		c.Heartbeat = 10 * time.Second
	})
	l := p.m.Link(0)
	dst := make([]byte, 16)
	start := time.Now()
	err := l.Get(dst, 0)
	if !errors.Is(err, errs.Timeout) {
		t.Fatalf("unanswered get: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("timeout took %v", d)
	}
	f, err := r.readUntil(typeGet, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The late reply is dropped: dst stays untouched.
	r.send(append(appendGetResp(nil, f.ID, statusOK, 16), bytes.Repeat([]byte{9}, 16)...))
	done := make(chan error, 1)
	go func() {
		_, err := l.Atomic(8, OpFetch, 0, 0, 0)
		done <- err
	}()
	f, err = r.readUntil(typeAtomic, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r.send(appendAtomicResp(nil, f.ID, statusOK, 5))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !zero(dst) {
		t.Fatal("a late reply wrote the destination of a timed-out get")
	}
	if l.Err() != nil {
		t.Fatal(l.Err())
	}
}

// A peer that closes, resets or half-closes the connection is lost: a
// pending Get fails with errs.PeerLost naming the rank, within the
// heartbeat timeout; later operations fail at once; OnLost runs once. (A
// peer whose host stops acknowledging is lost too, by silence and by
// TCP_USER_TIMEOUT: TestNetnsPartition cuts a link between namespaces.)
func TestPeerLost(t *testing.T) {
	const hb = 50 * time.Millisecond
	cases := []struct {
		name string
		kill func(r *rawPeer)
	}{
		{"close", func(r *rawPeer) { r.c.Close() }},
		{"reset", func(r *rawPeer) { r.c.SetLinger(0); r.c.Close() }},
		{"half-close", func(r *rawPeer) { r.c.CloseWrite() }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, r := rawJob(t, 1<<16, func(c *Config) { c.Heartbeat = hb })
			l := p.m.Link(0)
			res := make(chan error, 1)
			start := time.Now()
			go func() { res <- l.Get(make([]byte, 8), 0) }()
			if _, err := r.readUntil(typeGet, time.Second); err != nil {
				t.Fatal(err)
			}
			tc.kill(r)
			var err error
			select {
			case err = <-res:
			case <-time.After(5*hb*2 + 2*time.Second):
				t.Fatal("pending get did not fail")
			}
			if !errors.Is(err, errs.PeerLost) || !strings.Contains(err.Error(), "PE 0") {
				t.Fatalf("pending get: %v", err)
			}
			// OnLost ran before the pending get was failed (fail), so
			// the owner knew of the loss by the time the get returned.
			if n := p.lostCount(0); n != 1 {
				t.Fatalf("the pending get returned the loss with OnLost called %d times", n)
			}
			if d := time.Since(start); d > 5*hb+2*time.Second {
				t.Fatalf("loss noticed after %v", d)
			}
			if err := l.Put(0, []byte{1}); !errors.Is(err, errs.PeerLost) {
				t.Fatalf("put after loss: %v", err)
			}
			if err := l.Flush(); !errors.Is(err, errs.PeerLost) {
				t.Fatalf("flush after loss: %v", err)
			}
			time.Sleep(3 * hb)
			if n := p.lostCount(0); n != 1 {
				t.Fatalf("OnLost called %d times", n)
			}
			if !p.logs.contains("lost") {
				t.Fatal("loss not logged")
			}
		})
	}
}

// A peer that sends nothing while its host acknowledges this side's
// bytes (its process holds the socket open: busy in code the Go runtime
// cannot preempt, or stopped in a debugger) is not lost, however long
// past Heartbeat*Misses it stays silent: a Get waiting on it ends at the
// timeout, the link stays up, OnLost does not run, the mesh logs it once,
// and the peer's next answer is taken.
func TestBusyPeerIsNotLost(t *testing.T) {
	const hb = 100 * time.Millisecond
	p, r := rawJob(t, 1<<16, func(c *Config) {
		c.Heartbeat = hb
		c.Timeout = 3 * time.Second // the peer stays silent for 6 loss times
	})
	l := p.m.Link(0)
	res := make(chan error, 1)
	go func() { res <- l.Get(make([]byte, 8), 0) }()
	if _, err := r.readUntil(typeGet, time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		if !errors.Is(err, errs.Timeout) {
			t.Fatalf("the get waiting on a silent peer whose host answers: %v, want errs.Timeout", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pending get did not end")
	}
	if err := l.Err(); err != nil {
		t.Fatalf("the link: %v", err)
	}
	if n := p.lostCount(0); n != 0 {
		t.Fatalf("OnLost called %d times", n)
	}
	if !p.logs.contains("busy or stopped") {
		t.Fatal("the silence was not logged")
	}
	done := make(chan error, 1)
	go func() {
		v, err := l.Atomic(8, OpFetch, 0, 0, 0)
		if err == nil && v != 5 {
			err = fmt.Errorf("fetched %d, want 5", v)
		}
		done <- err
	}()
	f, err := r.readUntil(typeAtomic, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r.send(appendAtomicResp(nil, f.ID, statusOK, 5))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Two real meshes: a clean Close is a goodbye, not a loss; a connection
// cut under a live mesh is a loss on both sides; Abort is a loss on the
// peer's side.
func TestGoodbyeAndCut(t *testing.T) {
	t.Run("goodbye", func(t *testing.T) {
		pes := newJob(t, 2, 1<<16, "127.0.0.1", func(c *Config) { c.Streams = 2 })
		l := link(t, pes, 0, 1)
		if err := pes[1].m.Close(); err != nil {
			t.Fatal(err)
		}
		err := waitErr(t, l, 5*time.Second)
		if !errors.Is(err, errs.Finalized) || errors.Is(err, errs.PeerLost) {
			t.Fatalf("after the peer's goodbye: %v", err)
		}
		if _, err := l.Atomic(8, OpFetch, 0, 0, 0); !errors.Is(err, errs.Finalized) {
			t.Fatalf("atomic after goodbye: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
		if pes[0].lostCount(1) != 0 || pes[1].lostCount(0) != 0 {
			t.Fatal("OnLost called for a goodbye")
		}
	})
	// A connection cut under a live mesh, and Abort (a Close without
	// goodbyes), end the link as a loss: OnLost once on the other side,
	// and on the side that cut (its reader sees its own closed socket),
	// never on the side that aborted.
	for _, c := range []struct {
		name   string
		end    func(pes []*tpe) error
		lost10 int // OnLost calls on PE 1 for PE 0
	}{
		{"cut", func(pes []*tpe) error {
			link(t, pes, 1, 0).streams[0].conn.SetLinger(0)
			return link(t, pes, 1, 0).streams[0].conn.Close()
		}, 1},
		{"abort", func(pes []*tpe) error { return pes[1].m.Abort() }, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			pes := newJob(t, 2, 1<<16, "127.0.0.1", func(cfg *Config) { cfg.Heartbeat, cfg.Streams = 50*time.Millisecond, 2 })
			l := link(t, pes, 0, 1)
			if err := c.end(pes); err != nil {
				t.Fatal(err)
			}
			err := waitErr(t, l, 5*time.Second)
			if !errors.Is(err, errs.PeerLost) {
				t.Fatalf("after a %s: %v, want a loss", c.name, err)
			}
			// Under load a reader can take longer than a fixed nap to
			// see its socket end.
			for deadline := time.Now().Add(5 * time.Second); (pes[0].lostCount(1) == 0 || pes[1].lostCount(0) < c.lost10) && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond) // a second, wrong call would come now
			if pes[0].lostCount(1) != 1 || pes[1].lostCount(0) != c.lost10 {
				t.Fatalf("OnLost calls %d and %d, want 1 and %d", pes[0].lostCount(1), pes[1].lostCount(0), c.lost10)
			}
			if err := pes[1].m.Close(); err != nil {
				t.Fatalf("Close after the %s: %v", c.name, err)
			}
		})
	}
}

// attack opens a connection to addr, runs fn on it, and reports whether
// the server closed it afterwards.
func attack(t *testing.T, addr string, fn func(c net.Conn)) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fn(c)
	// Whatever was said, the server ends with a close, never a frame.
	rest, _ := io.ReadAll(c)
	if len(rest) > refuseLen {
		t.Fatalf("server sent %d bytes after the refusal", len(rest))
	}
}

// Strangers are refused, logged with their address, and never touch the
// segment; the established link keeps working.
func TestAuthRefusals(t *testing.T) {
	pes := newJob(t, 2, 1<<16, "127.0.0.1", func(c *Config) { c.Timeout = time.Second })
	target := pes[1]
	addr := target.m.Addr()
	good := hsParams{key: testKey, jobID: testJob, rank: 0, size: 2, streams: 1, memSize: 1 << 16}
	put := append(appendPut(nil, 0, 8), bytes.Repeat([]byte{0xAA}, 8)...)

	helloFor := func(hp hsParams) []byte {
		h := hello{jobID: hp.jobID, client: uint32(hp.rank), server: 1, streams: 1, memSize: hp.memSize}
		return appendHello(nil, &h)
	}
	readRefusal := func(t *testing.T, c net.Conn) byte {
		var b [refuseLen]byte
		if _, err := io.ReadFull(c, b[:]); err != nil {
			t.Fatalf("no refusal: %v", err)
		}
		var rf *refusal
		if err := parseAnswer(b[:]); !errors.As(err, &rf) {
			t.Fatalf("answer %x: %v", b, err)
		}
		return rf.code
	}
	cases := []struct {
		name string
		fn   func(t *testing.T, c net.Conn)
	}{
		{"wrong key", func(t *testing.T, c net.Conn) {
			raw := helloFor(good)
			c.Write(raw)
			var rb [replyLen]byte
			if _, err := io.ReadFull(c, rb[:]); err != nil {
				t.Fatal(err)
			}
			// The exchange, as its responder, with another key: the
			// server refuses inside it (auth REFUSE), before it proves
			// anything, and never applies the PUT.
			wrong := bytes.Repeat([]byte{7}, 32)
			err := auth.Exchange(c, wrong, auth.Responder, labelMesh, raw, rb[:])
			if !errors.Is(err, auth.ErrRefused) {
				t.Fatalf("exchange with the wrong key: %v, want auth.ErrRefused", err)
			}
			c.Write(put) // never applied
		}},
		{"reflected server proof", func(t *testing.T, c net.Conn) {
			// There is no server proof to reflect before the client's:
			// a RESPONSE made of the server's own CHALLENGE nonce and
			// zeros is refused inside the exchange.
			c.Write(helloFor(good))
			var b [replyLen + 36]byte
			if _, err := io.ReadFull(c, b[:]); err != nil {
				t.Fatal(err)
			}
			resp := append([]byte{0x01, 0xA2, 0, 0}, b[replyLen+4:]...)
			c.Write(append(resp, make([]byte, 32)...))
			var ans [4]byte
			if _, err := io.ReadFull(c, ans[:]); err != nil || ans != [4]byte{0x01, 0xAF, 0x01, 0} {
				t.Fatalf("answer % x, %v: want an auth REFUSE (bad proof)", ans, err)
			}
		}},
		{"no key: garbage", func(t *testing.T, c net.Conn) {
			c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
			c.Write(put)
		}},
		{"no key: frames without a handshake", func(t *testing.T, c net.Conn) {
			c.Write(put)
		}},
		{"wrong job", func(t *testing.T, c net.Conn) {
			bad := good
			bad.jobID = "another-job"
			c.Write(helloFor(bad))
			if code := readRefusal(t, c); code != refuseJob {
				t.Fatalf("refusal code %d", code)
			}
		}},
		{"wrong version", func(t *testing.T, c net.Conn) {
			h := helloFor(good)
			h[4] = Version + 1
			c.Write(h)
			if code := readRefusal(t, c); code != refuseVersion {
				t.Fatalf("refusal code %d", code)
			}
		}},
		{"higher rank dialling", func(t *testing.T, c net.Conn) {
			bad := good
			bad.rank = 1
			c.Write(helloFor(bad))
			if code := readRefusal(t, c); code != refuseRank {
				t.Fatalf("refusal code %d", code)
			}
		}},
		{"already connected rank", func(t *testing.T, c net.Conn) {
			hp := good
			hp.key = testKey
			_, err := clientHandshake(c, &hp, 1, 0, hsKindLink)
			var rf *refusal
			if !errors.As(err, &rf) || rf.code != refuseDuplicate {
				t.Fatalf("duplicate stream: %v", err)
			}
		}},
		{"silent past the handshake deadline", func(t *testing.T, c net.Conn) {
			c.Write(helloFor(good)[:10])
		}},
	}
	l := link(t, pes, 0, 1)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var local string
			attack(t, addr, func(c net.Conn) {
				local = c.LocalAddr().String()
				tc.fn(t, c)
			})
			// The job is unaffected and the segment untouched outside what
			// the honest peer wrote.
			v := []byte{byte(i + 1)}
			if err := l.Put(100, v); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, 1)
			if err := l.Get(got, 100); err != nil || got[0] != v[0] {
				t.Fatalf("established link after the attack: %v %v", got, err)
			}
			target.sync()
			if !zero(target.mem[:100]) || !zero(target.mem[101:]) {
				t.Fatal("segment touched by a refused peer")
			}
			if !target.logs.contains(local) {
				t.Fatalf("refusal of %s not logged: %q", local, target.logs.all())
			}
		})
	}
	if pes[1].lostCount(0) != 0 {
		t.Fatal("an attack cost the job its link")
	}
}

// Connect fails fast with errs.Auth against a server with another key,
// and names the missing ranks on a timeout.
func TestConnectErrors(t *testing.T) {
	a := newPE(t, 0, 3, 4096, "127.0.0.1", nil)
	b := newPE(t, 1, 3, 4096, "127.0.0.1", func(c *Config) { c.Key = bytes.Repeat([]byte{1}, 32) })
	defer a.m.Close()
	defer b.m.Close()
	go b.m.Connect(context.Background(), map[int]string{0: a.m.Addr()})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	err := a.m.Connect(ctx, map[int]string{1: b.m.Addr()})
	if !errors.Is(err, errs.Auth) || time.Since(start) > 3*time.Second {
		t.Fatalf("connect to a PE with another key: %v after %v", err, time.Since(start))
	}

	c := newPE(t, 0, 3, 4096, "127.0.0.1", nil)
	defer c.m.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	err = c.m.Connect(ctx2, map[int]string{2: dead})
	if !errors.Is(err, errs.Timeout) || !strings.Contains(err.Error(), "[2]") {
		t.Fatalf("connect to nobody: %v", err)
	}
}

// No goroutine or descriptor outlives Close, after traffic, after a loss
// and after a refused stranger.
func TestNoLeaks(t *testing.T) {
	g0, fd0 := runtime.NumGoroutine(), openFDs(t)
	for round := 0; round < 2; round++ {
		pes := make([]*tpe, 3)
		for i := range pes {
			pes[i] = newPE(t, i, 3, 1<<20, "127.0.0.1", func(c *Config) { c.Streams = 2; c.Heartbeat = 50 * time.Millisecond })
		}
		connectAll(t, pes)
		l := link(t, pes, 0, 2)
		if err := l.PutNBI(0, make([]byte, stripeMin)); err != nil { // striped
			t.Fatal(err)
		}
		if err := l.GetNBI(make([]byte, stripeMin), 0); err != nil {
			t.Fatal(err)
		}
		if err := l.Flush(); err != nil {
			t.Fatal(err)
		}
		attack(t, pes[1].m.Addr(), func(c net.Conn) { c.Write([]byte("garbage!")) })
		link(t, pes, 1, 2).streams[1].conn.Close() // a loss between 1 and 2
		for _, p := range pes {
			p.m.Close()
			p.m.Close() // idempotent
		}
	}
	if g := settle(g0); g > g0 {
		t.Fatalf("%d goroutines before, %d after", g0, g)
	}
	if fd := openFDs(t); fd > fd0 {
		t.Fatalf("%d descriptors before, %d after", fd0, fd)
	}
}

func TestConfigChecks(t *testing.T) {
	good := Config{Rank: 0, Size: 2, JobID: "j", Key: testKey, Mem: make([]byte, 64), Atomics: heapAtomics(make([]byte, 64)), Listen: "127.0.0.1:0"}
	for name, edit := range map[string]func(*Config){
		"size 0":          func(c *Config) { c.Size = 0 },
		"rank past size":  func(c *Config) { c.Rank = 2 },
		"empty job":       func(c *Config) { c.JobID = "" },
		"long job":        func(c *Config) { c.JobID = strings.Repeat("x", 256) },
		"short key":       func(c *Config) { c.Key = []byte("short") },
		"unaligned mem":   func(c *Config) { c.Mem = c.Mem[1:] },
		"no atomics":      func(c *Config) { c.Atomics = nil },
		"heartbeat 1ns":   func(c *Config) { c.Heartbeat = time.Nanosecond },
		"heartbeat 1 y":   func(c *Config) { c.Heartbeat = 365 * 24 * time.Hour },
		"misses 1e6":      func(c *Config) { c.Misses = 1_000_000 },
		"no listen":       func(c *Config) { c.Listen = "" },
		"negative":        func(c *Config) { c.Timeout = -1 },
		"too many stream": func(c *Config) { c.Streams = maxStreams + 1 },
	} {
		c := good
		edit(&c)
		if m, err := Listen(c); !errors.Is(err, errs.Invalid) {
			if m != nil {
				m.Close()
			}
			t.Errorf("%s: %v", name, err)
		}
	}
}
