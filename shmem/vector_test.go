package shmem_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// The multi-element tests and the vector waits: which indexes satisfy,
// element i compared with vs[i] (not with its neighbours' values), masks,
// argument errors followed by a successful call, and waits that end when
// another PE's atomics land.
//
// Each PE owns 2*np elements; PE w writes, on PE w+1, elements w and
// w+np (the mask of the reader selects exactly those): first element w
// to vs[w]-1 (below its own comparand, above a lower neighbour's), then
// element w+np to vs[w+np]. Both go in order on one route, so a reader
// that sees the second sees the first.
var _ = register("vector-waits", func(pe *shmem.PE) error {
	me, np := pe.MyPE(), pe.NPEs()
	n := 2 * np
	s, err := shmem.Malloc[int64](pe, n)
	if err != nil {
		return err
	}
	vs := make([]int64, n)
	for i := range vs {
		vs[i] = int64(i+1) * 10
	}
	w := (me - 1 + np) % np // the PE that writes to this one
	mask := make([]bool, n)
	mask[w], mask[w+np] = true, true

	// Nothing written yet.
	if ok, err := shmem.TestAllVector(s, nil, shmem.CmpGE, vs); err != nil || ok {
		return fmt.Errorf("TestAllVector before any write: %v, %v", ok, err)
	}
	if i, err := shmem.TestAnyVector(s, mask, shmem.CmpGE, vs); err != nil || i != -1 {
		return fmt.Errorf("TestAnyVector before any write: %d, %v (want -1)", i, err)
	}
	if got, err := shmem.TestSomeVector(s, mask, shmem.CmpGE, vs); err != nil || len(got) != 0 {
		return fmt.Errorf("TestSomeVector before any write: %v, %v", got, err)
	}
	if ok, err := shmem.TestAll(s, nil, shmem.CmpEQ, 0); err != nil || !ok {
		return fmt.Errorf("TestAll == 0 on a zeroed object: %v, %v", ok, err)
	}
	if i, err := shmem.TestAny(s, nil, shmem.CmpNE, 0); err != nil || i != -1 {
		return fmt.Errorf("TestAny != 0 on a zeroed object: %d, %v", i, err)
	}

	// Argument errors, each followed by a call that works.
	good := func(what string) error {
		if _, err := shmem.TestAnyVector(s, mask, shmem.CmpGE, vs); err != nil {
			return fmt.Errorf("after %s: %v", what, err)
		}
		return nil
	}
	for _, c := range []struct {
		what string
		err  error
		want error
	}{
		{"short vector", shmem.WaitUntilAllVector(s, mask, shmem.CmpGE, vs[:n-1]), shmem.ErrInvalid},
		{"long vector", second(shmem.WaitUntilAnyVector(s, mask, shmem.CmpGE, append(slices.Clone(vs), 1))), shmem.ErrInvalid},
		{"nil vector", second(shmem.TestSomeVector(s, nil, shmem.CmpGE, nil)), shmem.ErrInvalid},
		{"short mask", second(shmem.TestAllVector(s, mask[:1], shmem.CmpGE, vs)), shmem.ErrOutOfBounds},
		{"long mask", second(shmem.WaitUntilSomeVector(s, append(slices.Clone(mask), true), shmem.CmpGE, vs)), shmem.ErrOutOfBounds},
		{"bad comparison", second(shmem.TestAny(s, nil, shmem.Cmp(0), 0)), shmem.ErrInvalid},
		{"bad comparison (vector)", second(shmem.TestAllVector(s, nil, shmem.Cmp(99), vs)), shmem.ErrInvalid},
		{"zero Sym", second(shmem.TestSome(shmem.Sym[int64]{}, nil, shmem.CmpEQ, 0)), shmem.ErrInvalid},
		{"bad Slice", second(shmem.TestAnyVector(s.Slice(2, 1), nil, shmem.CmpEQ, nil)), shmem.ErrOutOfBounds},
	} {
		if !errors.Is(c.err, c.want) {
			return fmt.Errorf("%s: %v, want %v", c.what, c.err, c.want)
		}
		if err := good(c.what); err != nil {
			return err
		}
	}
	// Empty selections return at once.
	none := make([]bool, n)
	if i, err := shmem.WaitUntilAnyVector(s, none, shmem.CmpGE, vs); err != nil || i != -1 {
		return fmt.Errorf("WaitUntilAnyVector of nothing: %d, %v", i, err)
	}
	if got, err := shmem.WaitUntilSomeVector(s, none, shmem.CmpGE, vs); err != nil || len(got) != 0 {
		return fmt.Errorf("WaitUntilSomeVector of nothing: %v, %v", got, err)
	}
	if err := shmem.WaitUntilAllVector(s, none, shmem.CmpGE, vs); err != nil {
		return fmt.Errorf("WaitUntilAllVector of nothing: %v", err)
	}
	if ok, err := shmem.TestAllVector(s, none, shmem.CmpGE, vs); err != nil || !ok {
		return fmt.Errorf("TestAllVector of nothing: %v, %v", ok, err)
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}

	// Phase 1: element w just below its comparand, then w+np at it.
	to := (me + 1) % np
	if err := shmem.AtomicSet(s, me, vs[me]-1, to); err != nil {
		return err
	}
	if err := shmem.AtomicSet(s, me+np, vs[me+np], to); err != nil {
		return err
	}
	i, err := shmem.WaitUntilAnyVector(s, mask, shmem.CmpGE, vs)
	if err != nil {
		return err
	}
	if i != w+np {
		return fmt.Errorf("WaitUntilAnyVector returned %d, want %d (element %d is %d, its comparand %d)",
			i, w+np, w, s.Local()[w], vs[w])
	}
	// Element w arrived first: it is vs[w]-1, which a scalar comparison
	// with a lower element's comparand would accept.
	exp := make([]int64, n)
	exp[w], exp[w+np] = vs[w]-1, vs[w+np]
	if ok, err := shmem.TestAllVector(s, mask, shmem.CmpEQ, exp); err != nil || !ok {
		return fmt.Errorf("TestAllVector == written values: %v, %v (copy %v)", ok, err, s.Local())
	}
	if got, err := shmem.WaitUntilSomeVector(s, mask, shmem.CmpGE, vs); err != nil || !slices.Equal(got, []int{w + np}) {
		return fmt.Errorf("WaitUntilSomeVector: %v, %v, want [%d]", got, err, w+np)
	}
	if got, err := shmem.TestSomeVector(s, mask, shmem.CmpLT, vs); err != nil || !slices.Equal(got, []int{w}) {
		return fmt.Errorf("TestSomeVector <: %v, %v, want [%d]", got, err, w)
	}
	if ok, err := shmem.TestAllVector(s, mask, shmem.CmpGE, vs); err != nil || ok {
		return fmt.Errorf("TestAllVector >= with element %d below: %v, %v", w, ok, err)
	}
	// The unselected elements are still zero; with no mask, TestSome
	// lists exactly them.
	var zeros []int
	for j := 0; j < n; j++ {
		if j != w && j != w+np {
			zeros = append(zeros, j)
		}
	}
	if got, err := shmem.TestSome(s, nil, shmem.CmpEQ, 0); err != nil || !slices.Equal(got, zeros) {
		return fmt.Errorf("TestSome == 0: %v, %v, want %v", got, err, zeros)
	}
	if i, err := shmem.TestAny(s, mask, shmem.CmpGT, 0); err != nil || i != w {
		return fmt.Errorf("TestAny > 0: %d, %v, want %d", i, err, w)
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}

	// Phase 2: element w passes its comparand; WaitUntilAllVector ends.
	if err := shmem.AtomicAdd(s, me, 6, to); err != nil {
		return err
	}
	if err := shmem.WaitUntilAllVector(s, mask, shmem.CmpGE, vs); err != nil {
		return err
	}
	if got := s.Local()[w]; got != vs[w]+5 {
		return fmt.Errorf("element %d is %d after the add, want %d", w, got, vs[w]+5)
	}
	if got, err := shmem.TestSomeVector(s, mask, shmem.CmpGE, vs); err != nil || !slices.Equal(got, []int{w, w + np}) {
		return fmt.Errorf("TestSomeVector after phase 2: %v, %v", got, err)
	}
	if ok, err := shmem.TestAll(s, mask, shmem.CmpGE, vs[w]); err != nil || !ok {
		return fmt.Errorf("TestAll >= %d: %v, %v", vs[w], ok, err)
	}
	return pe.BarrierAll()
})

