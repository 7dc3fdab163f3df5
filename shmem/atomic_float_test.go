package shmem_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// floatBits is the bit pattern of a float32 or float64.
func floatBits[T float32 | float64](v T) uint64 {
	switch x := any(v).(type) {
	case float32:
		return uint64(math.Float32bits(x))
	case float64:
		return math.Float64bits(x)
	}
	panic("unreachable")
}

// floatSwaps runs the float scenario for one width: values that only
// their bits tell apart survive set, fetch and swap on every route; the
// NBI forms deliver after Quiet; and swaps of every PE into one word
// under contention are a permutation (each value written is returned by
// exactly one swap, or is the final value).
func floatSwaps[T float32 | float64](pe *shmem.PE, mk func(bits uint64) T) error {
	me, np := pe.MyPE(), pe.NPEs()
	const rounds = 200
	word, err := shmem.Malloc[T](pe, 2)
	if err != nil {
		return err
	}
	olds, err := shmem.Malloc[T](pe, np*rounds) // on PE 0: what each PE's swaps returned
	if err != nil {
		return err
	}
	right := (me + 1) % np
	// Bit patterns: a NaN with a payload, -0, -Inf, the smallest subnormal.
	specials := []uint64{0x7ff4000000000abc, 0x8000000000000000, 0xfff0000000000000, 1}
	if shmemSize[T]() == 4 {
		specials = []uint64{0x7fa00abc, 0x80000000, 0xff800000, 1}
	}
	for _, b := range specials {
		v := mk(b)
		if err := shmem.AtomicSet(word, 1, v, right); err != nil {
			return err
		}
		got, err := shmem.AtomicFetch(word, 1, right)
		if err != nil {
			return err
		}
		if floatBits(got) != b {
			return fmt.Errorf("AtomicFetch after AtomicSet of bits %#x: bits %#x", b, floatBits(got))
		}
		old, err := shmem.AtomicSwap(word, 1, mk(b^1), right)
		if err != nil {
			return err
		}
		if floatBits(old) != b {
			return fmt.Errorf("AtomicSwap returned bits %#x, want %#x", floatBits(old), b)
		}
		var nf, ns T
		if err := shmem.AtomicFetchNBI(&nf, word, 1, right); err != nil {
			return err
		}
		if err := shmem.AtomicSwapNBI(&ns, word, 1, v, right); err != nil {
			return err
		}
		if err := pe.Quiet(); err != nil {
			return err
		}
		if floatBits(nf) != b^1 || floatBits(ns) != b^1 {
			return fmt.Errorf("NBI fetch and swap after Quiet: bits %#x and %#x, want %#x", floatBits(nf), floatBits(ns), b^1)
		}
		if got, err := shmem.AtomicFetch(word, 1, right); err != nil || floatBits(got) != b {
			return fmt.Errorf("after AtomicSwapNBI: bits %#x, %v, want %#x", floatBits(got), err, b)
		}
	}
	// Argument errors, then a call that works.
	var d T
	for _, c := range []struct {
		what      string
		err, want error
	}{
		{"fetch on PE npes", second(shmem.AtomicFetch(word, 0, np)), shmem.ErrBadPE},
		{"set past the object", shmem.AtomicSet(word, 2, 1, right), shmem.ErrOutOfBounds},
		{"swap at -1", second(shmem.AtomicSwap(word, -1, 1, right)), shmem.ErrOutOfBounds},
		{"swap NBI into nil", shmem.AtomicSwapNBI(nil, word, 0, 1, right), shmem.ErrInvalid},
		{"fetch NBI on PE -1", shmem.AtomicFetchNBI(&d, word, 0, -1), shmem.ErrBadPE},
		{"fetch of a zero Sym", second(shmem.AtomicFetch(shmem.Sym[T]{}, 0, right)), shmem.ErrInvalid},
	} {
		if !errors.Is(c.err, c.want) {
			return fmt.Errorf("%s: %v, want %v", c.what, c.err, c.want)
		}
		if _, err := shmem.AtomicFetch(word, 1, right); err != nil {
			return fmt.Errorf("after %s: %v", c.what, err)
		}
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	// Contention: every PE swaps its own values into PE 0's word 0.
	got := make([]T, rounds)
	for k := range rounds {
		v := T(me*rounds + k + 1)
		if got[k], err = shmem.AtomicSwap(word, 0, v, 0); err != nil {
			return err
		}
	}
	if err := shmem.Put(olds.Slice(me*rounds, (me+1)*rounds), got, 0); err != nil {
		return err
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	if me == 0 {
		all := append(slices.Clone(olds.Local()), word.Local()[0])
		slices.Sort(all)
		for i, v := range all {
			if v != T(i) { // 0 (the initial value), then 1..np*rounds
				return fmt.Errorf("swaps of %d PEs are not a permutation: sorted entry %d is %v", np, i, v)
			}
		}
	}
	return pe.BarrierAll()
}

func shmemSize[T float32 | float64]() int {
	var z T
	if _, ok := any(z).(float32); ok {
		return 4
	}
	return 8
}

var _ = register("float-atomics", func(pe *shmem.PE) error {
	if err := floatSwaps(pe, func(b uint64) float64 { return math.Float64frombits(b) }); err != nil {
		return fmt.Errorf("float64: %w", err)
	}
	if err := floatSwaps(pe, func(b uint64) float32 { return math.Float32frombits(uint32(b)) }); err != nil {
		return fmt.Errorf("float32: %w", err)
	}
	return nil
})

func TestFloatAtomics(t *testing.T) { each(t, "float-atomics", 1, 2, 3, 4, 8) }
