package boot

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

// wait bounds every wait in these tests: generous, so a loaded machine
// passes, but a hang still fails in seconds rather than minutes.
const wait = 15 * time.Second

type testJob struct {
	s    *Server
	addr string
	id   string
	key  []byte
	size int
}

func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, KeySize) }

// startJob runs a Server for size PEs on loopback until the test ends.
func startJob(t *testing.T, size int, tweak ...func(*Server)) *testJob {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	j := &testJob{addr: ln.Addr().String(), id: "job-" + t.Name(), key: testKey(7), size: size}
	j.s = NewServer(ln, j.id, j.key, size)
	for _, f := range tweak {
		f(j.s)
	}
	errc := make(chan error, 1)
	go func() { errc <- j.s.Serve(context.Background()) }()
	t.Cleanup(func() {
		j.s.Close()
		if err := <-errc; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return j
}

func (j *testJob) dial(t *testing.T, rank int) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c, err := Dial(ctx, j.addr, j.id, j.key, rank, j.size)
	if err != nil {
		t.Fatalf("rank %d: Dial: %v", rank, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (j *testJob) dialAll(t *testing.T) []*Client {
	t.Helper()
	cs := make([]*Client, j.size)
	for r := range cs {
		cs[r] = j.dial(t, r)
	}
	return cs
}

func part(round, rank int) []byte {
	return []byte(strings.Repeat(fmt.Sprintf("r%d-k%d;", round, rank), rank+1))
}

// gatherAll runs one round on every client concurrently and checks it.
func gatherAll(t *testing.T, cs []*Client, round int) {
	t.Helper()
	var wg sync.WaitGroup
	res := make([][][]byte, len(cs))
	errc := make([]error, len(cs))
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			res[r], errc[r] = c.Allgather(ctx, part(round, r))
		}()
	}
	wg.Wait()
	for r := range cs {
		if errc[r] != nil {
			t.Fatalf("round %d rank %d: %v", round, r, errc[r])
		}
		if len(res[r]) != len(cs) {
			t.Fatalf("round %d rank %d: %d parts", round, r, len(res[r]))
		}
		for k, p := range res[r] {
			if !bytes.Equal(p, part(round, k)) {
				t.Fatalf("round %d rank %d: part %d = %q", round, r, k, p)
			}
		}
	}
}

// nextEvent returns the next event matching ok, skipping others.
func nextEvent(t *testing.T, s *Server, ok func(Event) bool) Event {
	t.Helper()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case e, open := <-s.Events():
			if !open {
				t.Fatal("events closed")
			}
			if ok(e) {
				return e
			}
		case <-timer.C:
			t.Fatal("no matching event")
		}
	}
}

// drainEvents returns the events still buffered (without waiting).
func drainEvents(s *Server) []Event {
	var out []Event
	for {
		select {
		case e, ok := <-s.Events():
			if !ok {
				return out
			}
			out = append(out, e)
		default:
			return out
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, n := range []int{1, 3, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			j := startJob(t, n)
			cs := make([]*Client, n)
			var wg sync.WaitGroup
			for r := range cs {
				wg.Add(1)
				go func() { defer wg.Done(); cs[r] = j.dial(t, r) }()
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			for round := 1; round <= 5; round++ {
				gatherAll(t, cs, round)
			}
			joined := map[int]bool{}
			for len(joined) < n {
				e := nextEvent(t, j.s, func(e Event) bool { return true })
				if e.Kind != EventJoined {
					t.Fatalf("unexpected event %v", e)
				}
				joined[e.Rank] = true
			}
			for _, c := range cs {
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := cs[0].Allgather(context.Background(), nil); !errors.Is(err, errs.Finalized) {
				t.Fatalf("Allgather after Close: %v", err)
			}
		})
	}
}

func TestEmptyAndLargeParts(t *testing.T) {
	j := startJob(t, 2)
	cs := j.dialAll(t)
	big := bytes.Repeat([]byte{0x5a}, MaxGatherData)
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			data := big
			if r == 1 {
				data = nil
			}
			got, err := c.Allgather(context.Background(), data)
			if err != nil || !bytes.Equal(got[0], big) || len(got[1]) != 0 {
				t.Errorf("rank %d: %v", r, err)
			}
		}()
	}
	wg.Wait()
	if _, err := cs[0].Allgather(context.Background(), make([]byte, MaxGatherData+1)); !errors.Is(err, errs.Invalid) {
		t.Fatalf("oversized part: %v", err)
	}
}

