package shmem

// InFlight is the number of calls inside pe: the gate's count
// (lifecycle.go). Tests use it to know that goroutines have entered a
// blocking call before they act on the PE.
func InFlight(pe *PE) int { return int(pe.gate.Load() &^ stMask) }

// LockStates is the number of lock words pe keeps state for.
func LockStates(pe *PE) int {
	pe.locksMu.Lock()
	defer pe.locksMu.Unlock()
	return len(pe.locks)
}

// SplitFits exposes splitFits.
var SplitFits = splitFits

// LinkOutstanding reports whether pe's link to PE r has operations that
// no flush covered yet.
func LinkOutstanding(pe *PE, r int) bool {
	l := pe.peers[r].link
	return l != nil && l.Outstanding()
}

// SyncsFlat reports whether t's barrier is the flat one (syncFlat).
func SyncsFlat(t *Team) bool { return t.flat }
