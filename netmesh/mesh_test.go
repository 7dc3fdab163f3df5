package netmesh

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/goshmem/goshmem/heap"
	"github.com/goshmem/goshmem/internal/errs"
)

// transport is one way of carrying the same behavioural tests.
type transport struct {
	name    string
	host    string
	streams int
	busy    bool // Config.Spin = SpinOn, else SpinOff
}

func transports(t *testing.T) []transport {
	ts := []transport{
		{"tcp4", "127.0.0.1", 1, false},
		{"tcp4-4streams", "127.0.0.1", 4, false},
		{"tcp4-busypoll", "127.0.0.1", 1, true},
	}
	if ipv6Loopback() {
		ts = append(ts, transport{"tcp6", "::1", 1, false})
	} else {
		t.Log("IPv6 loopback unavailable here: skipping the [::1] transport")
	}
	return ts
}

func (tr transport) job(t *testing.T, n, memSize int, edit func(*Config)) []*tpe {
	return newJob(t, n, memSize, tr.host, func(c *Config) {
		c.Streams = tr.streams
		c.Spin = spinMode(tr.busy)
		if edit != nil {
			edit(c)
		}
	})
}

func TestPutGetSizes(t *testing.T) {
	const mem = 48 << 20
	for _, tr := range transports(t) {
		t.Run(tr.name, func(t *testing.T) {
			pes := tr.job(t, 2, mem, nil)
			l := link(t, pes, 0, 1)
			back := link(t, pes, 1, 0)
			for i, n := range []int{0, 1, 8, 4 << 10, 1 << 20, 16 << 20, 20<<20 + 3} {
				off := uint64(4096 + i*8) // unaligned relative to each other on purpose
				src := pattern(n, byte(i))
				if err := l.Put(off, src); err != nil {
					t.Fatalf("put %d: %v", n, err)
				}
				if err := l.Flush(); err != nil {
					t.Fatalf("flush after put %d: %v", n, err)
				}
				pes[1].sync()
				if !bytes.Equal(pes[1].mem[off:off+uint64(n)], src) {
					t.Fatalf("put of %d bytes: target bytes differ", n)
				}
				dst := make([]byte, n)
				if err := l.Get(dst, off); err != nil {
					t.Fatalf("get %d: %v", n, err)
				}
				if !bytes.Equal(dst, src) {
					t.Fatalf("get of %d bytes: bytes differ", n)
				}
				// And the other way, from memory the owner wrote itself.
				src2 := pattern(n, byte(100+i))
				copy(pes[0].mem[off+uint64(n):], src2)
				dst2 := make([]byte, n)
				if err := back.Get(dst2, off+uint64(n)); err != nil {
					t.Fatalf("reverse get %d: %v", n, err)
				}
				if !bytes.Equal(dst2, src2) {
					t.Fatalf("reverse get of %d bytes: bytes differ", n)
				}
			}
			if l.RemoteAddr() == "" {
				t.Fatal("empty RemoteAddr")
			}
		})
	}
}

func TestOutOfBoundsRefusedLocally(t *testing.T) {
	pes := newJob(t, 2, 1<<16, "127.0.0.1", nil)
	l := link(t, pes, 0, 1)
	if err := l.Put(1<<16-4, make([]byte, 8)); !errors.Is(err, errs.OutOfBounds) {
		t.Fatalf("put past the end: %v", err)
	}
	if err := l.Get(make([]byte, 8), 1<<16); !errors.Is(err, errs.OutOfBounds) {
		t.Fatalf("get past the end: %v", err)
	}
	if _, err := l.Atomic(8, OpFetch, 1<<16, 0, 0); !errors.Is(err, errs.OutOfBounds) {
		t.Fatalf("atomic past the end: %v", err)
	}
	if _, err := l.Atomic(8, OpFetch, 4, 0, 0); !errors.Is(err, errs.Invalid) {
		t.Fatalf("unaligned atomic: %v", err)
	}
	if _, err := l.Atomic(2, OpFetch, 0, 0, 0); !errors.Is(err, errs.Invalid) {
		t.Fatalf("width 2: %v", err)
	}
	if _, err := l.Atomic(8, AtomicOp(9), 0, 0, 0); !errors.Is(err, errs.Invalid) {
		t.Fatalf("op 9: %v", err)
	}
	if err := l.PutSignal(0, nil, 4, false, 1); !errors.Is(err, errs.Invalid) {
		t.Fatalf("unaligned signal: %v", err)
	}
	if l.Err() != nil {
		t.Fatalf("link down after local refusals: %v", l.Err())
	}
}

