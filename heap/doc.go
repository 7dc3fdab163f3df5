// Package heap owns a PE's memory: the shared-memory segment that holds
// its symmetric heap, the deterministic allocator that places collective
// allocations at the same offset on every PE, the layout of the reserved
// region at the start of every segment, the audited helpers that read
// and write shared words atomically, and the wake descriptor (an
// eventfd) that a PE's waits sleep on and its writers wake.
//
// A segment is an anonymous memfd, sealed against resizing and mapped
// MAP_SHARED. Same-host peers receive its descriptor over a Unix socket
// (SCM_RIGHTS) and map it too; nothing of it has a name in any file
// system, so it disappears with the last process that maps it, even after
// kill -9 of every PE.
//
// heap never imports shmem. Caveats: a Segment's Bytes are valid only
// until Close; the Allocator is not safe for concurrent use (its owner
// locks); every concurrent access to a shared word must go through the
// helpers in atomic.go, which the race detector does not see into.
package heap