func second[T any](_ T, err error) error { return err }

func TestVectorWaits(t *testing.T) { each(t, "vector-waits", 1, 2, 3, 4, 8) }

// The multi-element tests, and waits whose condition already holds,
// allocate nothing (the Some forms' result aside).
func TestVectorCallsAllocateNothing(t *testing.T) {
	err := shmem.Run(1, func(pe *shmem.PE) error {
		s, err := shmem.Malloc[uint64](pe, 8)
		if err != nil {
			return err
		}
		vs := []uint64{0, 1, 2, 3, 4, 5, 6, 7}
		for i := range s.Local() {
			s.Local()[i] = uint64(i)
		}
		mask := []bool{true, false, true, false, true, false, true, false}
		for _, c := range []struct {
			name string
			f    func() error
		}{
			{"TestAllVector", func() error { _, err := shmem.TestAllVector(s, nil, shmem.CmpGE, vs); return err }},
			{"TestAnyVector", func() error { _, err := shmem.TestAnyVector(s, mask, shmem.CmpEQ, vs); return err }},
			{"TestAll", func() error { _, err := shmem.TestAll(s, mask, shmem.CmpLT, 8); return err }},
			{"TestAny", func() error { _, err := shmem.TestAny(s, nil, shmem.CmpEQ, 7); return err }},
			{"WaitUntilAllVector", func() error { return shmem.WaitUntilAllVector(s, nil, shmem.CmpGE, vs) }},
			{"WaitUntilAnyVector", func() error { _, err := shmem.WaitUntilAnyVector(s, mask, shmem.CmpLE, vs); return err }},
			{"WaitUntilAll", func() error { return shmem.WaitUntilAll(s, nil, shmem.CmpLT, 8) }},
		} {
			var ferr error
			if n := testing.AllocsPerRun(100, func() {
				if err := c.f(); err != nil {
					ferr = err
				}
			}); n != 0 {
				return fmt.Errorf("%s: %v allocations per call", c.name, n)
			}
			if ferr != nil {
				return fmt.Errorf("%s: %v", c.name, ferr)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkTestAllVector is one scan of 8 elements against their own
// values, beside Test of one element: the per-element cost of the
// multi-element waits' check.
func BenchmarkTestAllVector(b *testing.B) {
	err := shmem.Run(1, func(pe *shmem.PE) error {
		s, err := shmem.Malloc[uint64](pe, 8)
		if err != nil {
			return err
		}
		vs := make([]uint64, 8)
		b.Run("8-elements", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if ok, err := shmem.TestAllVector(s, nil, shmem.CmpGE, vs); err != nil || !ok {
					b.Fatal(ok, err)
				}
			}
		})
		b.Run("Test-1-element", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if ok, err := shmem.Test(s, 0, shmem.CmpGE, 0); err != nil || !ok {
					b.Fatal(ok, err)
				}
			}
		})
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}
