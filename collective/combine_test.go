package collective

import (
	"fmt"
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// combine4 against the serial reference (ref, written apart from
// combine.go), for every operator a type takes, apart and with d
// aliasing its first input (the in-place direct algorithm).
func TestCombine4(t *testing.T) {
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
	const n = 37
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