func TestAtomicOps(t *testing.T) {
	pes := newJob(t, 2, 1<<16, "127.0.0.1", nil)
	l := link(t, pes, 0, 1)
	const word = 1024
	type step struct {
		op        AtomicOp
		v, cond   uint64
		old, want uint64 // old returned, word after
	}
	for _, width := range []int{4, 8} {
		mask := uint64(1<<32 - 1)
		if width == 8 {
			mask = ^uint64(0)
		}
		start := uint64(0xF0F0_1234_5678_9ABC) & mask
		steps := []step{
			{OpFetch, 0, 0, start, start},
			{OpSet, 7, 0, 0, 7},
			{OpSwap, 11, 0, 7, 11},
			{OpCSwap, 99, 10, 11, 11}, // cond does not match: unchanged
			{OpCSwap, 99, 11, 11, 99},
			{OpFetchAdd, 1, 0, 99, 100},
			{OpFetchAdd, mask, 0, 100, 99}, // adding -1
			{OpFetchAnd, 0x0F, 0, 99, 99 & 0x0F},
			{OpFetchOr, 0xF0, 0, 3, 0xF3},
			{OpFetchXor, 0xFF, 0, 0xF3, 0x0C},
			{OpFetchAdd, mask, 0, 0x0C, 0x0B},
		}
		off := uint64(word + 8*width)
		heapAtomics(pes[1].mem).Atomic(off, width, OpSet, start, 0)
		for i, s := range steps {
			old, err := l.Atomic(width, s.op, off, s.v, s.cond)
			if err != nil {
				t.Fatalf("width %d step %d %s: %v", width, i, s.op, err)
			}
			if s.op != OpSet && old != s.old&mask {
				t.Fatalf("width %d step %d %s: old %#x, want %#x", width, i, s.op, old, s.old&mask)
			}
			got := heapAtomics(pes[1].mem).Atomic(off, width, OpFetch, 0, 0)
			if got != s.want&mask {
				t.Fatalf("width %d step %d %s: word %#x, want %#x", width, i, s.op, got, s.want&mask)
			}
		}
		// The neighbours of a 4-byte word are untouched.
		if width == 4 && (heap.Load64(pes[1].mem, off-8) != 0 || heapAtomics(pes[1].mem).Atomic(off+4, 4, OpFetch, 0, 0) != 0) {
			t.Fatal("a 4-byte atomic touched its neighbours")
		}
	}
}

func TestConcurrentAtomicsExact(t *testing.T) {
	pes := newJob(t, 3, 1<<16, "127.0.0.1", nil)
	const off, goroutines, per = 4096, 8, 500
	var wg sync.WaitGroup
	errc := make(chan error, 3*goroutines)
	for _, from := range []int{1, 2} {
		l := link(t, pes, from, 0)
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < per; i++ {
					if _, err := l.Atomic(8, OpFetchAdd, off, 3, 0); err != nil {
						errc <- err
						return
					}
					if _, err := l.Atomic(4, OpFetchAdd, off+8, 1, 0); err != nil {
						errc <- err
						return
					}
				}
			}()
		}
	}
	// The owner adds to the same word with the same helper, as a same-host
	// PE would: both paths are one hardware atomic.
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				heapAtomics(pes[0].mem).Atomic(off, 8, OpFetchAdd, 5, 0)
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	want := uint64(2*goroutines*per*3 + goroutines*per*5)
	if got := heap.Load64(pes[0].mem, off); got != want {
		t.Fatalf("8-byte total %d, want %d", got, want)
	}
	if got := heapAtomics(pes[0].mem).Atomic(off+8, 4, OpFetch, 0, 0); got != 2*goroutines*per {
		t.Fatalf("4-byte total %d, want %d", got, 2*goroutines*per)
	}
}

