package collective

import "github.com/klauspost/cpuid/v2"

// vecSum says whether the float64 sums run the AVX2 loops of
// sum_amd64.s: four elements an instruction where the Go loops
// (sumLoop, sumLoop4) add one, with the same bits, since each element
// is still summed in the same order (IEEE addition, no fused steps). A
// test turns it off to check the Go loops on the same machine.
var vecSum = cpuid.CPU.Supports(cpuid.AVX2)

// sum2F64AVX2 sets d[i] = a[i] + b[i] for i < n; n is a multiple of 8.
// d may be a or b.
//
//go:noescape
func sum2F64AVX2(d, a, b *float64, n int)

// sum4F64AVX2 sets d[i] = ((a[i] + b[i]) + c[i]) + e[i] for i < n; n is a
// multiple of 8. d may be a.
//
//go:noescape
func sum4F64AVX2(d, a, b, c, e *float64, n int)

// sumVec2 sums the leading multiple of 8 of d's elements with the
// vector loop, when there is one, and says how many it did. a and b are
// as long as d.
func sumVec2(d, a, b []float64) int {
	n := len(d) &^ 7
	if !vecSum || n == 0 {
		return 0
	}
	sum2F64AVX2(&d[0], &a[0], &b[0], n)
	return n
}

// sumVec4 is sumVec2 for four inputs.
func sumVec4(d, a, b, c, e []float64) int {
	n := len(d) &^ 7
	if !vecSum || n == 0 {
		return 0
	}
	sum4F64AVX2(&d[0], &a[0], &b[0], &c[0], &e[0], n)
	return n
}
