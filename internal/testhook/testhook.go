// Package testhook holds the hooks goshmem's tests set inside the
// runtime, so that a test can hold a piece of the protocol still (a
// stream's frames, say) instead of sleeping to make an interleaving
// happen. Being internal, the hooks are no part of the public API; the
// runtime pays one atomic load at each site while none is set.
package testhook

import "sync/atomic"

// Apply, when set, is called by netmesh before each frame it applies,
// in the goroutine applying it, with the applying PE's rank, the sending
// PE's rank, the slot of the channel stream the frame arrives on when
// the sender opened that stream (its channel's requests; -1 otherwise),
// and the index of the link stream it arrives on (0 up to the link's
// stream count; -1 on a channel stream). Blocking in it holds that
// stream's frames, and only that stream's.
var Apply atomic.Pointer[func(rank, from, slot, stream int)]
