// Package verify will hold checks of goshmem's protocols driven by the
// project's real functions: exhaustive interleavings of ring lanes, the
// barrier and quiet, chunk partitions of the collectives, and fuzzing of
// every decoder that reads bytes from the wire or from shared memory.
// Its first check, the import rules of the layers, is in layers_test.go.
package verify
