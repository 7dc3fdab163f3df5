//go:build !amd64 || race

package heap

import "sync/atomic"

// TSO: see release_tso.go. Here plain stores are not release stores (or
// the race detector must see the synchronization), so StoreRelease64 is
// an atomic store.
const TSO = false

// StoreRelease64 stores v into *p: an atomic store here (release_tso.go).
func StoreRelease64(p *uint64, v uint64) { atomic.StoreUint64(p, v) }
