// Package errs holds goshmem's error sentinels in one place.
//
// The lower layers (heap, netmesh, boot) return these wrapped with the
// numbers that explain them; package shmem re-exports them under the
// names of the public API (shmem.ErrBadPE and so on), so callers compare
// with errors.Is against shmem's names whatever layer produced the error.
package errs

import "errors"

var (
	// BadPE: a PE number outside the job or team.
	BadPE = errors.New("goshmem: bad PE number")
	// OutOfBounds: an index, offset or length past a symmetric object, or
	// a handle to a freed object.
	OutOfBounds = errors.New("goshmem: out of bounds")
	// HeapExhausted: the symmetric heap has no free block large enough.
	HeapExhausted = errors.New("goshmem: symmetric heap exhausted")
	// Asymmetric: PEs disagreed on a collective call.
	Asymmetric = errors.New("goshmem: PEs disagree on a collective call")
	// PeerLost: a PE of the job died or its link broke.
	PeerLost = errors.New("goshmem: peer lost")
	// Timeout: a wait on other PEs passed the PE's timeout.
	Timeout = errors.New("goshmem: timeout")
	// Finalized: the PE, context or team is closed.
	Finalized = errors.New("goshmem: finalized")
	// Auth: a peer or launcher failed authentication with the job key.
	Auth = errors.New("goshmem: authentication failed")
	// Protocol: malformed bytes from the wire or from shared memory.
	Protocol = errors.New("goshmem: protocol violation")
	// Invalid: a malformed argument or configuration that is none of the above.
	Invalid = errors.New("goshmem: invalid argument")
)
