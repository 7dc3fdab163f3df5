package suite

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/goshmem/goshmem/benchmarks/report"
	"github.com/goshmem/goshmem/netmesh"
	"github.com/goshmem/goshmem/shmem"
)

// offline is a B that can build limits without a job: its TCP link is
// marked as tried and failed, so building a TCP limit meets no PE.
func offline(transport string, npes int) *B {
	return &B{cfg: Config{Transport: transport}, rank: 0, npes: npes, linked: true, tcpErr: errors.New("offline"),
		starred: true, starErr: errors.New("offline")}
}

// Every figure is held to its transport's limit: same-host limits in shm
// jobs, TCP limits in tcp jobs, never the other way round.
func TestLimitPerTransport(t *testing.T) {
	for _, c := range []struct {
		what     string
		build    func(b *B) limit
		shm, tcp string
	}{
		{"put latency", func(b *B) limit { return b.dataLimit(8, report.Latency, false) }, limCopy, limTCPRTTPoll},
		{"get latency", func(b *B) limit { return b.getLatencyLimit(4096) }, limCopy, limTCPRTTPoll},
		{"bandwidth", func(b *B) limit { return b.dataLimit(1<<20, report.Bandwidth, false) }, limCopy, limTCPStream},
		{"put rate", func(b *B) limit { return b.dataLimit(8, report.Rate, false) }, limCopy, limTCPFrames},
		{"put rate, all pairs", func(b *B) limit { return b.dataLimit(8, report.Rate, true) }, limCopy, limTCPFrames},
		{"atomic latency", func(b *B) limit { return b.atomicLimit("fetch-add", report.Latency) }, limAtomicRaw, limTCPRTTPoll},
		{"atomic rate", func(b *B) limit { return b.atomicLimit("swap", report.Rate) }, limAtomicRaw, limTCPFrames},
		{"barrier", func(b *B) limit { return b.syncLimit(limBarrier, 2) }, limBarrier, limTCPFloor},
		{"barrier, 2 PEs", func(b *B) limit { return b.syncLimit(limBarrier, 1) }, limBarrier, limTCPFloor},
		{"ping-pong", func(b *B) limit { return b.syncLimit(limCacheline, 2) }, limCacheline, limTCPRTTPoll},
		{"ring latency", func(b *B) limit { return b.messageLimit(4096, report.Latency, false) }, limCopyFloor, limTCPFloor},
		{"ring rate", func(b *B) limit { return b.messageLimit(64, report.Rate, false) }, limCopy, limTCPFrames},
		{"ring rate, all PEs", func(b *B) limit { return b.messageLimit(256<<10, report.Rate, true) }, limCopy, limTCPFrames},
	} {
		if got := c.build(offline(TransportSHM, 2)).name; got != c.shm {
			t.Errorf("%s over shm: limit %s, want %s", c.what, got, c.shm)
		}
		l := c.build(offline(TransportTCP, 2))
		if l.name != c.tcp {
			t.Errorf("%s over tcp: limit %s, want %s", c.what, l.name, c.tcp)
		}
		// Over tcp the limit runs on the link, and reports its failure
		// instead of touching a peer's heap.
		if _, err := l.run(1); err == nil || !strings.Contains(err.Error(), "offline") {
			t.Errorf("%s over tcp without a link: %v, want the link's error", c.what, err)
		}
	}
}

// A pair's rate and bandwidth figures over shared memory are held to
// copy-stream too; latency figures, all-PE figures and tcp figures are
// not (tcp-stream already crosses processes).
func TestStreamExtra(t *testing.T) {
	for _, c := range []struct {
		transport string
		m         report.Metric
		all       bool
		want      int
	}{
		{TransportSHM, report.Bandwidth, false, 1}, {TransportSHM, report.Rate, false, 1},
		{TransportSHM, report.Latency, false, 0}, {TransportSHM, report.Rate, true, 0},
		{TransportTCP, report.Bandwidth, false, 0}, {TransportTCP, report.Rate, false, 0},
	} {
		got := offline(c.transport, 2).streamExtra(4096, c.m, c.all)
		if len(got) != c.want || (c.want == 1 && got[0].name != limCopyStream) {
			t.Errorf("%s %s all=%v: %d extra limits %v, want %d copy-stream", c.transport, c.m, c.all, len(got), got, c.want)
		}
	}
}

// The barrier figure's limit: over TCP with 3 or more PEs the plain-Go
// gather-and-release barrier of all PEs (tcp-barrier), run on its own
// connections; with 2 PEs, and over shared memory, the floor of
// ceil(log2 P) one-way transfers.
func TestBarrierLimit(t *testing.T) {
	for _, c := range []struct {
		transport string
		npes      int
		want      string
	}{
		{TransportTCP, 2, limTCPFloor}, {TransportTCP, 3, limTCPBarrier}, {TransportTCP, 4, limTCPBarrier},
		{TransportTCP, 9, limTCPBarrier}, {TransportSHM, 2, limBarrier}, {TransportSHM, 4, limBarrier},
	} {
		l := offline(c.transport, c.npes).barrierLimit(float64(syncRoundsOf(c.npes)))
		if l.name != c.want {
			t.Errorf("barrier of %d PEs over %s: limit %s, want %s", c.npes, c.transport, l.name, c.want)
		}
		if c.transport != TransportTCP {
			continue
		}
		if _, err := l.run(1); err == nil || !strings.Contains(err.Error(), "offline") {
			t.Errorf("barrier of %d PEs over tcp without connections: %v, want the connections' error", c.npes, err)
		}
	}
}

