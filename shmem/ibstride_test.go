package shmem_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// Block-strided RMA: blocks land where odd strides say, the elements
// between them keep their values, blocks wider than a copied frame work,
// overlapping destination blocks are applied in order, and a pattern
// whose last element falls outside either side is ErrOutOfBounds on
// every route, whatever the products of its arguments, changing nothing.
var _ = register("block-strided", func(pe *shmem.PE) error {
	me, np := pe.MyPE(), pe.NPEs()
	right, left := (me+1)%np, (me-1+np)%np
	const n = 4096
	s, err := shmem.Malloc[int32](pe, n)
	if err != nil {
		return err
	}
	const fill = -7
	reset := func() error {
		for i := range s.Local() {
			s.Local()[i] = fill
		}
		return pe.BarrierAll()
	}
	val := func(pe, i int) int32 { return int32(pe*100_000 + i) }
	for _, c := range []struct{ dstStride, srcStride, block, nblocks int }{
		{5, 7, 3, 11},
		{13, 3, 3, 40},     // source blocks touch (stride == block)
		{601, 577, 550, 6}, // 2200-byte blocks: wider than a copied frame
		{1, 1, 9, 1},
		{3, 2, 1, 300}, // the IPut case
	} {
		if err := reset(); err != nil {
			return err
		}
		srcLen := (c.nblocks-1)*c.srcStride + c.block
		src := make([]int32, srcLen)
		for i := range src {
			src[i] = val(me, i)
		}
		if err := shmem.IBPut(s, c.dstStride, src, c.srcStride, c.block, c.nblocks, right); err != nil {
			return fmt.Errorf("IBPut %+v: %w", c, err)
		}
		if err := pe.BarrierAll(); err != nil {
			return err
		}
		want := make([]int32, n)
		for i := range want {
			want[i] = fill
		}
		for k := 0; k < c.nblocks; k++ {
			for j := 0; j < c.block; j++ {
				want[k*c.dstStride+j] = val(left, k*c.srcStride+j)
			}
		}
		for i, v := range s.Local() {
			if v != want[i] {
				return fmt.Errorf("IBPut %+v from PE %d: element %d is %d, want %d", c, left, i, v, want[i])
			}
		}
		// And back: IBGet with the roles of the strides swapped into a
		// local slice with gaps of its own.
		back := make([]int32, srcLen)
		for i := range back {
			back[i] = fill
		}
		if err := shmem.IBGet(back, c.srcStride, s, c.dstStride, c.block, c.nblocks, right); err != nil {
			return fmt.Errorf("IBGet %+v: %w", c, err)
		}
		for k := 0; k < c.nblocks; k++ {
			for j := 0; j < c.block; j++ {
				if i := k*c.srcStride + j; back[i] != src[i] {
					return fmt.Errorf("IBGet %+v from PE %d: element %d is %d, want %d", c, right, i, back[i], src[i])
				}
			}
		}
		if err := pe.BarrierAll(); err != nil {
			return err
		}
	}
	// Overlapping destination blocks: the later wins.
	if err := reset(); err != nil {
		return err
	}
	if err := shmem.IBPut(s, 2, []int32{1, 1, 1, 2, 2, 2, 3, 3, 3}, 3, 3, 3, right); err != nil {
		return err
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	if got := s.Local()[:8]; fmt.Sprint(got) != fmt.Sprint([]int32{1, 1, 2, 2, 3, 3, 3, fill}) {
		return fmt.Errorf("overlapping blocks: %v", got)
	}

	// Refused patterns, on every target, change nothing.
	if err := reset(); err != nil {
		return err
	}
	small := s.Slice(0, 10)
	src := make([]int32, 10)
	for t := 0; t < np; t++ {
		for _, c := range []struct {
			what      string
			err, want error
		}{
			{"block longer than the object", shmem.IBPut(small, 1, make([]int32, 11), 1, 11, 1, t), shmem.ErrOutOfBounds},
			{"last block one past", shmem.IBPut(small, 4, src, 1, 3, 3, t), shmem.ErrOutOfBounds},
			{"stride MaxInt", shmem.IBPut(small, math.MaxInt, src, 1, 1, 2, t), shmem.ErrOutOfBounds},
			{"stride MaxInt/2, 4 blocks", shmem.IBPut(small, math.MaxInt/2, src, 1, 2, 4, t), shmem.ErrOutOfBounds},
			{"nblocks MaxInt", shmem.IBPut(small, 1, src, 1, 1, math.MaxInt, t), shmem.ErrOutOfBounds},
			{"block MaxInt", shmem.IBPut(small, 1, src, 1, math.MaxInt, 1, t), shmem.ErrOutOfBounds},
			{"source stride MaxInt", shmem.IBPut(small, 1, src, math.MaxInt, 1, 2, t), shmem.ErrOutOfBounds},
			{"source too short", shmem.IBPut(small, 3, src[:4], 3, 2, 2, t), shmem.ErrOutOfBounds},
			{"get: local stride MaxInt/2", shmem.IBGet(make([]int32, 10), math.MaxInt/2, small, 1, 2, 2, t), shmem.ErrOutOfBounds},
			{"get: object stride MaxInt", shmem.IBGet(make([]int32, 10), 1, small, math.MaxInt, 1, 3, t), shmem.ErrOutOfBounds},
			{"get: block past the object", shmem.IBGet(make([]int32, 20), 1, small, 9, 2, 2, t), shmem.ErrOutOfBounds},
			{"get into nil", shmem.IBGet(nil, 1, small, 1, 1, 1, t), shmem.ErrOutOfBounds},
			{"bad Slice", shmem.IBPut(s.Slice(5, 2), 1, src, 1, 1, 1, t), shmem.ErrOutOfBounds},
			{"zero stride", shmem.IBPut(small, 0, src, 1, 1, 1, t), shmem.ErrInvalid},
			{"negative source stride", shmem.IBPut(small, 1, src, -1, 1, 1, t), shmem.ErrInvalid},
			{"negative block", shmem.IBGet(src, 1, small, 1, -1, 1, t), shmem.ErrInvalid},
			{"negative count", shmem.IBGet(src, 1, small, 1, 1, -1, t), shmem.ErrInvalid},
			{"zero Sym", shmem.IBPut(shmem.Sym[int32]{}, 1, src, 1, 1, 1, t), shmem.ErrInvalid},
		} {
			if !errors.Is(c.err, c.want) {
				return fmt.Errorf("%s on PE %d: %v, want %v", c.what, t, c.err, c.want)
			}
		}
		if err := shmem.IBPut(small, 1, src, 1, 1, 1, np); !errors.Is(err, shmem.ErrBadPE) {
			return fmt.Errorf("IBPut to PE npes: %v", err)
		}
		// Nothing to move is not an error, even with strides that would
		// reach anywhere.
		if err := shmem.IBPut(small, math.MaxInt, nil, math.MaxInt, 0, math.MaxInt, t); err != nil {
			return fmt.Errorf("zero-size blocks: %v", err)
		}
		if err := shmem.IBGet(nil, 1, small, 1, 5, 0, t); err != nil {
			return fmt.Errorf("zero blocks: %v", err)
		}
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	for i, v := range s.Local() {
		if v != fill {
			return fmt.Errorf("element %d is %d after refused calls", i, v)
		}
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	// The largest patterns that fit: last element at index 9.
	if err := shmem.IBPut(small, 4, []int32{1, 2, 3, 4, 5, 6, 7, 8}, 3, 2, 3, right); err != nil {
		return err
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	if got := s.Local()[:10]; fmt.Sprint(got) != fmt.Sprint([]int32{1, 2, fill, fill, 4, 5, fill, fill, 7, 8}) {
		return fmt.Errorf("largest fitting IBPut: %v", got)
	}
	return pe.BarrierAll()
})

func TestBlockStrided(t *testing.T) { each(t, "block-strided", 1, 2, 3, 8) }
