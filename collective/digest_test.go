package collective

import "testing"

// Two argument sets that differ in one field never share a digest, at
// any position and for small and large differences (counts, roots and
// offsets differ by little or by much), and every digest is valid (top
// bit set), above the error codes.
func TestDigestOneField(t *testing.T) {
	base := []uint64{collReduce, uint64(Sum), uint64(kFloat64), 1, 0, uint64(algoAuto), 4096, 8192}
	d0 := digest(base...)
	if d0&validBit == 0 {
		t.Fatalf("digest %#x lacks the valid bit", d0)
	}
	deltas := []uint64{7, 4096 + 8, 1<<63 - 1, ^uint64(0)}
	for b := range 64 {
		deltas = append(deltas, 1<<b) // a multiplier with 2^k in it would lose 2^(64-k)
	}
	for i := range base {
		for _, d := range deltas {
			f := append([]uint64(nil), base...)
			f[i] += d
			if got := digest(f...); got == d0 {
				t.Errorf("field %d changed by %#x: digest %#x, the same as the unchanged arguments'", i, d, got)
			}
		}
	}
	// Fewer fields are a different call shape, not the same digest.
	if digest(base[:7]...) == d0 {
		t.Error("seven fields have the digest of eight")
	}
}
