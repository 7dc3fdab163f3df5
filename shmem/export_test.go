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

// SyncsFlat reports whether t's barrier is the flat one (syncFlat).
func SyncsFlat(t *Team) bool { return t.alg == syncFlatAlg }

// SyncAlgorithm names t's barrier (syncAlgorithm).
func SyncAlgorithm(t *Team) string { return t.alg.String() }

// ContextOutstanding reports whether c's own stream to world PE r has
// operations that no flush covered yet (false when it has none).
func ContextOutstanding(c *Context, r int) bool {
	if c.chans == nil {
		return false
	}
	ch := c.chans[r].Load()
	return ch != nil && ch.Outstanding()
}

// ContextSlot is the slot of c's stream to world PE r at netmesh (-1:
// none of its own).
func ContextSlot(c *Context, r int) int {
	if c.chans == nil {
		return -1
	}
	if ch := c.chans[r].Load(); ch != nil {
		return ch.Slot()
	}
	return -1
}

// ContextStreams reports, per world rank, whether c opened a stream of
// its own to that PE.
func ContextStreams(c *Context) []bool {
	own := make([]bool, c.pe.npes)
	for r := range c.chans {
		if ch := c.chans[r].Load(); ch != nil {
			own[r] = ch.Own()
		}
	}
	return own
}

// CPUUnion is cpuUnion, for TestCPUUnion.
var CPUUnion = cpuUnion

// ProcsFor is procsFor, for TestProcsFor.
var ProcsFor = procsFor

// FenceMode reports pe's choice of chooseFence: whether its puts skip
// the store-load fence, and whether its sleeps run the asymmetric one.
func FenceMode(pe *PE) (asym, asymSleep bool) { return pe.asym, pe.asymSleep }
