package collective

import (
	"fmt"

	"github.com/goshmem/goshmem/shmem"
)

// The serial reference the behavioural tests check against: element
// values that are a pure function of (team rank, index, salt), so every
// PE can compute every other PE's contribution, and reduction operators
// written independently of combine.go.

// val is the element member r contributes at index i in the call salted
// salt. Floating-point and complex values are small integers, so every
// sum and product of up to 8 of them is exact whatever the order.
func val[T shmem.Elem](r, i, salt int) T {
	h := uint64(r)*1000003 + uint64(i)*7919 + uint64(salt)*104729 + 17
	h ^= h >> 13
	h *= 0x9E3779B97F4A7C15
	h ^= h >> 29
	var z T
	switch any(z).(type) {
	case float64:
		return any(float64(int(h%9) - 4)).(T)
	case float32:
		return any(float32(int(h%9) - 4)).(T)
	case complex64:
		return any(complex(float32(int(h%5)-2), float32(int((h>>8)%5)-2))).(T)
	case complex128:
		return any(complex(float64(int(h%5)-2), float64(int((h>>8)%5)-2))).(T)
	case int8:
		return any(int8(h)).(T)
	case int32:
		return any(int32(h)).(T)
	case int64:
		return any(int64(h)).(T)
	case int:
		return any(int(h)).(T)
	case uint8:
		return any(uint8(h)).(T)
	case uint16:
		return any(uint16(h)).(T)
	case uint64:
		return any(h).(T)
	}
	panic(fmt.Sprintf("val: no test values for %T", z))
}

// sentinel marks elements a collective must not write.
func sentinel[T shmem.Elem]() T {
	var z T
	switch any(z).(type) {
	case float64:
		return any(float64(-1e9)).(T)
	case float32:
		return any(float32(-1e9)).(T)
	case complex64:
		return any(complex64(complex(-1e9, 7))).(T)
	case complex128:
		return any(complex(-1e9, 7)).(T)
	}
	return val[T](-1, -1, -1) // a value the matrix's small inputs never reach for the integer types
}

func refInt[U int8 | int32 | int64 | int | uint8 | uint16 | uint64](op Op, a, b U) U {
	switch op {
	case Sum:
		return a + b
	case Prod:
		return a * b
	case Min:
		if b < a {
			return b
		}
		return a
	case Max:
		if b > a {
			return b
		}
		return a
	case And:
		return a & b
	case Or:
		return a | b
	case Xor:
		return a ^ b
	}
	panic("refInt: " + op.String())
}

func refFloat[U float32 | float64](op Op, a, b U) U {
	switch op {
	case Sum:
		return a + b
	case Prod:
		return a * b
	case Min:
		if b < a {
			return b
		}
		return a
	case Max:
		if b > a {
			return b
		}
		return a
	}
	panic("refFloat: " + op.String())
}

func refCplx[U complex64 | complex128](op Op, a, b U) U {
	switch op {
	case Sum:
		return a + b
	case Prod:
		return a * b
	}
	panic("refCplx: " + op.String())
}

// ref is a op b for the test's element types.
func ref[T shmem.Elem](op Op, a, b T) T {
	switch x := any(a).(type) {
	case float64:
		return any(refFloat(op, x, any(b).(float64))).(T)
	case float32:
		return any(refFloat(op, x, any(b).(float32))).(T)
	case complex64:
		return any(refCplx(op, x, any(b).(complex64))).(T)
	case complex128:
		return any(refCplx(op, x, any(b).(complex128))).(T)
	case int8:
		return any(refInt(op, x, any(b).(int8))).(T)
	case int32:
		return any(refInt(op, x, any(b).(int32))).(T)
	case int64:
		return any(refInt(op, x, any(b).(int64))).(T)
	case int:
		return any(refInt(op, x, any(b).(int))).(T)
	case uint8:
		return any(refInt(op, x, any(b).(uint8))).(T)
	case uint16:
		return any(refInt(op, x, any(b).(uint16))).(T)
	case uint64:
		return any(refInt(op, x, any(b).(uint64))).(T)
	}
	panic(fmt.Sprintf("ref: no reference for %T", a))
}

// refReduce is the reduction over members lo..hi (inclusive) of element
// i; ok is false for an empty range.
func refReduce[T shmem.Elem](op Op, lo, hi, i, salt int) (T, bool) {
	var acc T
	if hi < lo {
		return acc, false
	}
	acc = val[T](lo, i, salt)
	for r := lo + 1; r <= hi; r++ {
		acc = ref(op, acc, val[T](r, i, salt))
	}
	return acc, true
}

// valid says whether op applies to T.
func valid[T shmem.Elem](op Op) bool {
	var z T
	switch any(z).(type) {
	case float32, float64:
		return op <= Max
	case complex64, complex128:
		return op <= Prod
	}
	return true
}

var allOps = []Op{Sum, Prod, Min, Max, And, Or, Xor}
