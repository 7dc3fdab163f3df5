package ring

// The two rules of a lane that its sender and receiver share, as pure
// functions so the explorer in ring's tests (explore_test.go) drives the
// same code as Send and Poll.

// slotOf is the slot of message seq on a lane of depth slots.
func slotOf(seq, depth uint64) int { return int((seq - 1) % depth) }

// safeNeed is the acknowledgement a Safe sender needs before it writes
// message seq: slot slotOf(seq) holds message seq-depth until the
// receiver has acknowledged it. 0 when no acknowledgement is needed.
func safeNeed(seq, depth uint64) uint64 {
	if seq > depth {
		return seq - depth
	}
	return 0
}