func TestRoundTooLargeFailsOnlyThatRound(t *testing.T) {
	j := startJob(t, 2, func(s *Server) { s.maxTotal = 50 })
	cs := j.dialAll(t)
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Allgather(context.Background(), make([]byte, 100)); !errors.Is(err, errs.Invalid) {
				t.Errorf("rank %d: %v, want errs.Invalid", c.Rank(), err)
			}
		}()
	}
	wg.Wait()
	gatherAll(t, cs, 2) // 18 bytes in all: fits
}

func TestWrongKey(t *testing.T) {
	j := startJob(t, 3)
	c0, c1 := j.dial(t, 0), j.dial(t, 1)
	_, err := Dial(context.Background(), j.addr, j.id, testKey(8), 2, 3)
	if !errors.Is(err, errs.Auth) {
		t.Fatalf("wrong key: %v, want errs.Auth", err)
	}
	if strings.Contains(err.Error(), string(j.key)) {
		t.Fatal("error shows the key")
	}
	// The rank was not taken: the right key still joins, and the round
	// completes.
	c2 := j.dial(t, 2)
	gatherAll(t, []*Client{c0, c1, c2}, 1)
}

func TestWrongJobID(t *testing.T) {
	j := startJob(t, 1)
	if _, err := Dial(context.Background(), j.addr, "other-job", j.key, 0, 1); !errors.Is(err, errs.Auth) {
		t.Fatalf("wrong job id: %v, want errs.Auth", err)
	}
	gatherAll(t, []*Client{j.dial(t, 0)}, 1)
}

func TestJoinRefused(t *testing.T) {
	j := startJob(t, 2)
	c0 := j.dial(t, 0)
	for _, tc := range []struct {
		name       string
		rank, size int
	}{
		{"duplicate rank", 0, 2},
		{"size mismatch", 1, 3},
		{"rank out of range", 2, 3},
	} {
		if _, err := Dial(context.Background(), j.addr, j.id, j.key, tc.rank, tc.size); !errors.Is(err, errs.Auth) {
			t.Errorf("%s: %v, want errs.Auth", tc.name, err)
		}
	}
	gatherAll(t, []*Client{c0, j.dial(t, 1)}, 1)
	for _, e := range drainEvents(j.s) {
		if e.Kind != EventJoined {
			t.Errorf("unexpected event %v", e)
		}
	}
}

func TestDialInvalid(t *testing.T) {
	for _, tc := range []struct {
		rank, size int
		key        []byte
		id         string
	}{
		{0, 0, testKey(1), "j"},
		{2, 2, testKey(1), "j"},
		{-1, 2, testKey(1), "j"},
		{0, 1, nil, "j"},
		{0, 1, testKey(1), ""},
	} {
		if _, err := Dial(context.Background(), "127.0.0.1:1", tc.id, tc.key, tc.rank, tc.size); !errors.Is(err, errs.Invalid) {
			t.Errorf("%+v: %v, want errs.Invalid", tc, err)
		}
	}
}

