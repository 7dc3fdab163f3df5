package collective

import (
	"fmt"
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// combine4 against the serial reference (ref, written apart from
// combine.go), for every operator a type takes, apart and with d
// aliasing its first input (the in-place direct algorithm).
func TestCombine4(t *testing.T) { eachSumLoop(t, combine4Types) }

// eachSumLoop runs f with the float64 sums' vector loops (sum_amd64.s),
// where the machine has them, and with the Go loops.
func eachSumLoop(t *testing.T, f func(t *testing.T)) {
	was := vecSum
	defer func() { vecSum = was }()
	for _, v := range []bool{was, false} {
		vecSum = v
		t.Run(fmt.Sprintf("vector=%v", v), f)
		if !was {
			break
		}
	}
}

func combine4Types(t *testing.T) {
	check4[int8](t)
	check4[int32](t)
	check4[int64](t)
	check4[uint8](t)
	check4[uint16](t)
	check4[uint64](t)
	check4[float32](t)
	check4[float64](t)
	check4[complex64](t)
	check4[complex128](t)
}

func check4[T shmem.Elem](t *testing.T) {
	for _, n := range []int{0, 7, 8, 37, 64, 1003} {
		check4n[T](t, n)
	}
}

func check4n[T shmem.Elem](t *testing.T, n int) {
	k := kindOf[T]()
	for _, op := range allOps {
		if !valid[T](op) {
			continue
		}
		for _, alias := range []bool{false, true} {
			in := make([][]T, 4)
			for r := range in {
				in[r] = make([]T, n)
				for i := range n {
					in[r][i] = val[T](r, i, int(op))
				}
			}
			d := make([]T, n)
			if alias {
				d = in[0]
			}
			want := make([]T, n)
			for i := range n {
				want[i] = ref(op, ref(op, ref(op, in[0][i], in[1][i]), in[2][i]), in[3][i])
			}
			combine4(k, op, d, in[0], in[1], in[2], in[3])
			for i := range n {
				if d[i] != want[i] {
					t.Fatalf("%s %v (alias %v): element %d is %v, want %v", fmt.Sprintf("%T", d[i]), op, alias, i, d[i], want[i])
				}
			}
		}
	}
}

// combine against the serial reference at every length 0-9 and some
// longer (the Go loops step four elements, the vector loops eight, then
// each finishes one at a time), apart and with d aliasing either input.
func TestCombine(t *testing.T) { eachSumLoop(t, combineTypes) }

func combineTypes(t *testing.T) {
	check2[int8](t)
	check2[int64](t)
	check2[uint16](t)
	check2[uint64](t)
	check2[float32](t)
	check2[float64](t)
	check2[complex128](t)
}

func check2[T shmem.Elem](t *testing.T) {
	k := kindOf[T]()
	for _, n := range []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 37, 1003} {
		for _, op := range allOps {
			if !valid[T](op) {
				continue
			}
			for alias := range 3 { // 0: apart; 1: d is a; 2: d is b
				a, b := make([]T, n), make([]T, n)
				for i := range n {
					a[i], b[i] = val[T](0, i, int(op)), val[T](1, i, int(op))
				}
				want := make([]T, n)
				for i := range n {
					want[i] = ref(op, a[i], b[i])
				}
				d := [][]T{make([]T, n), a, b}[alias]
				combine(k, op, d, a, b)
				for i := range n {
					if d[i] != want[i] {
						t.Fatalf("%T %v, %d elements (alias %d): element %d is %v, want %v", d[i], op, n, alias, i, d[i], want[i])
					}
				}
			}
		}
	}
}
