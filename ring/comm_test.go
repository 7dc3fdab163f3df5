package ring

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// Comm scenarios, each run over every route (goroutines, processes, TCP,
// mixed) by each().

// fillMsg fills b with the bytes of message k from rank src with tag: a
// message delivered to the wrong receive, out of order or mangled fails
// checkMsg.
func fillMsg(b []byte, src, tag, k int) []byte {
	x := byte(src*31 + tag*17 + k*5)
	for i := range b {
		b[i] = x + byte(i*7) + byte(i>>8)
	}
	return b
}

func checkMsg(b []byte, src, tag, k int) error {
	x := byte(src*31 + tag*17 + k*5)
	for i := range b {
		if b[i] != x+byte(i*7)+byte(i>>8) {
			return fmt.Errorf("message %d (rank %d, tag %d, %d bytes): byte %d is %d, want %d", k, src, tag, len(b), i, b[i], x+byte(i*7)+byte(i>>8))
		}
	}
	return nil
}

func bg() context.Context { return context.Background() }

// commSizes are the sizes the issue names: 0, 1, 64 KiB, 64 KiB + 1 and
// 16 MiB (1 MiB under -short and -race).
func commSizes() []int {
	big := 16 << 20
	if small {
		big = 1 << 20
	}
	return []int{0, 1, 64 << 10, 64<<10 + 1, big}
}

