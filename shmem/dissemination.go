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
// member in barrier want go on (want: the epoch, with finalMark when the
// barrier is Finalize's). Flags only grow and epochs rise by one per
// barrier, so a flag already stored by a member in a later barrier also
// lets it go, and one from an earlier barrier does not. The mark is left
// out of the comparison; syncMismatch looks at it.
func syncReached(flag, want uint64) bool { return flag&^finalMark >= want&^finalMark }

// finalMark is set in every flag that Finalize's barrier stores (bit 63;
// epochs never reach it). A member leaves a barrier only on flags of the
// same epoch or later, so a member whose barrier of epoch e is Finalize's
// while another's is not (one called a barrier, or an allocation, that
// the other did not) sees a flag of epoch e with the other mark: the
// collective calls were mismatched, and syncMismatch says so on both
// sides, instead of the extra barrier pairing with the others' Finalize
// and returning as if nothing were wrong.
const finalMark = 1 << 63

// syncMismatch reports whether flag, stored in barrier epoch want's
// epoch, was stored by a barrier of the other kind (Finalize's against
// another).
func syncMismatch(flag, want uint64) bool {
	return flag&^finalMark == want&^finalMark && (flag^want)&finalMark != 0
}
