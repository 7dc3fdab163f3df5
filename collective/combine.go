package collective

import (
	"math"

	"github.com/goshmem/goshmem/shmem"
)

// The element loops of the reductions. combine dispatches on the machine
// type once per call, so each loop below is a plain typed loop. Go's
// compiler does not vectorise them; the float64 sums, the reduction
// goshbench and most programs run, have AVX2 loops (sum_amd64.s) for
// the leading multiple of 8 elements. The loops are written d = a op b
// with d allowed to alias a or b (in place): each element is read
// before it is written.

type integer interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

type float interface{ ~float32 | ~float64 }

type cplx interface{ ~complex64 | ~complex128 }

// combine sets d[i] = a[i] op b[i] for every i of d; a and b are at
// least as long. op is valid for k (opCheck).
func combine[T shmem.Elem](k kind, op Op, d, a, b []T) {
	switch k {
	case kInt8:
		intLoop(op, cast[int8](d), cast[int8](a), cast[int8](b))
	case kInt16:
		intLoop(op, cast[int16](d), cast[int16](a), cast[int16](b))
	case kInt32:
		intLoop(op, cast[int32](d), cast[int32](a), cast[int32](b))
	case kInt64:
		intLoop(op, cast[int64](d), cast[int64](a), cast[int64](b))
	case kUint8:
		intLoop(op, cast[uint8](d), cast[uint8](a), cast[uint8](b))
	case kUint16:
		intLoop(op, cast[uint16](d), cast[uint16](a), cast[uint16](b))
	case kUint32:
		intLoop(op, cast[uint32](d), cast[uint32](a), cast[uint32](b))
	case kUint64:
		intLoop(op, cast[uint64](d), cast[uint64](a), cast[uint64](b))
	case kFloat32:
		floatLoop(op, cast[float32](d), cast[float32](a), cast[float32](b))
	case kFloat64:
		d, a, b := cast[float64](d), cast[float64](a), cast[float64](b)
		if op == Sum {
			i := sumVec2(d, a[:len(d)], b[:len(d)])
			d, a, b = d[i:], a[i:], b[i:]
		}
		floatLoop(op, d, a, b)
	case kComplex64:
		cplxLoop(op, cast[complex64](d), cast[complex64](a), cast[complex64](b))
	case kComplex128:
		cplxLoop(op, cast[complex128](d), cast[complex128](a), cast[complex128](b))
	default:
		panic("collective: combine on an unknown element kind")
	}
}

// The loops are written out once per constraint (integer, float, cplx),
// on purpose: sharing Sum, Prod, Min and Max through one generic helper
// over integer | float (| cplx) made a 2-PE Reduce of 1 MiB of int64
// over shared memory 1.7x slower (30 against 52 µs, 5 interleaved
// goshbench rounds, 2026-12-01). That step is the size of the placement
// effect sumLoop describes, so it may have been placement too; not
// re-measured.
func intLoop[U integer](op Op, d, a, b []U) {
	a, b = a[:len(d)], b[:len(d)]
	switch op {
	case Sum:
		sumLoop(d, a, b)
	case Prod:
		for i := range d {
			d[i] = a[i] * b[i]
		}
	case Min:
		for i := range d {
			d[i] = min(a[i], b[i])
		}
	case Max:
		for i := range d {
			d[i] = max(a[i], b[i])
		}
	case And:
		for i := range d {
			d[i] = a[i] & b[i]
		}
	case Or:
		for i := range d {
			d[i] = a[i] | b[i]
		}
	case Xor:
		for i := range d {
			d[i] = a[i] ^ b[i]
		}
	default:
		panic("collective: integer loop for " + op.String())
	}
}

// sumLoop is d = a + b four elements a step. The one-element loop's
// speed depended on where the linker happened to place it: a 2-PE
// AllReduce of 1 MiB of float64 over shared memory read 80 µs in one
// build and 48 µs in the same code with an unrelated netmesh change
// reverted (6 interleaved goshbench rounds each, 2026-12-01), the loop's
// 24 bytes straddling a 64-byte line in the slow build. Four sums a
// step read 49-56 µs in both placements. d may alias a or b: each step
// reads its four elements before it writes them.
func sumLoop[U integer | float](d, a, b []U) {
	a, b = a[:len(d)], b[:len(d)]
	i := 0
	for ; i+4 <= len(d); i += 4 {
		dd, aa, bb := d[i:i+4:i+4], a[i:i+4:i+4], b[i:i+4:i+4]
		s0, s1, s2, s3 := aa[0]+bb[0], aa[1]+bb[1], aa[2]+bb[2], aa[3]+bb[3]
		dd[0], dd[1], dd[2], dd[3] = s0, s1, s2, s3
	}
	for ; i < len(d); i++ {
		d[i] = a[i] + b[i]
	}
}

