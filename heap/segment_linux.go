// Segment mapping: the only file in heap/ that creates, maps and unmaps
// shared memory. It assumes Linux (memfd_create, MAP_SHARED) and 64-bit
// pointers.

package heap

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/internal/errs"
)

// Segment is one PE's symmetric heap as mapped into this process: either
// the PE's own segment (created here) or a same-host peer's (mapped from a
// file descriptor that the peer passed over a Unix socket).
//
// The memory lives outside the Go heap. The Go race detector does not see
// accesses to it; every concurrent access to a word of it goes through the
// helpers in atomic.go.
type Segment struct {
	mem []byte
	fd  int // the memfd while this process still holds it, else -1
}

// Create makes a new anonymous shared-memory segment of size bytes (a
// memfd sealed against shrinking and growing, so no peer can cut the
// mapping under another and fault it) and maps it read-write, shared.
// Pages are allocated by the kernel on first touch. The memfd has no
// name in any file system: it is freed when the last descriptor and the
// last mapping of it go, which includes the death of every process that
// held one, so no segment outlives its job.
func Create(size uint64) (*Segment, error) {
	if size == 0 || size > 1<<46 {
		return nil, fmt.Errorf("heap: segment of %d bytes: %w", size, errs.Invalid)
	}
	fd, err := unix.MemfdCreate("goshmem", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("heap: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("heap: sizing the segment to %d bytes: %w", size, err)
	}
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("heap: sealing the segment: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("heap: mapping %d bytes: %w", size, err)
	}
	return &Segment{mem: mem, fd: fd}, nil
}

// Map maps a peer's segment from a descriptor received over a Unix
// socket. It takes ownership of fd and closes it (the mapping keeps the
// memory alive). The descriptor must be a memfd sealed against shrinking
// and at least size bytes long; anything else is refused, so a peer cannot
// hand us a file that would fault our loads.
func Map(fd int, size uint64) (*Segment, error) {
	defer unix.Close(fd)
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		return nil, fmt.Errorf("heap: peer segment is not a sealed memfd: %w", errs.Protocol)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("heap: fstat of peer segment: %w", err)
	}
	if st.Size < 0 || uint64(st.Size) < size {
		return nil, fmt.Errorf("heap: peer segment has %d bytes, expected %d: %w", st.Size, size, errs.Protocol)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("heap: mapping peer segment of %d bytes: %w", size, err)
	}
	return &Segment{mem: mem, fd: -1}, nil
}

// Bytes is the whole mapping. It is valid until Close.
func (s *Segment) Bytes() []byte { return s.mem }

// Size is the mapping's length in bytes.
func (s *Segment) Size() uint64 { return uint64(len(s.mem)) }

// FD is the memfd of a segment created here, or -1 once CloseFD was called
// or for a mapped peer segment.
func (s *Segment) FD() int { return s.fd }

// CloseFD closes the memfd; the mapping stays. Call it once every peer
// has received the descriptor.
func (s *Segment) CloseFD() {
	if s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
}

// Close unmaps the segment and closes its descriptor. Slices obtained from
// Bytes must not be used afterwards.
func (s *Segment) Close() error {
	s.CloseFD()
	if s.mem == nil {
		return nil
	}
	err := unix.Munmap(s.mem)
	s.mem = nil
	return err
}

// Retire ends the segment without unmapping it: it closes the
// descriptor and replaces the mapping, at the same address and size, by
// private anonymous memory (MAP_FIXED, which swaps the pages atomically).
// Slices from Bytes stay valid: loads and stores through them, by a
// program that kept them past the end of its PE, land in memory nobody
// else sees instead of faulting. This process's hold on the shared
// memory ends (the kernel frees it once no process maps it); the address
// range and one mapping entry stay reserved until the process exits.
// Bytes is nil afterwards, and Close does nothing.
func (s *Segment) Retire() error {
	s.CloseFD()
	if s.mem == nil {
		return nil
	}
	_, err := unix.MmapPtr(-1, 0, unsafe.Pointer(unsafe.SliceData(s.mem)), uintptr(len(s.mem)),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED|unix.MAP_NORESERVE)
	if err != nil {
		return fmt.Errorf("heap: retiring a %d-byte segment: %w", len(s.mem), err)
	}
	s.mem = nil
	return nil
}

// Addr is the address of byte off of the mapping, for the atomic helpers.
// The caller has checked off against Size.
func (s *Segment) addr(off uint64) unsafe.Pointer {
	return unsafe.Pointer(unsafe.SliceData(s.mem[off:]))
}
