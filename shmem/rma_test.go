package shmem_test

import (
	"errors"
	"fmt"
	"math/bits"
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// roundTrip puts a pattern that names the writer into the right
// neighbour, then checks what the left neighbour wrote here and gets the
// right neighbour's copy back.
func roundTrip[T shmem.Elem](pe *shmem.PE, val func(pe, i int) T) error {
	const n = 37
	me, np := pe.MyPE(), pe.NPEs()
	right, left := (me+1)%np, (me-1+np)%np
	s, err := shmem.Malloc[T](pe, n)
	if err != nil {
		return err
	}
	src := make([]T, n)
	for i := range src {
		src[i] = val(me, i)
	}
	if err := shmem.Put(s, src, right); err != nil {
		return err
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	loc := s.Local()
	for i := range loc {
		if loc[i] != val(left, i) {
			return fmt.Errorf("%T: element %d is %v, want %v from PE %d", loc[i], i, loc[i], val(left, i), left)
		}
	}
	got := make([]T, n)
	if err := shmem.Get(got, s, right); err != nil {
		return err
	}
	for i := range got {
		if got[i] != val(me, i) {
			return fmt.Errorf("%T: got element %d = %v from PE %d, want %v", got[i], i, got[i], right, val(me, i))
		}
	}
	v, err := shmem.G(s, 5, right)
	if err != nil || v != val(me, 5) {
		return fmt.Errorf("G: %v %v", v, err)
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	if err := shmem.P(s, 3, val(me, 1000), right); err != nil {
		return err
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	if loc[3] != val(left, 1000) {
		return fmt.Errorf("P: %v, want %v", loc[3], val(left, 1000))
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	return shmem.Free(s)
}

var _ = register("every-type", func(pe *shmem.PE) error {
	for _, f := range []func() error{
		func() error { return roundTrip(pe, func(p, i int) int8 { return int8(p*7 + i) }) },
		func() error { return roundTrip(pe, func(p, i int) int16 { return int16(-p*1000 - i) }) },
		func() error { return roundTrip(pe, func(p, i int) int32 { return int32(p<<20 | i) }) },
		func() error { return roundTrip(pe, func(p, i int) int64 { return int64(p)<<40 - int64(i) }) },
		func() error { return roundTrip(pe, func(p, i int) int { return -(p<<(bits.UintSize-31) | i) }) },
		func() error { return roundTrip(pe, func(p, i int) uint8 { return uint8(p*13 + i) }) },
		func() error { return roundTrip(pe, func(p, i int) uint16 { return uint16(p*4000 + i) }) },
		func() error { return roundTrip(pe, func(p, i int) uint32 { return uint32(p)<<24 | uint32(i) }) },
		func() error { return roundTrip(pe, func(p, i int) uint64 { return uint64(p)<<50 | uint64(i) }) },
		func() error {
			return roundTrip(pe, func(p, i int) uint { return uint(p)<<(bits.UintSize-24) + uint(i) })
		},
		func() error { return roundTrip(pe, func(p, i int) uintptr { return uintptr(p)<<30 + uintptr(i) }) },
		func() error { return roundTrip(pe, func(p, i int) float32 { return float32(p) + float32(i)/8 }) },
		func() error { return roundTrip(pe, func(p, i int) float64 { return float64(p)*1e10 + float64(i)/3 }) },
		func() error {
			return roundTrip(pe, func(p, i int) complex64 { return complex(float32(p), float32(-i)) })
		},
		func() error {
			return roundTrip(pe, func(p, i int) complex128 { return complex(float64(i), float64(p)/7) })
		},
	} {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
})

func TestEveryType(t *testing.T) { each(t, "every-type", 1, 2, 3, 4, 8) }

var _ = register("slices-and-zero-length", func(pe *shmem.PE) error {
	me, np := pe.MyPE(), pe.NPEs()
	right := (me + 1) % np
	s, err := shmem.Malloc[int64](pe, 100)
	if err != nil {
		return err
	}
	z, err := shmem.Malloc[int64](pe, 0)
	if err != nil || z.Len() != 0 {
		return fmt.Errorf("Malloc(0): len %d, %v", z.Len(), err)
	}
	for i := range s.Local() {
		s.Local()[i] = -1
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	// Elements 10..19 of the neighbour through a slice handle.
	mid := s.Slice(10, 20)
	if mid.Len() != 10 {
		return fmt.Errorf("Slice len %d", mid.Len())
	}
	if err := shmem.Put(mid, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, right); err != nil {
		return err
	}
	// Zero-length operations succeed and change nothing.
	if err := shmem.Put(mid, nil, right); err != nil {
		return fmt.Errorf("zero-length put: %v", err)
	}
	if err := shmem.Get([]int64{}, mid, right); err != nil {
		return fmt.Errorf("zero-length get: %v", err)
	}
	if err := shmem.Put(z, []int64{}, right); err != nil {
		return fmt.Errorf("put to zero-length object: %v", err)
	}
	// One element too many: refused, nothing written.
	if err := shmem.Put(mid, make([]int64, 11), right); !errors.Is(err, shmem.ErrOutOfBounds) {
		return fmt.Errorf("put past a slice: %v", err)
	}
	if err := shmem.Put(s.Slice(95, 101), []int64{7}, right); !errors.Is(err, shmem.ErrOutOfBounds) {
		return fmt.Errorf("put through a bad slice: %v", err)
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	for i, v := range s.Local() {
		want := int64(-1)
		if i >= 10 && i < 20 {
			want = int64(i - 9)
		}
		if v != want {
			return fmt.Errorf("element %d = %d, want %d", i, v, want)
		}
	}
	if err := shmem.Free(z); err != nil {
		return err
	}
	return shmem.Free(s)
})

func TestSlicesAndZeroLength(t *testing.T) { each(t, "slices-and-zero-length", 1, 2, 3) }

// Fence ordering: data, fence, flag. The flag's observer always sees the data.
var _ = register("fence-order", func(pe *shmem.PE) error {
	me, np := pe.MyPE(), pe.NPEs()
	if np < 2 {
		return nil
	}
	const rounds, words = 300, 512
	data, err := shmem.Malloc[uint64](pe, words)
	if err != nil {
		return err
	}
	flag, err := shmem.Malloc[uint64](pe, 1)
	if err != nil {
		return err
	}
	ack, err := shmem.Malloc[uint64](pe, 1)
	if err != nil {
		return err
	}
	right, left := (me+1)%np, (me-1+np)%np
	buf := make([]uint64, words)
	for r := uint64(1); r <= rounds; r++ {
		for i := range buf {
			buf[i] = r*1000003 + uint64(i)
		}
		if err := shmem.Put(data, buf, right); err != nil {
			return err
		}
		if err := pe.Fence(); err != nil {
			return err
		}
		if err := shmem.P(flag, 0, r, right); err != nil {
			return err
		}
		if err := shmem.WaitUntil(flag, 0, shmem.CmpGE, r); err != nil {
			return err
		}
		for i, v := range data.Local() {
			if v != r*1000003+uint64(i) {
				return fmt.Errorf("round %d: saw the flag from PE %d but element %d is %d", r, left, i, v)
			}
		}
		// Tell the writer it may overwrite the data.
		if err := shmem.AtomicSet(ack, 0, r, left); err != nil {
			return err
		}
		if err := shmem.WaitUntil(ack, 0, shmem.CmpGE, r); err != nil {
			return err
		}
	}
	return nil
})

func TestFenceOrder(t *testing.T) { each(t, "fence-order", 2, 3, 4) }

var _ = register("strided-and-nbi", func(pe *shmem.PE) error {
	me, np := pe.MyPE(), pe.NPEs()
	right, left := (me+1)%np, (me-1+np)%np
	s, err := shmem.Malloc[int32](pe, 30)
	if err != nil {
		return err
	}
	src := []int32{10, -1, 11, -1, 12, -1, 13, -1, 14}
	// Every second element of src into every third element of the neighbour.
	if err := shmem.IPut(s, 3, src, 2, 5, right); err != nil {
		return err
	}
	if err := shmem.IPut(s, 3, src, 2, 6, right); !errors.Is(err, shmem.ErrOutOfBounds) {
		return fmt.Errorf("IPut past src: %v", err)
	}
	if err := shmem.IPut(s, 0, src, 2, 2, right); !errors.Is(err, shmem.ErrInvalid) {
		return fmt.Errorf("IPut stride 0: %v", err)
	}
	if err := shmem.IPut(s, 8, src, 2, 5, right); !errors.Is(err, shmem.ErrOutOfBounds) {
		return fmt.Errorf("IPut past dst: %v", err)
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	for i, v := range s.Local() {
		want := int32(0)
		if i%3 == 0 && i/3 < 5 {
			want = int32(10 + i/3)
		}
		if v != want {
			return fmt.Errorf("IPut from PE %d: element %d = %d, want %d", left, i, v, want)
		}
	}
	got := make([]int32, 10)
	if err := shmem.IGet(got, 2, s, 3, 5, right); err != nil {
		return err
	}
	for k := 0; k < 5; k++ {
		if got[2*k] != int32(10+k) || got[2*k+1] != 0 {
			return fmt.Errorf("IGet: %v", got)
		}
	}
	// Non-blocking forms: valid after Quiet.
	nb := make([]int32, 30)
	for i := range nb {
		nb[i] = int32(me*100 + i)
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	if err := shmem.PutNBI(s, nb, right); err != nil {
		return err
	}
	if err := pe.Quiet(); err != nil {
		return err
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	back := make([]int32, 30)
	if err := shmem.GetNBI(back, s, right); err != nil {
		return err
	}
	if err := pe.Quiet(); err != nil {
		return err
	}
	for i := range back {
		if back[i] != int32(me*100+i) {
			return fmt.Errorf("GetNBI: element %d = %d", i, back[i])
		}
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	return shmem.Free(s)
})

func TestStridedAndNBI(t *testing.T) { each(t, "strided-and-nbi", 1, 2, 4) }

var _ = register("put-signal", func(pe *shmem.PE) error {
	me, np := pe.MyPE(), pe.NPEs()
	right, left := (me+1)%np, (me-1+np)%np
	data, err := shmem.Malloc[float64](pe, 64)
	if err != nil {
		return err
	}
	sig, err := shmem.Malloc[uint64](pe, 1)
	if err != nil {
		return err
	}
	add, err := shmem.Malloc[uint64](pe, 1)
	if err != nil {
		return err
	}
	buf := make([]float64, 64)
	for round := uint64(1); round <= 100; round++ {
		for i := range buf {
			buf[i] = float64(me) + float64(round)/1000 + float64(i)
		}
		if err := shmem.PutSignal(data, buf, sig, round, shmem.SignalSet, right); err != nil {
			return err
		}
		v, err := shmem.SignalWaitUntil(sig, shmem.CmpGE, round)
		if err != nil {
			return err
		}
		if v != round {
			return fmt.Errorf("signal %d, want %d", v, round)
		}
		for i, x := range data.Local() {
			if x != float64(left)+float64(round)/1000+float64(i) {
				return fmt.Errorf("round %d: signal seen but element %d = %v", round, i, x)
			}
		}
		if err := pe.BarrierAll(); err != nil {
			return err
		}
	}
	// SignalAdd from every PE to PE 0.
	if err := shmem.PutSignal(data.Slice(0, 0), nil, add, uint64(me+1), shmem.SignalAdd, 0); err != nil {
		return err
	}
	if me == 0 {
		want := uint64(np * (np + 1) / 2)
		if _, err := shmem.SignalWaitUntil(add, shmem.CmpEQ, want); err != nil {
			return err
		}
	}
	if err := shmem.PutSignal(data, buf, sig, 1, shmem.SignalOp(9), right); !errors.Is(err, shmem.ErrInvalid) {
		return fmt.Errorf("bad signal op: %v", err)
	}
	return pe.BarrierAll()
})

func TestPutSignal(t *testing.T) { each(t, "put-signal", 1, 2, 3, 4) }
