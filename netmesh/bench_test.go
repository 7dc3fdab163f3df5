package netmesh

import (
	"io"
	"net"
	"slices"
	"testing"
	"time"
)

// Each benchmark measures the machine's own limit on the same path in the
// same run (a raw Go TCP connection over loopback) and reports the
// netmesh result as a ratio to it.

// rawPair returns two ends of a loopback TCP connection.
func rawPair(b *testing.B) (client, server *net.TCPConn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	s := <-acc
	b.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// rawPingPong returns a function that does one 8-byte ping-pong over raw
// TCP.
func rawPingPong(b *testing.B) func() {
	c, s := rawPair(b)
	go func() {
		buf := make([]byte, 8)
		for {
			if _, err := io.ReadFull(s, buf); err != nil {
				return
			}
			if _, err := s.Write(buf); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 8)
	return func() {
		c.Write(buf)
		io.ReadFull(c, buf)
	}
}

// interleave times n calls of mesh and of raw, alternating in rounds of
// round calls so that a shared machine's noise falls on both alike. It returns the
// median per-call time of each over the rounds.
func interleave(n, round int, mesh, raw func()) (tm, tr time.Duration) {
	var ms, rs []time.Duration
	for done := 0; done < n; {
		k := min(round, n-done)
		start := time.Now()
		for i := 0; i < k; i++ {
			raw()
		}
		mid := time.Now()
		for i := 0; i < k; i++ {
			mesh()
		}
		ms = append(ms, time.Since(mid)/time.Duration(k))
		rs = append(rs, mid.Sub(start)/time.Duration(k))
		done += k
	}
	slices.Sort(ms)
	slices.Sort(rs)
	return ms[len(ms)/2], rs[len(rs)/2]
}

// rawStreamer returns a function that sends n bytes in 1 MiB writes over
// a raw TCP connection and returns once the receiver has read them all.
// The writes walk through a 4 MiB source, like the 4 MiB PUTs they are
// compared with: a single hot 1 MiB buffer would measure the cache as
// much as the path.
func rawStreamer(b *testing.B) func(n int) {
	c, s := rawPair(b)
	want := make(chan int)
	got := make(chan struct{})
	go func() {
		buf := make([]byte, 4<<20)
		for n := range want {
			for r := 0; r < n; {
				k, err := s.Read(buf)
				if err != nil {
					return
				}
				r += k
			}
			got <- struct{}{}
		}
	}()
	b.Cleanup(func() { close(want) })
	src := pattern(4<<20, 2)
	const chunk = 1 << 20
	return func(n int) {
		want <- n
		for sent := 0; sent < n; sent += chunk {
			off := sent % len(src)
			c.Write(src[off : off+chunk])
		}
		<-got
	}
}

// report reports median per-call times and their ratio.
func report(b *testing.B, mesh, raw time.Duration) {
	b.ReportMetric(float64(mesh.Nanoseconds()), "mesh-ns/op")
	b.ReportMetric(float64(raw.Nanoseconds()), "raw-ns/op")
	b.ReportMetric(float64(mesh)/float64(raw), "ratio")
}

func benchJob(b *testing.B, mem int) *Link {
	return benchJobBusy(b, mem, false)
}

func benchJobBusy(b *testing.B, mem int, busy bool) *Link {
	pes := newJob(b, 2, mem, "127.0.0.1", func(c *Config) { c.Spin = spinMode(busy) })
	return link(b, pes, 0, 1)
}

// latencySetup returns a link to a peer PE and a raw 8-byte ping-pong on
// the same path: both in this process, or both in a peer process. With
// busy, both PEs run with Config.Spin = SpinOn (the raw ping-pong stays the
// plain blocking one: it is the yardstick).
func latencySetup(b *testing.B, proc, busy bool) (*Link, func()) {
	if proc {
		l, addr := peerProcess(b, busy)
		return l, rawPingPongTo(b, addr)
	}
	return benchJobBusy(b, 1<<16, busy), rawPingPong(b)
}

func latencyBench(b *testing.B, op func(l *Link) error) { latencyBenchMode(b, false, op) }

func latencyBenchMode(b *testing.B, busy bool, op func(l *Link) error) {
	for _, proc := range []bool{false, true} {
		name := "in-process"
		if proc {
			name = "two-processes"
		}
		b.Run(name, func(b *testing.B) {
			l, raw := latencySetup(b, proc, busy)
			f := func() {
				if err := op(l); err != nil {
					b.Fatal(err)
				}
			}
			interleave(200, 50, f, raw) // warm up both
			b.ResetTimer()
			mesh, rt := interleave(b.N, 50, f, raw)
			b.StopTimer()
			report(b, mesh, rt)
		})
	}
}

// BenchmarkGet8 is the 8-byte GET round trip against a raw 8-byte TCP
// ping-pong on the same path, interleaved (ratio = GET time / raw time;
// target <= 1.2).
func BenchmarkGet8(b *testing.B) {
	dst := make([]byte, 8)
	latencyBench(b, func(l *Link) error { return l.Get(dst, 0) })
}

// BenchmarkFetchAdd8 is the 8-byte fetch-add round trip against the raw
// ping-pong, interleaved (target <= 1.2).
func BenchmarkFetchAdd8(b *testing.B) {
	latencyBench(b, func(l *Link) error {
		_, err := l.Atomic(8, OpFetchAdd, 0, 1, 0)
		return err
	})
}

// BenchmarkGet8BusyPoll is BenchmarkGet8 with Config.Spin = SpinOn on both
// PEs: the caller and the peer's reader poll their sockets instead of
// sleeping (target: well below the raw ping-pong, ratio < 1).
func BenchmarkGet8BusyPoll(b *testing.B) {
	dst := make([]byte, 8)
	latencyBenchMode(b, true, func(l *Link) error { return l.Get(dst, 0) })
}

// BenchmarkFetchAdd8BusyPoll is BenchmarkFetchAdd8 with Config.Spin = SpinOn
// on both PEs.
func BenchmarkFetchAdd8BusyPoll(b *testing.B) {
	latencyBenchMode(b, true, func(l *Link) error {
		_, err := l.Atomic(8, OpFetchAdd, 0, 1, 0)
		return err
	})
}

// BenchmarkPut4M is the bandwidth of blocking 4 MiB PUTs against a raw
// stream of 1 MiB writes, interleaved in rounds of 16 MiB (a round of
// PUTs ends with a Flush; a raw round ends when the receiver has read
// it). bw-ratio = raw time / mesh time, the fraction of the raw
// bandwidth reached (target >= 0.85).
func BenchmarkPut4M(b *testing.B) {
	const size, perRound = 4 << 20, 4
	l := benchJob(b, size)
	src := pattern(size, 1)
	raw := rawStreamer(b)
	mesh := func() {
		for i := 0; i < perRound; i++ {
			if err := l.Put(0, src); err != nil {
				b.Fatal(err)
			}
		}
		if err := l.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	rawRound := func() { raw(perRound * size) }
	interleave(2, 1, mesh, rawRound) // warm up
	b.SetBytes(size)
	b.ResetTimer()
	rounds := (b.N + perRound - 1) / perRound
	tm, tr := interleave(rounds, 1, mesh, rawRound)
	b.StopTimer()
	b.ReportMetric(perRound*size/tm.Seconds()/(1<<20), "mesh-MiB/s")
	b.ReportMetric(perRound*size/tr.Seconds()/(1<<20), "raw-MiB/s")
	b.ReportMetric(tr.Seconds()/tm.Seconds(), "bw-ratio")
}

// BenchmarkPutNBI8 is the message rate of 8-byte non-blocking PUTs to one
// peer, completed by a Flush (target >= 1e6/s).
func BenchmarkPutNBI8(b *testing.B) {
	l := benchJob(b, 1<<20)
	src := make([]byte, 8)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := l.PutNBI(uint64(i%(1<<17))*8, src); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.Flush(); err != nil {
		b.Fatal(err)
	}
	d := time.Since(start)
	b.ReportMetric(float64(b.N)/d.Seconds()/1e6, "Mmsg/s")
}

// The blocking hot paths allocate nothing per operation.
func TestHotPathAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	pes := newJob(t, 2, 1<<16, "127.0.0.1", nil)
	l := link(t, pes, 0, 1)
	dst := make([]byte, 8)
	src := make([]byte, 8)
	// Each operation must succeed: an error path (a dead link) allocates
	// nothing either, and would prove nothing.
	var failed error
	check := func(err error) {
		if err != nil && failed == nil {
			failed = err
		}
	}
	ops := []struct {
		name string
		f    func()
	}{
		{"Get", func() { check(l.Get(dst, 0)) }},
		{"Put", func() { check(l.Put(0, src)) }},
		{"Atomic", func() { _, err := l.Atomic(8, OpFetchAdd, 8, 1, 0); check(err) }},
		{"PutNBI", func() { check(l.PutNBI(0, src)) }},
		{"Flush", func() { check(l.PutNBI(0, src)); check(l.Flush()) }},
	}
	for i := 0; i < 200; i++ { // grow the tables and pools first
		for _, op := range ops {
			op.f()
		}
	}
	for _, op := range ops {
		n := testing.AllocsPerRun(200, op.f)
		if failed != nil {
			t.Fatalf("%s: %v", op.name, failed)
		}
		if n > 0.1 {
			t.Errorf("%s: %.2f allocations per call", op.name, n)
		}
	}
	if err := l.Err(); err != nil {
		t.Fatalf("the link failed during the test: %v", err)
	}
}
