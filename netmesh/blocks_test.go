package netmesh

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/goshmem/goshmem/heap"
	"github.com/goshmem/goshmem/internal/errs"
)

// PutBlocks places every block where its byte stride says, leaves the
// bytes between blocks alone, for blocks that are copied into frames and
// blocks that are Puts of their own, with odd strides on both sides.
func TestPutBlocks(t *testing.T) {
	for _, c := range []struct{ width, dstStride, srcStride, n int }{
		{1, 3, 5, 700},
		{24, 37, 29, 300},
		{copyMax, copyMax + 3, copyMax + 1, 40},
		{copyMax + 5, copyMax + 11, copyMax + 7, 9},
		{100, 1, 1, 1}, // one block: strides play no part
	} {
		t.Run(fmt.Sprintf("%dx%d", c.n, c.width), func(t *testing.T) {
			const base = 4096
			mem := base + (c.n-1)*c.dstStride + c.width + 64
			pes := newJob(t, 2, mem, "127.0.0.1", nil)
			l := link(t, pes, 0, 1)
			src := pattern((c.n-1)*c.srcStride+c.width, byte(c.width))
			if err := l.PutBlocks(base, c.dstStride, src, c.srcStride, c.width, c.n); err != nil {
				t.Fatal(err)
			}
			if err := l.Flush(); err != nil {
				t.Fatal(err)
			}
			p := pes[1]
			p.sync()
			want := make([]byte, mem)
			for k := 0; k < c.n; k++ {
				copy(want[base+k*c.dstStride:], src[k*c.srcStride:][:c.width])
			}
			if !bytes.Equal(p.mem, want) {
				for i := range want {
					if p.mem[i] != want[i] {
						t.Fatalf("byte %d: %d, want %d", i, p.mem[i], want[i])
					}
				}
			}
		})
	}
}

// Overlapping destination blocks are applied in order: the later wins.
func TestPutBlocksOverlapOrder(t *testing.T) {
	pes := newJob(t, 2, 1<<12, "127.0.0.1", nil)
	l := link(t, pes, 0, 1)
	src := []byte{1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3}
	if err := l.PutBlocks(0, 2, src, 4, 4, 3); err != nil {
		t.Fatal(err)
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	pes[1].sync()
	if got, want := pes[1].mem[:9], []byte{1, 1, 2, 2, 3, 3, 3, 3, 0}; !bytes.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// Bad arguments are errors before anything is queued, whatever the
// products of counts and strides would overflow to.
func TestPutBlocksRefuses(t *testing.T) {
	pes := newJob(t, 2, 1<<16, "127.0.0.1", nil)
	l := link(t, pes, 0, 1)
	src := make([]byte, 64)
	q := l.streams[0].q
	for _, c := range []struct {
		name                           string
		off                            uint64
		dstStride, srcStride, width, n int
		want                           error
	}{
		{"zero destination stride", 0, 0, 8, 8, 2, errs.Invalid},
		{"zero source stride", 0, 8, 0, 8, 2, errs.Invalid},
		{"negative count", 0, 8, 8, 8, -1, errs.Invalid},
		{"negative width", 0, 8, 8, -8, 2, errs.Invalid},
		{"block wider than the source", 0, 8, 8, 65, 1, errs.OutOfBounds},
		{"source too short", 0, 8, 8, 8, 9, errs.OutOfBounds},
		{"huge source stride", 0, 8, math.MaxInt, 8, 2, errs.OutOfBounds},
		{"huge destination stride", 0, math.MaxInt, 8, 8, 2, errs.OutOfBounds},
		{"overflowing count", 0, math.MaxInt / 2, 1, 1, math.MaxInt, errs.OutOfBounds},
		{"past the segment", 1<<16 - 8, 4, 4, 8, 2, errs.OutOfBounds},
		{"offset past the segment", 1 << 16, 1, 1, 1, 1, errs.OutOfBounds},
	} {
		sent := q.sent.Load()
		err := l.PutBlocks(c.off, c.dstStride, src, c.srcStride, c.width, c.n)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if q.sent.Load() != sent {
			t.Errorf("%s: frames were queued", c.name)
		}
	}
	if err := l.PutBlocks(1<<16-16, 8, src, 8, 8, 2); err != nil {
		t.Fatalf("the last two words: %v", err)
	}
}

// PutSignalNBI delivers the data before the signal, for payloads that
// are copied and ones that are sent from src; after Flush both are there.
func TestPutSignalNBI(t *testing.T) {
	for _, n := range []int{0, 8, copyMax + 1, 256 << 10} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			const rounds = 6
			mem := 4096 + rounds*(n+8)
			pes := newJob(t, 2, mem, "127.0.0.1", nil)
			l := link(t, pes, 0, 1)
			const sig = 8
			srcs := make([][]byte, rounds) // kept unchanged until the Flush
			for k := range srcs {
				srcs[k] = bytes.Repeat([]byte{byte(k + 1)}, n)
				if err := l.PutSignalNBI(uint64(4096+k*(n+8)), srcs[k], sig, true, 1); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Flush(); err != nil {
				t.Fatal(err)
			}
			pes[1].sync()
			if got := heap.Load64(pes[1].mem, sig); got != rounds {
				t.Fatalf("signal %d after %d adds", got, rounds)
			}
			for k := range srcs {
				if r := pes[1].mem[4096+k*(n+8):][:n]; !bytes.Equal(r, srcs[k]) {
					t.Fatalf("round %d's data did not arrive", k)
				}
			}
			if err := l.PutSignalNBI(4096, nil, sig, false, 77); err != nil {
				t.Fatal(err)
			}
			if err := l.Flush(); err != nil {
				t.Fatal(err)
			}
			if got := heap.Load64(pes[1].mem, sig); got != 77 {
				t.Fatalf("set signal: %d", got)
			}
			if err := l.PutSignalNBI(0, nil, 4, false, 1); !errors.Is(err, errs.Invalid) {
				t.Fatalf("unaligned signal: %v", err)
			}
		})
	}
}