// fakeServer accepts one connection and runs script on it.
func fakeServer(t *testing.T, script func(nc net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(wait))
		script(nc)
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

func TestImpostorServer(t *testing.T) {
	h := newHandle()
	send := func(nc net.Conn, m message) {
		b, _ := encodeMessage(h, m)
		nc.Write(b)
	}
	got := make(chan []byte, 1)
	// Accepts any Join, runs the key exchange with a PROOF it cannot have
	// computed, and sends Welcome.
	addr := fakeServer(t, func(nc net.Conn) {
		send(nc, &hello{Magic: helloMagic, Version: helloVersion, JobID: "j"})
		readFrame(nc, MaxFrame)
		nc.Write(append([]byte{0x01, 0xA1, 0, 0}, make([]byte, 32)...)) // auth CHALLENGE
		io.ReadFull(nc, make([]byte, 68))                               // the client's RESPONSE
		nc.Write(append([]byte{0x01, 0xA3, 0, 0}, make([]byte, 32)...)) // a forged PROOF
		send(nc, &welcome{})
		ans := make([]byte, 4)
		io.ReadFull(nc, ans)
		got <- ans
	})
	_, err := Dial(context.Background(), addr, "j", testKey(1), 0, 1)
	if !errors.Is(err, errs.Auth) || !errors.Is(err, auth.ErrKey) {
		t.Fatalf("impostor: %v, want errs.Auth and auth.ErrKey", err)
	}
	if a := <-got; !bytes.Equal(a, []byte{0x01, 0xAF, 0x01, 0}) {
		t.Fatalf("client answered the impostor with % x, want an auth REFUSE", a)
	}

	addr = fakeServer(t, func(nc net.Conn) {
		send(nc, &hello{Magic: "httpboot", Version: helloVersion, JobID: "j"})
		readFrame(nc, MaxFrame)
	})
	_, err = Dial(context.Background(), addr, "j", testKey(1), 0, 1)
	if !errors.Is(err, errs.Auth) || !errors.Is(err, errs.Protocol) {
		t.Fatalf("wrong magic: %v, want errs.Auth and errs.Protocol", err)
	}

	addr = fakeServer(t, func(nc net.Conn) { nc.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n")) })
	if _, err = Dial(context.Background(), addr, "j", testKey(1), 0, 1); !errors.Is(err, errs.Auth) {
		t.Fatalf("garbage server: %v, want errs.Auth", err)
	}
}

func TestDialTimeout(t *testing.T) {
	// A server that never speaks.
	addr := fakeServer(t, func(nc net.Conn) { io.Copy(io.Discard, nc) })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := Dial(ctx, addr, "j", testKey(1), 0, 1)
	if !errors.Is(err, errs.Timeout) || !errors.Is(err, errs.Auth) {
		t.Fatalf("silent server: %v, want errs.Timeout and errs.Auth", err)
	}
}

// rawConn connects without the client and returns the server's Hello.
func rawConn(t *testing.T, j *testJob) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", j.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(wait))
	kind, _, err := readFrame(nc, MaxFrame)
	if err != nil || kind != kindHello {
		t.Fatalf("raw conn: kind %#02x, %v", kind, err)
	}
	return nc
}

// expectClosed reads until the server closes nc, and returns the kinds
// of the frames it sent first.
func expectClosed(t *testing.T, name string, nc net.Conn) []byte {
	t.Helper()
	var kinds []byte
	for {
		kind, _, err := readFrame(nc, MaxFrame)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Errorf("%s: server did not close the connection", name)
			}
			return kinds
		}
		kinds = append(kinds, kind)
	}
}

func TestGarbageDoesNotDisturbJob(t *testing.T) {
	j := startJob(t, 3, func(s *Server) { s.handshakeTimeout = 500 * time.Millisecond })
	cs := []*Client{j.dial(t, 0), j.dial(t, 1)}

	garbage := rawConn(t, j)
	garbage.Write([]byte("\x00\x00\x00\x10GET / HTTP/1.1\r\n\r\n"))
	oversize := rawConn(t, j)
	oversize.Write([]byte{0xff, 0xff, 0xff, 0xff, kindJoin})
	badBody := rawConn(t, j)
	badBody.Write(appendFrame(nil, kindJoin, []byte{0xde, 0xad, 0xbe, 0xef}))
	unknown := rawConn(t, j)
	unknown.Write(appendFrame(nil, 0x99, []byte{0x80}))
	silent := rawConn(t, j)
	notHello, err := net.Dial("tcp", j.addr) // sends before reading
	if err != nil {
		t.Fatal(err)
	}
	defer notHello.Close()
	notHello.Write(bytes.Repeat([]byte{0}, 64))

	for name, nc := range map[string]net.Conn{"oversize": oversize, "bad body": badBody, "unknown kind": unknown} {
		if kinds := expectClosed(t, name, nc); !bytes.Equal(kinds, []byte{kindError}) {
			t.Errorf("%s: server sent kinds % x before closing, want an Error", name, kinds)
		}
	}
	expectClosed(t, "garbage", garbage)
	expectClosed(t, "silent", silent)

	// The job goes on: the last rank joins and rounds complete.
	cs = append(cs, j.dial(t, 2))
	gatherAll(t, cs, 1)
	gatherAll(t, cs, 2)
	for _, e := range drainEvents(j.s) {
		if e.Kind != EventJoined {
			t.Errorf("unexpected event %v", e)
		}
	}
}

