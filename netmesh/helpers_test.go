package netmesh

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goshmem/goshmem/heap"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

const testJob = "job-netmesh-test"

// tpe is one test PE: a mesh over a plain []byte segment.
type tpe struct {
	m       *Mesh
	mem     []byte
	applied atomic.Uint64 // bumped by Notify: loading it orders the reader's writes before ours
	lostMu  sync.Mutex
	lost    map[int][]error
	logs    *testLog
}

// sync makes every write the mesh's readers applied so far visible to the
// calling goroutine (for the race detector; see doc.go's caveats).
func (p *tpe) sync() { p.applied.Load() }

func (p *tpe) lostCount(rank int) int {
	p.lostMu.Lock()
	defer p.lostMu.Unlock()
	return len(p.lost[rank])
}

type testLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *testLog) logf(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *testLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

func (l *testLog) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, x := range l.lines {
		if strings.Contains(x, s) {
			return true
		}
	}
	return false
}

// newPE listens for one PE of a job of size PEs.
func newPE(t testing.TB, rank, size, memSize int, host string, edit func(*Config)) *tpe {
	t.Helper()
	p := &tpe{mem: make([]byte, memSize), lost: make(map[int][]error), logs: &testLog{}}
	cfg := Config{
		Rank: rank, Size: size, JobID: testJob, Key: testKey, Mem: p.mem, Atomics: heapAtomics(p.mem),
		Notify:    func(off, n uint64) { p.applied.Add(1) },
		Listen:    net.JoinHostPort(host, "0"),
		Timeout:   20 * time.Second,
		Heartbeat: 200 * time.Millisecond,
		Logf:      p.logs.logf,
		OnLost: func(r int, err error) {
			p.lostMu.Lock()
			p.lost[r] = append(p.lost[r], err)
			p.lostMu.Unlock()
		},
	}
	if edit != nil {
		edit(&cfg)
	}
	m, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.m = m
	return p
}

// connectAll connects every PE of pes with every other.
func connectAll(t testing.TB, pes []*tpe) {
	t.Helper()
	addrs := make(map[int]string)
	for i, p := range pes {
		addrs[i] = p.m.Addr()
	}
	var wg sync.WaitGroup
	errc := make(chan error, len(pes))
	for i, p := range pes {
		peers := make(map[int]string)
		for r, a := range addrs {
			if r != i {
				peers[r] = a
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := p.m.Connect(ctx, peers); err != nil {
				errc <- err
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}

// newJob starts n connected PEs on host and closes them at cleanup.
func newJob(t testing.TB, n, memSize int, host string, edit func(*Config)) []*tpe {
	t.Helper()
	pes := make([]*tpe, n)
	for i := range pes {
		pes[i] = newPE(t, i, n, memSize, host, edit)
	}
	t.Cleanup(func() {
		for _, p := range pes {
			p.m.Close()
		}
	})
	connectAll(t, pes)
	return pes
}

// link returns pes[from]'s link to to.
func link(t testing.TB, pes []*tpe, from, to int) *Link {
	t.Helper()
	l := pes[from].m.Link(to)
	if l == nil {
		t.Fatalf("PE %d has no link to PE %d", from, to)
	}
	return l
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed) + 1
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	return b
}

// openFDs counts this process's open file descriptors.
func openFDs(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

// settle waits until the goroutine count is at most want (goroutines of
// other packages' timers may take a moment to go), and reports the count.
func settle(want int) int {
	n := runtime.NumGoroutine()
	for i := 0; i < 200 && n > want; i++ {
		time.Sleep(5 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	return n
}

func ipv6Loopback() bool {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// spinMode is SpinOn for busy, else SpinOff: the tests and benchmarks
// compare the two ways of waiting, whatever SpinAuto would choose here.
func spinMode(busy bool) SpinMode {
	if busy {
		return SpinOn
	}
	return SpinOff
}

// heapAtomics applies a test PE's atomics with heap's, as shmem wires
// them for a real PE. The op codes are the same numbers in both packages
// (TestOpCodesMatchHeap), so the conversion is a cast here; shmem maps
// them one by one.
type heapAtomics []byte

func (m heapAtomics) Atomic(off uint64, width int, op AtomicOp, v, cond uint64) uint64 {
	return heap.AtomicAt(m, off, width, heap.AtomicOp(op), v, cond)
}
