// Byte views of typed slices: the only file of ring/ that uses unsafe.
// A view aliases memory the caller already owns (the slice passed in)
// and lives no longer than the call that made it; shmem.Elem types have
// no pointers, so any byte pattern is a valid value.

package ring

import "unsafe"

// sizeOf is the size of one T in bytes.
func sizeOf[T any]() int {
	var z T
	return int(unsafe.Sizeof(z))
}

// asBytes views s as its bytes.
func asBytes[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*sizeOf[T]())
}