// drop cuts a client's connection without Bye, as a crash would.
func drop(c *Client) {
	c.nc.Close()
	<-c.deadC
}

func arrived(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.arrived
}

func TestPeerLostFailsPendingRound(t *testing.T) {
	j := startJob(t, 3)
	cs := j.dialAll(t)
	gatherAll(t, cs, 1)

	errc := make(chan error, 2)
	for _, c := range cs[:2] {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			_, err := c.Allgather(ctx, []byte("x"))
			errc <- err
		}()
	}
	for deadline := time.Now().Add(wait); arrived(j.s) < 2; {
		if time.Now().After(deadline) {
			t.Fatal("ranks 0 and 1 did not arrive")
		}
		time.Sleep(5 * time.Millisecond)
	}
	drop(cs[2])
	for range 2 {
		err := <-errc
		if !errors.Is(err, errs.PeerLost) || !strings.Contains(err.Error(), "rank 2") {
			t.Fatalf("pending round: %v, want errs.PeerLost naming rank 2", err)
		}
	}
	e := nextEvent(t, j.s, func(e Event) bool { return e.Kind != EventJoined })
	if e.Kind != EventLost || e.Rank != 2 {
		t.Fatalf("event %v, want EventLost for rank 2", e)
	}
	// Later rounds fail too.
	if _, err := cs[0].Allgather(context.Background(), nil); !errors.Is(err, errs.PeerLost) {
		t.Fatalf("later round: %v", err)
	}
}

func TestPeerLostFailsLaterRounds(t *testing.T) {
	j := startJob(t, 2)
	cs := j.dialAll(t)
	drop(cs[1])
	if e := nextEvent(t, j.s, func(e Event) bool { return e.Kind != EventJoined }); e.Kind != EventLost || e.Rank != 1 {
		t.Fatalf("event %v", e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := cs[0].Allgather(ctx, nil); !errors.Is(err, errs.PeerLost) || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("round after loss: %v", err)
	}
	// Exit still works.
	if err := cs[0].Exit(3); err != nil {
		t.Fatalf("Exit after a loss: %v", err)
	}
}

func TestByeBeforeRound(t *testing.T) {
	j := startJob(t, 2)
	cs := j.dialAll(t)
	gatherAll(t, cs, 1)
	cs[1].Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := cs[0].Allgather(ctx, nil); !errors.Is(err, errs.PeerLost) || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("round after a Bye: %v", err)
	}
	cs[0].Close()
	j.s.Close()
	for _, e := range drainEvents(j.s) {
		if e.Kind == EventLost {
			t.Errorf("Bye reported as %v", e)
		}
	}
}

func TestJoinedViolationIsLost(t *testing.T) {
	j := startJob(t, 2)
	cs := j.dialAll(t)
	cs[1].wmu.Lock()
	cs[1].nc.Write(appendFrame(nil, kindHello, []byte{0x80}))
	cs[1].wmu.Unlock()
	<-cs[1].deadC
	if err := cs[1].failed(true); !errors.Is(err, errs.Protocol) {
		t.Fatalf("violator: %v, want errs.Protocol from the server's Error", err)
	}
	if e := nextEvent(t, j.s, func(e Event) bool { return e.Kind != EventJoined }); e.Kind != EventLost || e.Rank != 1 {
		t.Fatalf("event %v", e)
	}
	if _, err := cs[0].Allgather(context.Background(), nil); !errors.Is(err, errs.PeerLost) {
		t.Fatalf("round after violation: %v", err)
	}
}

