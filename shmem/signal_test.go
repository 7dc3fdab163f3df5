package shmem_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// PutSignalNBI: after Quiet the data and the signal are at the target, a
// reader that sees the signal sees the data, for payloads copied into a
// frame and ones sent from the caller's slice; SignalUpdate sets and adds
// as the signal of a PutSignal does; bad arguments are errors that change
// nothing, and the next call works.
var _ = register("put-signal-nbi", func(pe *shmem.PE) error {
	me, np := pe.MyPE(), pe.NPEs()
	right, left := (me+1)%np, (me-1+np)%np
	const rounds, maxLen = 5, 40 << 10 // 320 KiB of int64 per round at most
	data, err := shmem.Malloc[int64](pe, rounds*maxLen)
	if err != nil {
		return err
	}
	sig, err := shmem.Malloc[uint64](pe, 2)
	if err != nil {
		return err
	}
	for _, n := range []int{0, 1, 300, maxLen} {
		srcs := make([][]int64, rounds) // unchanged until the Quiet
		for r := range srcs {
			srcs[r] = make([]int64, n)
			for i := range srcs[r] {
				srcs[r][i] = int64(me*1_000_000 + r*100_000 + i + n)
			}
			if err := shmem.PutSignalNBI(data.Slice(r*maxLen, r*maxLen+n), srcs[r], sig, 1, shmem.SignalAdd, right); err != nil {
				return err
			}
		}
		if err := pe.Quiet(); err != nil {
			return err
		}
		want := uint64(rounds)
		if v, err := shmem.SignalWaitUntil(sig, shmem.CmpGE, want); err != nil || v != want {
			return fmt.Errorf("signal after %d adds of 1: %d, %v", rounds, v, err)
		}
		for r := 0; r < rounds; r++ {
			for i, x := range data.Local()[r*maxLen : r*maxLen+n] {
				if w := int64(left*1_000_000 + r*100_000 + i + n); x != w {
					return fmt.Errorf("%d-element round %d: element %d is %d, want %d", n, r, i, x, w)
				}
			}
		}
		if err := pe.BarrierAll(); err != nil {
			return err
		}
		// Reset this PE's signal for the next size; no one writes it now.
		if err := shmem.SignalUpdate(sig, 0, shmem.SignalSet, me); err != nil {
			return err
		}
		if err := pe.BarrierAll(); err != nil {
			return err
		}
	}
	// SignalUpdate from every PE: adds on PE 0's word 0, a set on the
	// right neighbour's word 1.
	if err := shmem.SignalUpdate(sig, uint64(me+1), shmem.SignalAdd, 0); err != nil {
		return err
	}
	if err := shmem.SignalUpdate(sig.Slice(1, 2), uint64(1000+me), shmem.SignalSet, right); err != nil {
		return err
	}
	if err := pe.Quiet(); err != nil {
		return err
	}
	if me == 0 {
		if _, err := shmem.SignalWaitUntil(sig, shmem.CmpEQ, uint64(np*(np+1)/2)); err != nil {
			return err
		}
	}
	if v, err := shmem.SignalWaitUntil(sig.Slice(1, 2), shmem.CmpEQ, uint64(1000+left)); err != nil || v != uint64(1000+left) {
		return fmt.Errorf("set signal: %d, %v", v, err)
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	// Errors, each followed by a call that works.
	c, err := pe.NewContext()
	if err != nil {
		return err
	}
	defer c.Close()
	c2, err := pe.NewContext()
	if err != nil {
		return err
	}
	defer c2.Close()
	src := []int64{1, 2}
	for _, e := range []struct {
		what      string
		err, want error
	}{
		{"bad op", shmem.PutSignalNBI(data, src, sig, 1, shmem.SignalOp(0), right), shmem.ErrInvalid},
		{"PE npes", shmem.PutSignalNBI(data, src, sig, 1, shmem.SignalAdd, np), shmem.ErrBadPE},
		{"PE -1", shmem.SignalUpdate(sig, 1, shmem.SignalAdd, -1), shmem.ErrBadPE},
		{"data past the object", shmem.PutSignalNBI(data.Slice(0, 1), src, sig, 1, shmem.SignalAdd, right), shmem.ErrOutOfBounds},
		{"empty signal handle", shmem.PutSignalNBI(data, src, sig.Slice(2, 2), 1, shmem.SignalAdd, right), shmem.ErrOutOfBounds},
		{"update of an empty handle", shmem.SignalUpdate(sig.Slice(0, 0), 1, shmem.SignalSet, right), shmem.ErrOutOfBounds},
		{"update with a bad op", shmem.SignalUpdate(sig, 1, shmem.SignalOp(7), right), shmem.ErrInvalid},
		{"two contexts", shmem.PutSignalNBI(data.Via(c), src, sig.Via(c2), 1, shmem.SignalAdd, right), shmem.ErrInvalid},
	} {
		if !errors.Is(e.err, e.want) {
			return fmt.Errorf("%s: %v, want %v", e.what, e.err, e.want)
		}
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	for i, v := range data.Local()[:2] {
		if v != int64(left*1_000_000+i+maxLen) {
			return fmt.Errorf("element %d changed by a refused call: %d", i, v)
		}
	}
	if sig.Local()[0] != 0 && me != 0 {
		return fmt.Errorf("signal changed by a refused call: %d", sig.Local()[0])
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	// Through a context (the signal handle left unbound takes the data's):
	// complete at the context's Quiet.
	if err := shmem.PutSignalNBI(data.Via(c), src, sig.Slice(1, 2), 7, shmem.SignalSet, right); err != nil {
		return err
	}
	if err := c.Quiet(); err != nil {
		return err
	}
	if _, err := shmem.SignalWaitUntil(sig.Slice(1, 2), shmem.CmpEQ, 7); err != nil {
		return err
	}
	if d := data.Local()[:2]; d[0] != 1 || d[1] != 2 {
		return fmt.Errorf("data of the context's put-signal: %v", d)
	}
	return pe.BarrierAll()
})

func TestPutSignalNBI(t *testing.T) { each(t, "put-signal-nbi", 1, 2, 3, 4, 8) }
