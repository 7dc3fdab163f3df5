// Typed views of memory: the only file of collective/ that uses unsafe.
// Each view aliases memory the caller already holds (a slice of the same
// size in bytes, or this PE's collective scratch whose bounds were
// checked) and lives no longer than it.

package collective

import "unsafe"

// cast views a []T as a []U of the same length. The caller has checked
// that T and U have the same size (they are the same machine type).
func cast[U, T any](s []T) []U {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*U)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}

// bytesOf views a []T as its bytes.
func bytesOf[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

// elems views b as n elements of T. The caller has checked that b holds
// at least n*sizeof(T) bytes and is aligned for T (scratch buffers are
// 16-byte aligned).
func elems[T any](b []byte, n int) []T {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// sizeOf is the size of one T in bytes.
func sizeOf[T any]() int {
	var z T
	return int(unsafe.Sizeof(z))
}
