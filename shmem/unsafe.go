// Byte views of typed memory: the only file of shmem/ that uses unsafe.
// The views alias memory the caller already owns (a user slice, or a
// mapped segment whose bounds were checked) and live no longer than it.

package shmem

import "unsafe"

// sizeOf is the size of one T in bytes.
func sizeOf[T any]() int {
	var z T
	return int(unsafe.Sizeof(z))
}

// asBytes views a []T as its bytes.
func asBytes[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*sizeOf[T]())
}

// viewAs views n elements of T at byte offset off of mem. The caller has
// checked that off+n*sizeof(T) <= len(mem) and that off is aligned for T.
func viewAs[T any](mem []byte, off uint64, n int) []T {
	if n == 0 {
		return []T{}
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(mem[off:]))), n)
}

// toBits and fromBits move a 4- or 8-byte value to and from the
// uint64 the atomic helpers and the wire carry.
func toBits[T any](v T) uint64 {
	switch unsafe.Sizeof(v) {
	case 4:
		return uint64(*(*uint32)(unsafe.Pointer(&v)))
	case 8:
		return *(*uint64)(unsafe.Pointer(&v))
	}
	panic("shmem: toBits on a type that is not 4 or 8 bytes (ExtendedElem rules it out)")
}

func fromBits[T any](b uint64) T {
	var v T
	switch unsafe.Sizeof(v) {
	case 4:
		*(*uint32)(unsafe.Pointer(&v)) = uint32(b)
	case 8:
		*(*uint64)(unsafe.Pointer(&v)) = b
	default:
		panic("shmem: fromBits on a type that is not 4 or 8 bytes (ExtendedElem rules it out)")
	}
	return v
}

// word64 views an 8-byte value as the uint64 the wire delivers into.
// The caller has checked that T is 8 bytes.
func word64[T any](p *T) *uint64 { return (*uint64)(unsafe.Pointer(p)) }
