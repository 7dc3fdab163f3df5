//go:build amd64 && !race

package heap

// TSO says that this build's plain stores are release stores: on amd64
// (x86-TSO) a store becomes visible only after every earlier store of
// the same thread, and Go's compiler keeps stores to memory in program
// order. Under the race detector StoreRelease64 is an atomic store, so
// that the detector sees the synchronization.
const TSO = true

// StoreRelease64 stores v into *p (8-byte aligned) as one write that
// becomes visible after every earlier store of this goroutine: on amd64
// a plain MOV, which, unlike sync/atomic's sequentially consistent
// store (an XCHG), does not stall the CPU until its store buffer has
// drained and the line has come over. A load after it may be satisfied
// before it is visible to others (the one reordering x86 allows).
func StoreRelease64(p *uint64, v uint64) { *p = v }