func TestExit(t *testing.T) {
	j := startJob(t, 2)
	cs := j.dialAll(t)
	if err := cs[1].Exit(7); err != nil {
		t.Fatal(err)
	}
	e := nextEvent(t, j.s, func(e Event) bool { return e.Kind != EventJoined })
	if e.Kind != EventExit || e.Rank != 1 || e.Code != 7 {
		t.Fatalf("event %v, want EventExit rank 1 code 7", e)
	}
	if err := cs[0].Exit(0); err != nil {
		t.Fatal(err)
	}
	if e := nextEvent(t, j.s, func(e Event) bool { return true }); e.Kind != EventExit || e.Rank != 0 || e.Code != 0 {
		t.Fatalf("event %v", e)
	}
}

func TestAllgatherTimeout(t *testing.T) {
	j := startJob(t, 3)
	cs := j.dialAll(t)
	go cs[1].Allgather(context.Background(), nil) // rank 2 never comes
	for deadline := time.Now().Add(wait); arrived(j.s) < 1; {
		if time.Now().After(deadline) {
			t.Fatal("rank 1 did not arrive")
		}
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := cs[0].Allgather(ctx, []byte("x"))
	if !errors.Is(err, errs.Timeout) || !strings.Contains(err.Error(), "2 of 3 ranks had arrived") || !strings.Contains(err.Error(), "missing ranks [2]") {
		t.Fatalf("timeout: %v", err)
	}
	// The client is out of step now.
	if _, err := cs[0].Allgather(context.Background(), nil); !errors.Is(err, errs.Timeout) {
		t.Fatalf("after a timeout: %v", err)
	}
	// A ctx already done does not send anything.
	done, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if _, err := cs[2].Allgather(done, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled before start: %v", err)
	}
}

func TestServerCloseFailsClients(t *testing.T) {
	j := startJob(t, 2)
	cs := j.dialAll(t)
	errc := make(chan error, 1)
	go func() {
		_, err := cs[0].Allgather(context.Background(), nil)
		errc <- err
	}()
	for deadline := time.Now().Add(wait); arrived(j.s) < 1; {
		if time.Now().After(deadline) {
			t.Fatal("rank 0 did not arrive")
		}
		time.Sleep(5 * time.Millisecond)
	}
	j.s.Close()
	if err := <-errc; !errors.Is(err, errs.PeerLost) {
		t.Fatalf("after server Close: %v", err)
	}
	if err := cs[1].Exit(1); !errors.Is(err, errs.PeerLost) {
		t.Fatalf("Exit after server Close: %v", err)
	}
	if _, ok := <-j.s.Events(); ok {
		// Joined events may remain; drain until closed.
		for range j.s.Events() {
		}
	}
}

func TestServeInvalid(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(ln, "j", nil, 2)
	if err := s.Serve(context.Background()); !errors.Is(err, errs.Invalid) {
		t.Fatalf("empty key: %v", err)
	}
	s.Close()
	if _, ok := <-s.Events(); ok {
		t.Fatal("events open")
	}
	ln, _ = net.Listen("tcp", "127.0.0.1:0")
	s = NewServer(ln, "j", testKey(1), 0)
	if err := s.Serve(context.Background()); !errors.Is(err, errs.Invalid) {
		t.Fatalf("size 0: %v", err)
	}
}

func TestServeContextAndNoLeaks(t *testing.T) {
	before := runtime.NumGoroutine()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(ln, "j", testKey(1), 3)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ctx) }()
	var cs []*Client
	for r := range 3 {
		c, err := Dial(context.Background(), ln.Addr().String(), "j", testKey(1), r, 3)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	gatherAll(t, cs, 1)
	for _, c := range cs[:2] {
		c.Close()
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Serve after cancel: %v", err)
	}
	<-cs[2].deadC
	cs[2].Close()
	s.Close()
	deadline := time.Now().Add(wait)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