// sumLoop4 is sumLoop for combine4: d = a + b + c + e, summed in that
// order, four elements a step.
func sumLoop4[U integer | float](d, a, b, c, e []U) {
	a, b, c, e = a[:len(d)], b[:len(d)], c[:len(d)], e[:len(d)]
	i := 0
	for ; i+4 <= len(d); i += 4 {
		dd, aa, bb, cc, ee := d[i:i+4:i+4], a[i:i+4:i+4], b[i:i+4:i+4], c[i:i+4:i+4], e[i:i+4:i+4]
		s0 := aa[0] + bb[0] + cc[0] + ee[0]
		s1 := aa[1] + bb[1] + cc[1] + ee[1]
		s2 := aa[2] + bb[2] + cc[2] + ee[2]
		s3 := aa[3] + bb[3] + cc[3] + ee[3]
		dd[0], dd[1], dd[2], dd[3] = s0, s1, s2, s3
	}
	for ; i < len(d); i++ {
		d[i] = a[i] + b[i] + c[i] + e[i]
	}
}

func floatLoop[U float](op Op, d, a, b []U) {
	a, b = a[:len(d)], b[:len(d)]
	switch op {
	case Sum:
		sumLoop(d, a, b)
	case Prod:
		for i := range d {
			d[i] = a[i] * b[i]
		}
	case Min:
		for i := range d {
			d[i] = min(a[i], b[i])
		}
	case Max:
		for i := range d {
			d[i] = max(a[i], b[i])
		}
	default:
		panic("collective: floating-point loop for " + op.String())
	}
}

func cplxLoop[U cplx](op Op, d, a, b []U) {
	a, b = a[:len(d)], b[:len(d)]
	switch op {
	case Sum:
		for i := range d {
			d[i] = a[i] + b[i]
		}
	case Prod:
		for i := range d {
			d[i] = a[i] * b[i]
		}
	default:
		panic("collective: complex loop for " + op.String())
	}
}

// combine4 sets d[i] = ((a[i] op b[i]) op c[i]) op e[i], the same bits
// as three passes of combine in that order, with one pass over d: the
// direct algorithm's reduction reads every member's src once and writes
// its chunk once, not three times. d may alias a.
func combine4[T shmem.Elem](k kind, op Op, d, a, b, c, e []T) {
	switch k {
	case kInt8:
		intLoop4(op, cast[int8](d), cast[int8](a), cast[int8](b), cast[int8](c), cast[int8](e))
	case kInt16:
		intLoop4(op, cast[int16](d), cast[int16](a), cast[int16](b), cast[int16](c), cast[int16](e))
	case kInt32:
		intLoop4(op, cast[int32](d), cast[int32](a), cast[int32](b), cast[int32](c), cast[int32](e))
	case kInt64:
		intLoop4(op, cast[int64](d), cast[int64](a), cast[int64](b), cast[int64](c), cast[int64](e))
	case kUint8:
		intLoop4(op, cast[uint8](d), cast[uint8](a), cast[uint8](b), cast[uint8](c), cast[uint8](e))
	case kUint16:
		intLoop4(op, cast[uint16](d), cast[uint16](a), cast[uint16](b), cast[uint16](c), cast[uint16](e))
	case kUint32:
		intLoop4(op, cast[uint32](d), cast[uint32](a), cast[uint32](b), cast[uint32](c), cast[uint32](e))
	case kUint64:
		intLoop4(op, cast[uint64](d), cast[uint64](a), cast[uint64](b), cast[uint64](c), cast[uint64](e))
	case kFloat32:
		floatLoop4(op, cast[float32](d), cast[float32](a), cast[float32](b), cast[float32](c), cast[float32](e))
	case kFloat64:
		d, a, b, c, e := cast[float64](d), cast[float64](a), cast[float64](b), cast[float64](c), cast[float64](e)
		if op == Sum {
			i := sumVec4(d, a[:len(d)], b[:len(d)], c[:len(d)], e[:len(d)])
			d, a, b, c, e = d[i:], a[i:], b[i:], c[i:], e[i:]
		}
		floatLoop4(op, d, a, b, c, e)
	case kComplex64:
		cplxLoop4(op, cast[complex64](d), cast[complex64](a), cast[complex64](b), cast[complex64](c), cast[complex64](e))
	case kComplex128:
		cplxLoop4(op, cast[complex128](d), cast[complex128](a), cast[complex128](b), cast[complex128](c), cast[complex128](e))
	default:
		panic("collective: combine4 on an unknown element kind")
	}
}