func TestPutSignalOrdering(t *testing.T) {
	for _, n := range []int{0, 64, 64 << 10, MaxPayload + 4096} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			rounds := 8
			if n > 1<<20 {
				rounds = 2
			}
			mem := 4096 + rounds*(n+8)
			pes := newJob(t, 2, mem, "127.0.0.1", nil)
			l := link(t, pes, 0, 1)
			const sig = 0
			done := make(chan error, 1)
			go func() {
				for k := 0; k < rounds; k++ {
					src := bytes.Repeat([]byte{byte(k + 1)}, n)
					if err := l.PutSignal(uint64(4096+k*(n+8)), src, sig, true, 1); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			// Whenever the receiver sees the signal at s, rounds < s are whole.
			deadline := time.Now().Add(10 * time.Second)
			for seen := uint64(0); seen < uint64(rounds); {
				s := heap.Load64(pes[1].mem, sig)
				for k := seen; k < s; k++ {
					r := pes[1].mem[4096+int(k)*(n+8):][:n]
					for j, b := range r {
						if b != byte(k+1) {
							t.Fatalf("signal %d seen but round %d byte %d is %d", s, k, j, b)
						}
					}
				}
				seen = s
				if time.Now().After(deadline) {
					t.Fatalf("signal stuck at %d", s)
				}
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			// A set signal stores the value.
			if err := l.PutSignal(4096, []byte{1}, sig, false, 42); err != nil {
				t.Fatal(err)
			}
			if err := l.Flush(); err != nil {
				t.Fatal(err)
			}
			if got := heap.Load64(pes[1].mem, sig); got != 42 {
				t.Fatalf("set signal: %d", got)
			}
		})
	}
}

