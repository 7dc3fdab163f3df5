package shmem

// The dissemination barrier's schedule (Team.syncDissemination), as pure
// functions so the explorer in explore_test.go drives the same schedule
// as the barrier itself.

// syncRounds is the number of rounds of the barrier of an n-member team:
// ceil(log2 n), 0 for one member.
func syncRounds(n int) int {
	r := 0
	for d := 1; d < n; d <<= 1 {
		r++
	}
	return r
}

// syncRound is round r of member me of an n-member team: it stores the
// epoch into round r's flag on member to, then waits until its own
// round-r flag, stored only by member from, reaches the epoch.
func syncRound(n, me, r int) (to, from int) {
	d := 1 << r
	return (me + d) % n, (me - d%n + n) % n
}

// syncReached reports whether a round's flag holding flag lets the
// member in barrier epoch go on. Flags only grow and epochs rise by one
// per barrier, so a flag already stored by a member in a later barrier
// also lets it go, and one from an earlier barrier does not.
func syncReached(flag, epoch uint64) bool { return flag >= epoch }