// syncRoundsOf is ceil(log2 n), the barrier suite's count of one-way
// transfers.
func syncRoundsOf(n int) int {
	r := 0
	for d := 1; d < n; d <<= 1 {
		r++
	}
	return r
}

// The same-host limits fail with a clear error where the peer's heap is
// not mapped, instead of dereferencing shmem.Ptr's nil.
func TestSameHostLimitWithoutMapping(t *testing.T) {
	b := offline(TransportTCP, 2)
	b.words = shmem.Sym[uint64]{} // an invalid handle: shmem.Ptr is nil
	for _, l := range []limit{b.cachelineRTT(limCacheline, 2), b.rawAtomic("fetch-add"), b.copyFloor(64), b.copyStream(64)} {
		_, err := l.run(1)
		if err == nil || !strings.Contains(err.Error(), "same-host limits apply to shm jobs only") {
			t.Errorf("%s without the peer's heap: %v", l.name, err)
		}
	}
}

func TestScaledLimits(t *testing.T) {
	rtt := limit{name: "rtt", run: func(n int) (sample, error) {
		return sample{ns: 1000 * float64(n), ops: float64(n), bytes: 16 * float64(n)}, nil
	}}
	// A barrier floor of 2 one-way transfers is one round trip; of 1, half.
	for oneWays, want := range map[float64]float64{2: 1000, 1: 500, 3: 1500} {
		s, _ := oneWay(rtt, oneWays).run(10)
		if got := s.value(report.Latency); math.Abs(got-want) > 1e-9 {
			t.Errorf("oneWay(%v): %v ns, want %v", oneWays, got, want)
		}
	}
	stream := limit{name: limTCPStream, run: func(n int) (sample, error) {
		return sample{ns: 1e6, ops: float64(n), bytes: float64(n) * tcpStreamSize}, nil
	}}
	f := inFrames(stream, 32)
	s, _ := f.run(2)
	if want := 2.0 * tcpStreamSize / 32 / 1e6 * 1e3; f.name != limTCPFrames || math.Abs(s.value(report.Rate)-want) > 1e-9 {
		t.Errorf("inFrames: %s %v Mops/s, want %s %v", f.name, s.value(report.Rate), limTCPFrames, want)
	}
}

// The frame sizes behind tcp-stream-frames, as docs/wire.md and
// docs/performance.md give them: a PUT header of 14 bytes and an ATOMIC
// request of 32.
func TestFrameBytes(t *testing.T) {
	if putFrameBytes != 14+8 || atomicFrameBytes != 32 {
		t.Errorf("PUT of 8 bytes: %d bytes on the wire, ATOMIC: %d; docs/performance.md says 22 and 32",
			putFrameBytes, atomicFrameBytes)
	}
	// A PUT_SIGNAL's header, to which a ring message's payload adds.
	ps := netmesh.AppendFrame(nil, &netmesh.Frame{Type: 0x06, Op: 1, Payload: make([]byte, 64)})
	if len(ps) != putSignalHeaderSize+64 || putSignalHeaderSize != 32 {
		t.Errorf("PUT_SIGNAL of 64 bytes: %d bytes on the wire, header %d; docs/performance.md says 32 + 64", len(ps), putSignalHeaderSize)
	}
	buf := netmesh.AppendFrame(nil, &netmesh.Frame{Type: 0x01, Payload: make([]byte, 8)})
	f, n, err := netmesh.ParseFrame(buf)
	if err != nil || n != len(buf) || len(f.Payload) != 8 {
		t.Errorf("the PUT frame does not decode as one PUT of 8 bytes: %+v, %d, %v", f, n, err)
	}
}

func TestCheckRoutes(t *testing.T) {
	in := func(kinds ...string) shmem.Info {
		info := shmem.Info{PE: 0, Host: "a"}
		for r, k := range kinds {
			info.Routes = append(info.Routes, shmem.Route{PE: r, Kind: k, Host: "h", Addr: map[bool]string{true: "127.0.0.1:1"}[k == "tcp"]})
		}
		return info
	}
	for _, c := range []struct {
		transport string
		info      shmem.Info
		ok        bool
	}{
		{TransportSHM, in("self", "shm", "shm"), true},
		{TransportTCP, in("self", "tcp", "tcp"), true},
		{TransportSHM, in("self", "shm", "tcp"), false},
		{TransportTCP, in("self", "tcp", "shm"), false},
		{TransportNetns, in("self", "tcp", "tcp"), true},
		{TransportNetns, in("self", "tcp", "shm"), false},
	} {
		routes, err := checkRoutes(c.info, c.transport)
		if (err == nil) != c.ok {
			t.Errorf("%s job with routes %+v: %v", c.transport, c.info.Routes, err)
		}
		if c.ok && (len(routes) != 2 || !strings.HasPrefix(routes[0], "PE 1: "+c.info.Routes[1].Kind)) {
			t.Errorf("routes %q", routes)
		}
	}
}

func TestFillPattern(t *testing.T) {
	for _, n := range []int{0, 1, 255, 256, 257, 1000, 1 << 16} {
		p := make([]byte, n)
		fillPattern(p)
		for i, v := range p {
			if v != byte(i) {
				t.Fatalf("fillPattern of %d bytes: p[%d] = %d", n, i, v)
			}
		}
	}
}