func intLoop4[U integer](op Op, d, a, b, c, e []U) {
	a, b, c, e = a[:len(d)], b[:len(d)], c[:len(d)], e[:len(d)]
	switch op {
	case Sum:
		sumLoop4(d, a, b, c, e)
	case Prod:
		for i := range d {
			d[i] = a[i] * b[i] * c[i] * e[i]
		}
	case Min:
		for i := range d {
			d[i] = min(min(min(a[i], b[i]), c[i]), e[i])
		}
	case Max:
		for i := range d {
			d[i] = max(max(max(a[i], b[i]), c[i]), e[i])
		}
	case And:
		for i := range d {
			d[i] = a[i] & b[i] & c[i] & e[i]
		}
	case Or:
		for i := range d {
			d[i] = a[i] | b[i] | c[i] | e[i]
		}
	case Xor:
		for i := range d {
			d[i] = a[i] ^ b[i] ^ c[i] ^ e[i]
		}
	default:
		panic("collective: integer loop for " + op.String())
	}
}

func floatLoop4[U float](op Op, d, a, b, c, e []U) {
	a, b, c, e = a[:len(d)], b[:len(d)], c[:len(d)], e[:len(d)]
	switch op {
	case Sum:
		sumLoop4(d, a, b, c, e)
	case Prod:
		for i := range d {
			d[i] = a[i] * b[i] * c[i] * e[i]
		}
	case Min:
		for i := range d {
			d[i] = min(min(min(a[i], b[i]), c[i]), e[i])
		}
	case Max:
		for i := range d {
			d[i] = max(max(max(a[i], b[i]), c[i]), e[i])
		}
	default:
		panic("collective: floating-point loop for " + op.String())
	}
}

func cplxLoop4[U cplx](op Op, d, a, b, c, e []U) {
	a, b, c, e = a[:len(d)], b[:len(d)], c[:len(d)], e[:len(d)]
	switch op {
	case Sum:
		for i := range d {
			d[i] = a[i] + b[i] + c[i] + e[i]
		}
	case Prod:
		for i := range d {
			d[i] = a[i] * b[i] * c[i] * e[i]
		}
	default:
		panic("collective: complex loop for " + op.String())
	}
}

// fillIdentity sets every element of d to the identity of op: the value
// x with x op y == y for every y.
func fillIdentity[T shmem.Elem](k kind, op Op, d []T) {
	switch k {
	case kInt8:
		fill(cast[int8](d), intIdentity[int8](op, math.MinInt8, math.MaxInt8))
	case kInt16:
		fill(cast[int16](d), intIdentity[int16](op, math.MinInt16, math.MaxInt16))
	case kInt32:
		fill(cast[int32](d), intIdentity[int32](op, math.MinInt32, math.MaxInt32))
	case kInt64:
		fill(cast[int64](d), intIdentity[int64](op, math.MinInt64, math.MaxInt64))
	case kUint8:
		fill(cast[uint8](d), intIdentity[uint8](op, 0, math.MaxUint8))
	case kUint16:
		fill(cast[uint16](d), intIdentity[uint16](op, 0, math.MaxUint16))
	case kUint32:
		fill(cast[uint32](d), intIdentity[uint32](op, 0, math.MaxUint32))
	case kUint64:
		fill(cast[uint64](d), intIdentity[uint64](op, 0, math.MaxUint64))
	case kFloat32:
		fill(cast[float32](d), float32(floatIdentity(op)))
	case kFloat64:
		fill(cast[float64](d), floatIdentity(op))
	case kComplex64:
		fill(cast[complex64](d), complex64(complex(floatIdentity(op), 0)))
	case kComplex128:
		fill(cast[complex128](d), complex(floatIdentity(op), 0))
	}
}

func intIdentity[U integer](op Op, lo, hi U) U {
	switch op {
	case Prod:
		return 1
	case Min:
		return hi
	case Max:
		return lo
	case And:
		return ^U(0)
	}
	return 0 // Sum, Or, Xor
}

func floatIdentity(op Op) float64 {
	switch op {
	case Prod:
		return 1
	case Min:
		return math.Inf(1)
	case Max:
		return math.Inf(-1)
	}
	return 0
}

func fill[U any](d []U, v U) {
	for i := range d {
		d[i] = v
	}
}