func TestFlushSemantics(t *testing.T) {
	for _, tr := range transports(t) {
		t.Run(tr.name, func(t *testing.T) {
			const far = 6 << 20
			farBytes := pattern(512<<10, 77)
			pes := tr.job(t, 2, 8<<20, func(c *Config) {
				if c.Rank == 1 {
					copy(c.Mem[far:], farBytes)
				}
			})
			l := link(t, pes, 0, 1)
			if l.Outstanding() {
				t.Fatal("outstanding before anything was sent")
			}
			if err := l.Flush(); err != nil {
				t.Fatal(err)
			}
			big := pattern(1<<20, 9)
			if err := l.PutNBI(0, big); err != nil {
				t.Fatal(err)
			}
			small := []byte{1, 2, 3}
			if err := l.PutNBI(2<<20, small); err != nil {
				t.Fatal(err)
			}
			var old uint64 = 12345
			if err := l.AtomicNBI(8, OpFetchAdd, 4<<20, 5, 0, &old); err != nil {
				t.Fatal(err)
			}
			dst := make([]byte, 512<<10)
			if err := l.GetNBI(dst, far); err != nil {
				t.Fatal(err)
			}
			if !l.Outstanding() {
				t.Fatal("nothing outstanding after NBI operations")
			}
			if err := l.Flush(); err != nil {
				t.Fatal(err)
			}
			if l.Outstanding() {
				t.Fatal("outstanding after Flush")
			}
			pes[1].sync()
			if !bytes.Equal(pes[1].mem[:1<<20], big) || !bytes.Equal(pes[1].mem[2<<20:2<<20+3], small) {
				t.Fatal("flushed puts not applied")
			}
			if old != 0 || heap.Load64(pes[1].mem, 4<<20) != 5 {
				t.Fatalf("fetch-add NBI: old %d word %d", old, heap.Load64(pes[1].mem, 4<<20))
			}
			if !bytes.Equal(dst, farBytes) {
				t.Fatal("GetNBI: wrong bytes after Flush")
			}
			if err := l.Fence(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestManyOutstandingNBI(t *testing.T) {
	const n = 100_000
	pes := newJob(t, 2, 8*n+4096, "127.0.0.1", nil)
	l := link(t, pes, 0, 1)
	vals := make([]uint64, n)
	olds := make([]uint64, n/2)
	for i := 0; i < n; i++ {
		vals[i] = uint64(i)*2654435761 + 1
		var b [8]byte
		le.PutUint64(b[:], vals[i])
		if err := l.PutNBI(uint64(8*i), b[:]); err != nil {
			t.Fatal(err)
		}
	}
	const ctr = 8 * n
	for i := 0; i < n; i++ {
		var dst *uint64
		if i%2 == 0 {
			dst = &olds[i/2]
		}
		if err := l.AtomicNBI(8, OpFetchAdd, ctr, 1, 0, dst); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	pes[1].sync()
	for i := 0; i < n; i++ {
		if got := le.Uint64(pes[1].mem[8*i:]); got != vals[i] {
			t.Fatalf("word %d: %#x, want %#x", i, got, vals[i])
		}
	}
	if got := heap.Load64(pes[1].mem, ctr); got != n {
		t.Fatalf("counter %d, want %d", got, n)
	}
	// The fetched old values are distinct, increasing (one stream, in order).
	for i := 1; i < len(olds); i++ {
		if olds[i] != olds[i-1]+2 {
			t.Fatalf("old values %d then %d", olds[i-1], olds[i])
		}
	}
}

func TestConcurrentGets(t *testing.T) {
	for _, tr := range transports(t)[:2] {
		t.Run(tr.name, func(t *testing.T) {
			const mem = 8 << 20
			want := pattern(mem, 3)
			pes := tr.job(t, 2, mem, func(c *Config) {
				if c.Rank == 1 {
					copy(c.Mem, want)
				}
			})
			l := link(t, pes, 0, 1)
			seed := rand.Uint64()
			t.Logf("seed %d", seed)
			var wg sync.WaitGroup
			errc := make(chan error, 32)
			for g := 0; g < 32; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(seed, uint64(g)))
					for i := 0; i < 40; i++ {
						n := 1 << rng.IntN(21)
						off := rng.IntN(mem - n + 1)
						dst := make([]byte, n)
						var err error
						if i%3 == 0 {
							var old uint64
							old, err = l.Atomic(8, OpFetch, uint64(off)&^7, 0, 0)
							if err == nil && old != le.Uint64(want[off&^7:]) {
								err = fmt.Errorf("fetch at %d: %#x", off&^7, old)
							}
						} else {
							err = l.Get(dst, uint64(off))
							if err == nil && !bytes.Equal(dst, want[off:off+n]) {
								err = fmt.Errorf("get of %d at %d: wrong bytes", n, off)
							}
						}
						if err != nil {
							errc <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
		})
	}
}

func TestFourPEsAllPairs(t *testing.T) {
	pes := newJob(t, 4, 1<<20, "127.0.0.1", nil)
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	for from := range pes {
		for to := range pes {
			if from == to {
				continue
			}
			l := link(t, pes, from, to)
			wg.Add(1)
			go func() {
				defer wg.Done()
				src := pattern(4096, byte(16*from+to))
				off := uint64(4096 * (1 + from))
				if err := l.Put(off, src); err != nil {
					errc <- err
					return
				}
				if _, err := l.Atomic(8, OpFetchAdd, 0, 1, 0); err != nil {
					errc <- err
					return
				}
				dst := make([]byte, 4096)
				if err := l.Get(dst, off); err != nil {
					errc <- err
					return
				}
				if !bytes.Equal(dst, src) {
					errc <- fmt.Errorf("PE %d -> %d: bytes differ", from, to)
				}
			}()
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for i, p := range pes {
		if got := heap.Load64(p.mem, 0); got != 3 {
			t.Fatalf("PE %d counter %d, want 3", i, got)
		}
	}
}