// comm-tags: PE 0 sends to PE 1 at every size with tags in one order; PE
// 1 receives them in the reverse order (each message must wait in the
// queue, or in its sender, for its receive), then with AnySource /
// AnyTag, then a self-send.
var _ = register("comm-tags", func(pe *shmem.PE) error {
	c, err := NewComm(pe.World())
	if err != nil {
		return err
	}
	me := c.Rank()
	sizes := commSizes()
	switch me {
	case 0:
		// Large messages wait for their receive: send them from
		// goroutines, in order of tags 0.., so that the receive order
		// (reverse) differs from the send order.
		var wg sync.WaitGroup
		errs := make(chan error, len(sizes))
		for i, n := range sizes {
			buf := fillMsg(make([]byte, n), 0, i, 0)
			if n <= c.EagerLimit() {
				if err := Send(bg(), c, 1, i, buf); err != nil {
					return fmt.Errorf("Send tag %d: %w", i, err)
				}
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := Send(bg(), c, 1, i, buf); err != nil {
					errs <- fmt.Errorf("Send tag %d: %w", i, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return err
		}
		// AnySource / AnyTag: three messages with tags 7, 5, 9.
		for k, tag := range []int{7, 5, 9} {
			if err := Send(bg(), c, 1, tag, fillMsg(make([]byte, 100+k), 0, tag, k)); err != nil {
				return err
			}
		}
	case 1:
		for i := len(sizes) - 1; i >= 0; i-- {
			dst := make([]byte, sizes[i]+3)
			st, err := Recv(bg(), c, 0, i, dst)
			if err != nil {
				return fmt.Errorf("Recv tag %d: %w", i, err)
			}
			if st != (Status{Source: 0, Tag: i, Bytes: sizes[i]}) {
				return fmt.Errorf("Recv tag %d: status %+v, want %d bytes", i, st, sizes[i])
			}
			if err := checkMsg(dst[:st.Bytes], 0, i, 0); err != nil {
				return err
			}
		}
		st, err := Probe(bg(), c, AnySource, AnyTag)
		if err != nil || st != (Status{Source: 0, Tag: 7, Bytes: 100}) {
			return fmt.Errorf("Probe(any, any): %+v, %v", st, err)
		}
		for k, tag := range []int{7, 5, 9} {
			from, want := AnySource, AnyTag
			if k == 1 {
				from = 0
			}
			dst := make([]byte, 200)
			st, err := Recv(bg(), c, from, want, dst)
			if err != nil || st != (Status{Source: 0, Tag: tag, Bytes: 100 + k}) {
				return fmt.Errorf("Recv(%d, any) #%d: %+v, %v", from, k, st, err)
			}
			if err := checkMsg(dst[:st.Bytes], 0, tag, k); err != nil {
				return err
			}
		}
	}
	// Self-send at every size: the message waits in the queue.
	for i, n := range sizes {
		if err := Send(bg(), c, me, 100+i, fillMsg(make([]byte, n), me, 100+i, 1)); err != nil {
			return fmt.Errorf("self Send of %d bytes: %w", n, err)
		}
	}
	for i := len(sizes) - 1; i >= 0; i-- {
		dst := make([]byte, sizes[i])
		st, err := Recv(bg(), c, me, 100+i, dst)
		if err != nil || st.Bytes != sizes[i] || st.Source != me {
			return fmt.Errorf("self Recv of %d bytes: %+v, %v", sizes[i], st, err)
		}
		if err := checkMsg(dst, me, 100+i, 1); err != nil {
			return err
		}
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	return c.Close()
})

func TestCommTags(t *testing.T) { each(t, "comm-tags", 2) }

// comm-typed: a message carries its element kind and length. A receive
// into another type is ErrInvalid, into a smaller buffer ErrTruncated,
// and the message stays for the correct receive; eager and rendezvous.
var _ = register("comm-typed", func(pe *shmem.PE) error {
	c, err := NewComm(pe.World())
	if err != nil {
		return err
	}
	lens := []int{3, c.EagerLimit()/8 + 5} // float64 elements: eager, rendezvous
	switch c.Rank() {
	case 0:
		for i, n := range lens {
			v := make([]float64, n)
			for j := range v {
				v[j] = float64(i*1000+j) + 0.5
			}
			if err := Send(bg(), c, 1, i, v); err != nil {
				return err
			}
		}
	case 1:
		for i, n := range lens {
			st, err := Recv(bg(), c, 0, i, make([]int64, n))
			if !errors.Is(err, shmem.ErrInvalid) {
				return fmt.Errorf("Recv of float64 into int64: %+v, %v", st, err)
			}
			st, err = Recv(bg(), c, 0, i, make([]float64, n-1))
			if !errors.Is(err, ErrTruncated) || st.Bytes != 8*n {
				return fmt.Errorf("Recv of %d float64 into %d: %+v, %v", n, n-1, st, err)
			}
			st, err = Probe(bg(), c, 0, AnyTag)
			if err != nil || st != (Status{Source: 0, Tag: i, Bytes: 8 * n}) {
				return fmt.Errorf("Probe after the failed receives: %+v, %v", st, err)
			}
			dst := make([]float64, n+1)
			st, err = Recv(bg(), c, 0, i, dst)
			if err != nil || st.Bytes != 8*n {
				return fmt.Errorf("Recv: %+v, %v", st, err)
			}
			for j := range n {
				if dst[j] != float64(i*1000+j)+0.5 {
					return fmt.Errorf("element %d of message %d: %v", j, i, dst[j])
				}
			}
		}
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	return c.Close()
})

func TestCommTyped(t *testing.T) { each(t, "comm-typed", 2) }

// comm-bad: bad ranks and tags, a nil context, calls after Close.
var _ = register("comm-bad", func(pe *shmem.PE) error {
	c, err := NewComm(pe.World())
	if err != nil {
		return err
	}
	n := c.Size()
	for _, to := range []int{-1, n, AnySource - 1} {
		if err := Send(bg(), c, to, 0, []byte{1}); !errors.Is(err, shmem.ErrBadPE) {
			return fmt.Errorf("Send to %d: %v", to, err)
		}
	}
	if err := Send(bg(), c, 0, AnySource, []byte{1}); !errors.Is(err, shmem.ErrInvalid) {
		return fmt.Errorf("Send with tag AnyTag: %v", err)
	}
	for _, tag := range []int{-2, MaxTag + 1} {
		if err := Send(bg(), c, 0, tag, []byte{1}); !errors.Is(err, shmem.ErrInvalid) {
			return fmt.Errorf("Send with tag %d: %v", tag, err)
		}
		if _, err := Recv(bg(), c, 0, tag, []byte{1}); !errors.Is(err, shmem.ErrInvalid) {
			return fmt.Errorf("Recv with tag %d: %v", tag, err)
		}
		if _, err := Probe(bg(), c, 0, tag); !errors.Is(err, shmem.ErrInvalid) {
			return fmt.Errorf("Probe with tag %d: %v", tag, err)
		}
	}
	if _, err := Recv(bg(), c, n, 0, []byte{1}); !errors.Is(err, shmem.ErrBadPE) {
		return fmt.Errorf("Recv from %d: %v", n, err)
	}
	if _, err := SendRecv(bg(), c, n, 0, []byte{1}, 0, 0, []byte{1}); !errors.Is(err, shmem.ErrBadPE) {
		return fmt.Errorf("SendRecv to %d: %v", n, err)
	}
	//lint:ignore SA1012 a nil context is the misuse under test
	if err := Send(nil, c, 0, 0, []byte{1}); !errors.Is(err, shmem.ErrInvalid) { //nolint:staticcheck
		return fmt.Errorf("Send with a nil context: %v", err)
	}
	var nc *Comm
	if err := Send(bg(), nc, 0, 0, []byte{1}); !errors.Is(err, shmem.ErrInvalid) {
		return fmt.Errorf("Send on a nil Comm: %v", err)
	}
	if _, err := NewComm(nil); !errors.Is(err, shmem.ErrInvalid) {
		return fmt.Errorf("NewComm(nil): %v", err)
	}
	if err := c.Close(); err != nil {
		return err
	}
	if err := Send(bg(), c, 0, 0, []byte{1}); !errors.Is(err, shmem.ErrFinalized) {
		return fmt.Errorf("Send after Close: %v", err)
	}
	if err := c.Close(); !errors.Is(err, shmem.ErrFinalized) {
		return fmt.Errorf("second Close: %v", err)
	}
	return nil
})

func TestCommBad(t *testing.T) { each(t, "comm-bad", 2) }

// comm-shift: SendRecv ring shifts at every size: rank r sends to r+1
// and receives from r-1, all at once.
var _ = register("comm-shift", func(pe *shmem.PE) error {
	c, err := NewComm(pe.World())
	if err != nil {
		return err
	}
	me, n := c.Rank(), c.Size()
	right, left := (me+1)%n, (me+n-1)%n
	for k, size := range commSizes() {
		src := fillMsg(make([]byte, size), me, k, k)
		dst := make([]byte, size)
		st, err := SendRecv(bg(), c, right, k, src, left, k, dst)
		if err != nil {
			return fmt.Errorf("SendRecv of %d bytes: %w", size, err)
		}
		if st != (Status{Source: left, Tag: k, Bytes: size}) {
			return fmt.Errorf("SendRecv of %d bytes: status %+v", size, st)
		}
		if err := checkMsg(dst, left, k, k); err != nil {
			return err
		}
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	return c.Close()
})

func TestCommShift(t *testing.T) {
	counts := []int{1, 2, 3, 5, 8}
	if small {
		counts = []int{1, 2, 3, 4}
	}
	each(t, "comm-shift", counts...)
}

var _ = time.Second
