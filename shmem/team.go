package shmem

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/goshmem/goshmem/heap"
	"github.com/goshmem/goshmem/internal/testhook"
)

// Team is an ordered subset of the job's PEs with its own numbering
// (0..NPEs()-1) and its own synchronisation state: a slot of barrier
// flags in the reserved region of every member's heap. Teams are created
// collectively by splitting a parent team; up to heap.MaxTeams (256)
// teams, including the world and shared teams, may be alive at once.
//
// The collective calls on one team (Sync, Split, Split2D, Destroy) must
// be made by every member in the same order; a PE's goroutines may share
// a team, and their calls on it are serialised.
type Team struct {
	pe         *PE
	slot       int
	members    []int   // world ranks, in team order
	me         int     // this PE's index in members
	predefined bool    // world and shared: never destroyed by the user
	alg        syncAlg // the team's barrier (syncAlgorithm), the same on every member

	mu        sync.Mutex    // serialises this PE's collectives on the team; guards epoch
	epoch     uint64        // barriers completed on the team by this PE
	splits    uint64        // team-creating calls on the team by this PE
	calls     atomic.Uint64 // under SHMEM_DEBUG: collective calls entered on the team (debugorder.go)
	destroyed atomic.Bool
	coll      block // the collective area (team_coll.go), never freed
	collState any   // the collective package's state of the team (CollectiveState), under mu
}

func newTeam(pe *PE, slot int, members []int) *Team {
	t := &Team{pe: pe, slot: slot, members: members, me: -1}
	t.coll = block{pe: pe, off: heap.TeamSlotOff(slot) + collAreaOff, size: collAreaLen}
	mapped := true
	for i, w := range members {
		if w == pe.rank {
			t.me = i
		}
		mapped = mapped && pe.peers[w].mem != nil
	}
	t.alg = syncAlgorithm(len(members), mapped)
	return t
}

// World is the team of every PE of the job (TEAM_WORLD).
// It is nil for a nil PE.
func (pe *PE) World() *Team {
	if pe == nil {
		return nil
	}
	return pe.world
}

// Shared is the team of the PEs whose heaps this PE maps, this PE
// included (TEAM_SHARED).
// It is nil for a nil PE.
func (pe *PE) Shared() *Team {
	if pe == nil {
		return nil
	}
	return pe.shared
}

// MyPE is this PE's number in the team.
func (t *Team) MyPE() int {
	if t == nil {
		return -1
	}
	return t.me
}

// NPEs is the number of PEs in the team.
func (t *Team) NPEs() int {
	if t == nil {
		return 0
	}
	return len(t.members)
}

// Translate maps PE number pe of team t to its number in team to; -1 when
// pe is not in t or not in to.
func (t *Team) Translate(pe int, to *Team) int {
	if t == nil || to == nil || pe < 0 || pe >= len(t.members) {
		return -1
	}
	w := t.members[pe]
	if to.predefined && to.slot == 0 {
		return w
	}
	for i, m := range to.members {
		if m == w {
			return i
		}
	}
	return -1
}

// Sync waits until every member of the team has reached it (no Quiet).
func (t *Team) Sync() error {
	if t == nil {
		return fmt.Errorf("shmem: Sync on a nil team: %w", ErrInvalid)
	}
	pe := t.pe
	if t == pe.world && pe.checked() {
		return pe.SyncAll() // the world's checked Sync is SyncAll's agreement
	}
	if err := t.lockCall(); err != nil {
		return err
	}
	defer t.mu.Unlock()
	if err := pe.brokenErr(); err != nil {
		return err
	}
	return t.syncLocked()
}

// sync is the team's barrier for a caller already inside the PE (an
// entered call): it takes the team's lock but checks nothing of the
// PE's state.
func (t *Team) sync() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.syncLocked()
}

// syncFinal is Finalize's barrier on the world team: sync, with every
// flag it stores marked (finalMark), so that a member in another barrier
// of the same epoch fails with ErrAsymmetric instead of leaving.
func (t *Team) syncFinal() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.syncMarked(finalMark)
}

// syncLocked is the team's barrier, the one syncAlgorithm chose when the
// team was created; the choice never changes, and every member makes the
// same one, so every member of a team runs the same barrier.
func (t *Team) syncLocked() error { return t.syncMarked(0) }

// syncMarked is syncLocked storing the epoch with mark (0, or finalMark
// for Finalize's barrier) into every flag.
func (t *Team) syncMarked(mark uint64) error {
	pe := t.pe
	if t.destroyed.Load() {
		return fmt.Errorf("shmem: team (slot %d) is destroyed: %w", t.slot, ErrFinalized)
	}
	n := len(t.members)
	if n == 1 {
		return pe.alive()
	}
	t.debugEnter()
	t.epoch++
	e := t.epoch | mark
	var err error
	switch t.alg {
	case syncFlatAlg:
		err = t.syncFlat(e)
	case syncGatherAlg:
		err = t.syncGather(e)
	default:
		err = t.syncDissemination(e)
	}
	return t.orderErr(err)
}

// mismatch is the error of this member's barrier e (marked when it is
// Finalize's) that found member j's flag of the same epoch from a barrier
// of the other kind. No later collective of the team can pair up, so the
// job is broken on this PE (markLost): its later calls and its Finalize
// fail at once, and its peers learn it when it leaves (watch, departed).
func (t *Team) mismatch(e uint64, j int) error {
	pe := t.pe
	var err error
	if e&finalMark != 0 {
		err = fmt.Errorf("shmem: PE %d's Finalize met PE %d in a barrier or collective allocation that this PE did not make (mismatched collective calls): %w",
			pe.rank, t.members[j], ErrAsymmetric)
	} else {
		err = fmt.Errorf("shmem: PE %d's barrier %d met PE %d's Finalize: this PE made a barrier or collective allocation that PE %d did not (mismatched collective calls): %w",
			pe.rank, e, t.members[j], t.members[j], ErrAsymmetric)
	}
	pe.markLost(err)
	return err
}

// gaveUp reports whether member j, whose flag member me is waiting for
// in barrier e, has begun Finalize (its bit in this PE's finalizing
// bitmap, announceFinalize): then every flag it stored in its earlier
// barriers is here, and if this barrier's is not, it will never come.
// Finalize's own barrier (e marked) does not ask: its members set their
// bits before they store its flags.
func (t *Team) gaveUp(j int, e uint64) bool {
	return e&finalMark == 0 && t.pe.finalizing(t.members[j])
}

// reach is step s of this member's barrier (testhook.Step): before the
// flat barrier's stores, before each dissemination round's store, before
// a gather member's store and, on the gather's root, before its waits
// (0) and before its release (1).
func (t *Team) reach(s int) {
	if h := testhook.Step.Load(); h != nil {
		(*h)(t.pe.rank, s)
	}
}

// A team's barrier algorithm.
type syncAlg uint8

const (
	syncDisseminationAlg syncAlg = iota // syncDissemination
	syncFlatAlg                         // syncFlat
	syncGatherAlg                       // syncGather
)

func (a syncAlg) String() string {
	switch a {
	case syncFlatAlg:
		return "flat"
	case syncGatherAlg:
		return "gather"
	}
	return "dissemination"
}

// syncAlgorithm is the barrier of a team of n members, mapped when every
// member's heap is mapped here (so, the same on every member: they all
// map each other). It depends on nothing else, so every member chooses
// the same:
//
//   - mapped, at most flatSyncMax members: syncFlat (one wait; stores
//     into mapped memory are cheap);
//   - not mapped (a member is reached over TCP), 3 to gatherSyncMax
//     members: syncGather, 2(n-1) messages where dissemination sends
//     n*ceil(log2 n) (6 against 8 for 4 members);
//   - otherwise syncDissemination (2 members: one flag each way, both
//     at once, where a gather would send one after the other).
func syncAlgorithm(n int, mapped bool) syncAlg {
	switch {
	case mapped && n <= flatSyncMax:
		return syncFlatAlg
	case !mapped && n >= 3 && n <= gatherSyncMax:
		return syncGatherAlg
	}
	return syncDisseminationAlg
}

// flatSyncMax is the largest team that syncs flat. A flat barrier costs
// each member n-1 stores into mapped memory and one wait; dissemination
// costs ceil(log2 n) waits in a row. When PEs outnumber cores every wait
// that is not yet satisfied is a hand-over of the CPU, so one wait is
// what counts (4 PEs on 2 cores: docs/collectives.md).
const flatSyncMax = 16

// syncFlat is the flat barrier: the member at index i stores the epoch
// into flag i of every other member (starting with member i+1, so that no
// member is written by all at once), then waits until its own flags j,
// each written only by member j, all reach the epoch (syncReached, as in
// syncDissemination). A member leaves only after seeing every other
// member's store of this epoch, which that member made inside this
// barrier; stores never wait, so no member is stuck while all enter.
func (t *Team) syncFlat(e uint64) error {
	pe := t.pe
	n := len(t.members)
	mine := heap.FlagOff(t.slot, t.me)
	t.reach(0)
	for s := 1; s < n; s++ {
		if err := pe.storeWord(t.members[flatTo(n, t.me, s)], mine, e); err != nil {
			return pe.goneErr(err)
		}
	}
	// next is the first member whose flag has not been seen at the epoch:
	// the waits resume there rather than rescanning. First a short spin of
	// plain loads: on one host the last flag usually lands within it, and
	// the wait (its closures, its calls) is then not set up at all. Not
	// when the PEs outnumber the CPUs: there the member it waits for may
	// be off its CPU, and the wait yields at once.
	next := 0
	for i := 0; i < spinBetween && next < n && !pe.oversub; i++ {
		for next < n && (next == t.me || syncReached(t.flag(next), e)) {
			next++
		}
	}
	if next < n {
		if err := t.syncFlatWait(e, next); err != nil {
			return err
		}
	}
	for j := range n {
		if j != t.me && syncMismatch(t.flag(j), e) {
			return t.mismatch(e, j)
		}
	}
	return nil
}

// flag is this member's barrier flag j (of member j, or of round j).
func (t *Team) flag(j int) uint64 { return heap.Load64(t.pe.mem, heap.FlagOff(t.slot, j)) }

// syncFlatWait is the flat barrier's wait once its spin is over: until
// every flag from member next on reaches epoch e, or a member whose flag
// is missing has begun Finalize without this barrier.
func (t *Team) syncFlatWait(e uint64, next int) error {
	pe := t.pe
	n := len(t.members)
	cond := func() bool {
		next = flatWaiting(n, t.me, next, e, t.flag)
		return next == n || t.gaveUp(next, e)
	}
	what := func() string {
		return fmt.Sprintf("barrier %d of a %d-PE team (flat: PE %d)", e&^finalMark, n, t.members[min(next, n-1)])
	}
	for {
		if err := pe.await(heap.FlagOff(t.slot, 0), uint64(n)*heap.FlagStride, cond, what); err != nil {
			return err
		}
		if next == n {
			return nil
		}
		if !syncReached(t.flag(next), e) {
			return pe.missedErr(t.members[next], what())
		}
		// Its flag came after the look that saw its bit: wait on.
	}
}

// The flat barrier's schedule and wait rule, as pure functions, so the
// explorer (flatsync_explore_test.go) drives the barrier's own.

// flatTo is the member that member me of an n-member team signals s-th
// (s = 1..n-1) in a flat barrier: its right-hand neighbours in turn.
func flatTo(n, me, s int) int { return (me + s) % n }

// flatWaiting is the first member j >= from, other than me, whose flag
// (flag(j), the word only member j stores) does not yet let member me
// leave barrier e; n when every one does.
func flatWaiting(n, me, from int, e uint64, flag func(j int) uint64) int {
	for j := from; j < n; j++ {
		if j != me && !syncReached(flag(j), e) {
			return j
		}
	}
	return n
}

// syncDissemination is a dissemination barrier: in round r the member at
// index i stores the barrier's epoch into round r's flag on member i+2^r
// and waits until its own round-r flag, written only by member i-2^r,
// reaches the epoch. ceil(log2 n) rounds (syncRounds, syncRound); no
// word is written by two PEs. Flags only grow, and a wait is for flag >=
// epoch (syncReached), so a fast member already in the next barrier
// cannot confuse a slow one.
func (t *Team) syncDissemination(e uint64) error {
	pe := t.pe
	n := len(t.members)
	for r := range syncRounds(n) {
		to, from := syncRound(n, t.me, r)
		off := heap.FlagOff(t.slot, r)
		t.reach(r)
		if err := pe.storeWord(t.members[to], off, e); err != nil {
			return pe.goneErr(err)
		}
		pfrom := t.members[from]
		what := func() string {
			return fmt.Sprintf("barrier %d of a %d-PE team (round %d: PE %d)", e&^finalMark, n, r, pfrom)
		}
		if err := pe.awaitFrom(pfrom, off, 8, func() bool { return syncReached(heap.Load64(pe.mem, off), e) || t.gaveUp(from, e) }, what); err != nil {
			return err
		}
		if !syncReached(heap.Load64(pe.mem, off), e) {
			return pe.missedErr(pfrom, what())
		}
		if syncMismatch(heap.Load64(pe.mem, off), e) {
			// The later rounds' stores still go out (their waits do
			// not), so that the members waiting for them see the
			// mismatch too rather than wait for this PE to leave.
			for r2 := r + 1; r2 < syncRounds(n); r2++ {
				to2, _ := syncRound(n, t.me, r2)
				pe.storeWord(t.members[to2], heap.FlagOff(t.slot, r2), e)
			}
			return t.mismatch(e, from)
		}
	}
	return nil
}

// gatherSyncMax is the largest team that syncs by gather and release
// when a member is reached over TCP. Over TCP a message costs its sender
// a write that, on loopback, also runs the receiver's side of TCP
// (about 6 µs here) and its receiver a read: when the PEs outnumber the
// cores the barrier is bound by the CPU time of its messages, and a
// gather sends fewer of them (docs/performance.md, "The 4-PE TCP
// barrier: gather and release"). The root's n-1 reads and n-1 writes
// come one after another, so large teams disseminate.
const gatherSyncMax = 8

// syncGather is the gather-and-release barrier: every member other than
// the root (member 0) stores the epoch into its own gather flag on the
// root (gatherFlag), then waits until its release flag (flag 0), stored
// only by the root, reaches the epoch; the root waits until every gather
// flag of its own reaches the epoch (gatherWaiting), then stores the
// epoch into every other member's release flag, in member order, and
// leaves. The root releases only after seeing every member's store of
// this epoch, made inside this barrier, and a member leaves only after
// the root's release of it; epochs rise by one per barrier and flags
// only grow (syncReached), so a store of a later barrier lets nobody out
// of an earlier one early, and one of an earlier barrier lets nobody go.
// Every store into a member's flags is waited for by that member, as
// releaseSlot needs.
func (t *Team) syncGather(e uint64) error {
	pe := t.pe
	n := len(t.members)
	t.reach(0)
	if t.me != 0 {
		if err := pe.storeWord(t.members[0], heap.FlagOff(t.slot, gatherFlag(t.me)), e); err != nil {
			return pe.goneErr(err)
		}
		off := heap.FlagOff(t.slot, 0)
		root := t.members[0]
		what := func() string {
			return fmt.Sprintf("barrier %d of a %d-PE team (gather: release by PE %d)", e&^finalMark, n, root)
		}
		if err := pe.awaitFrom(root, off, 8, func() bool { return syncReached(heap.Load64(pe.mem, off), e) || t.gaveUp(0, e) }, what); err != nil {
			return err
		}
		if !syncReached(heap.Load64(pe.mem, off), e) {
			return pe.missedErr(root, what())
		}
		if syncMismatch(heap.Load64(pe.mem, off), e) {
			return t.mismatch(e, 0)
		}
		return nil
	}
	// The root waits for the first member whose flag has not arrived,
	// reading that member's link at every look (awaitFrom: the others'
	// every 20 µs), until it has; then for the next one. Flags only grow,
	// so when the last wait ends every flag has arrived. A flag that came
	// meanwhile on a later member's link is read at that member's wait's
	// first look.
	flag := func(j int) uint64 { return heap.Load64(pe.mem, heap.FlagOff(t.slot, gatherFlag(j))) }
	for j := gatherWaiting(n, 1, e, flag); j < n; j = gatherWaiting(n, j, e, flag) {
		from := t.members[j]
		what := func() string {
			return fmt.Sprintf("barrier %d of a %d-PE team (gather: PE %d)", e&^finalMark, n, from)
		}
		if err := pe.awaitFrom(from, heap.FlagOff(t.slot, gatherFlag(j)), 8, func() bool { return gatherWaiting(n, j, e, flag) > j || t.gaveUp(j, e) }, what); err != nil {
			return err
		}
		if gatherWaiting(n, j, e, flag) == j {
			return pe.missedErr(from, what())
		}
	}
	// A member whose barrier is of the other kind is released all the
	// same, with this barrier's mark, so that it sees the mismatch too.
	bad := -1
	for j := n - 1; j >= 1; j-- {
		if syncMismatch(flag(j), e) {
			bad = j
		}
	}
	t.reach(1)
	for j := 1; j < n; j++ {
		if err := pe.storeWord(t.members[j], heap.FlagOff(t.slot, 0), e); err != nil {
			return pe.goneErr(err)
		}
	}
	if bad >= 0 {
		return t.mismatch(e, bad)
	}
	return nil
}

// The gather barrier's flags and wait rule, as pure functions, so the
// explorer (gathersync_explore_test.go) drives the barrier's own.

// gatherFlag is the flag on the root that member j (1..n-1) stores into;
// flag 0 of every member but the root is its release flag.
func gatherFlag(j int) int { return j }

// gatherWaiting is the first member j >= from (from >= 1) whose gather
// flag (flag(j)) does not yet let the root leave barrier e's gather; n
// when every one does. The gather flags are laid out as the flat
// barrier's (flag j on the root is stored only by member j), so this is
// flatWaiting's rule for member 0.
func gatherWaiting(n, from int, e uint64, flag func(j int) uint64) int {
	return flatWaiting(n, 0, max(from, 1), e, flag)
}

// goneErr turns the error of an operation of a barrier or collective
// call on the link of a remote peer that said goodbye into the job's
// error: a collective with a PE that has finalized while this one runs
// cannot complete (checkRemoteGone). A lost link's error breaks the job
// here and now: the link's report of the loss (netmesh's OnLost, which
// does the same) may come from another goroutine after this call has
// returned, and the PE's next call must not find the job whole.
func (pe *PE) goneErr(err error) error {
	if errors.Is(err, ErrPeerLost) {
		pe.markLost(err)
		return err
	}
	if errors.Is(err, ErrFinalized) && pe.running() {
		pe.checkRemoteGone()
		if b := pe.brokenErr(); b != nil {
			return fmt.Errorf("shmem: PE %d in a collective call: %v: %w", pe.rank, err, b)
		}
	}
	return err
}

// The scratch words a member publishes for a team-creating call.
const (
	descWords   = 6 // seq, kind, three arguments, validity
	bitmapWords = heap.MaxTeams / 64
	bitmapOff   = 64 // inside the scratch area
	kindSplit   = 1
	kindSplit2D = 2
)

// exchange publishes this member's call descriptor and its free-slot
// bitmap in the team's scratch, reads every member's, and returns
// ErrAsymmetric if any descriptor differs, or else the slots free on
// every member. Two barriers: the first makes the scratch readable, the
// second keeps it from being overwritten while others still read.
func (t *Team) exchange(desc [descWords]uint64) ([bitmapWords]uint64, error) {
	pe := t.pe
	var free [bitmapWords]uint64
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.destroyed.Load() {
		return free, fmt.Errorf("shmem: team (slot %d) is destroyed: %w", t.slot, ErrFinalized)
	}
	sc := heap.ScratchOff(t.slot)
	for i, w := range desc {
		heap.Store64(pe.mem, sc+uint64(8*i), w)
	}
	pe.teamMu.Lock()
	for i, used := range pe.teamUsed {
		heap.Store64(pe.mem, sc+bitmapOff+uint64(8*i), ^used)
	}
	pe.teamMu.Unlock()
	if err := t.syncLocked(); err != nil {
		return free, err
	}
	for i := range free {
		free[i] = ^uint64(0)
	}
	var bad error
	for idx, w := range t.members {
		var got [descWords]uint64
		var bm [bitmapWords]uint64
		if err := pe.getWords(w, sc, got[:]); err != nil {
			return free, err
		}
		if err := pe.getWords(w, sc+bitmapOff, bm[:]); err != nil {
			return free, err
		}
		if got != desc && bad == nil {
			bad = fmt.Errorf("shmem: team-creating call %d: member %d (PE %d) passed kind %d args (%d, %d, %d), member %d passed kind %d args (%d, %d, %d): %w",
				desc[0], t.me, pe.rank, desc[1], int64(desc[2]), int64(desc[3]), int64(desc[4]),
				idx, got[1], int64(got[2]), int64(got[3]), int64(got[4]), ErrAsymmetric)
		}
		for i := range free {
			free[i] &= bm[i]
		}
	}
	if err := t.syncLocked(); err != nil {
		return free, err
	}
	return free, bad
}

// takeSlots picks the k lowest slots free on every member.
func takeSlots(free [bitmapWords]uint64, k int) ([]int, bool) {
	var got []int
	for i, w := range free {
		for w != 0 && len(got) < k {
			b := bits.TrailingZeros64(w)
			got = append(got, i*64+b)
			w &^= 1 << b
		}
	}
	return got, len(got) == k
}

// useSlot marks t's slot in use on this PE and records t as the
// PE's team on it.
func (pe *PE) useSlot(t *Team) {
	s := t.slot
	pe.teamMu.Lock()
	pe.teamUsed[s/64] |= 1 << (s % 64)
	if pe.teams == nil {
		pe.teams = make(map[int]*Team)
	}
	pe.teams[s] = t
	pe.teamMu.Unlock()
}

func (pe *PE) releaseSlot(s int) {
	// Zero this member's flags so the next team on the slot starts from
	// epoch 0. Every signal of the last barrier has arrived (the member
	// waited for each), and nobody signals a destroyed team.
	for r := 0; r < heap.MaxRounds; r++ {
		heap.Store64(pe.mem, heap.FlagOff(s, r), 0)
	}
	pe.clearCollective(s)
	heap.Store64(pe.mem, heap.TeamSlotOff(s)+heap.DebugEnteredOff, 0)
	pe.teamMu.Lock()
	pe.teamUsed[s/64] &^= 1 << (s % 64)
	delete(pe.teams, s)
	pe.teamMu.Unlock()
}

// splitSeq numbers a PE's team-creating calls on a team, so descriptors
// of different calls never match by accident.
func (t *Team) nextSeq() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.splits++
	return t.splits
}

// Split creates the team of the members of t at indices start,
// start+stride, ..., size of them (stride may be negative, not zero
// unless size is 1). It is collective over t: every member calls it with
// the same arguments and gets the new team, or nil if it is not a member.
// Invalid arguments fail on every member; different arguments on
// different members fail with ErrAsymmetric on every member.
func (t *Team) Split(start, stride, size int) (*Team, error) {
	if t == nil {
		return nil, fmt.Errorf("shmem: Split of a nil team: %w", ErrInvalid)
	}
	pe := t.pe
	if err := pe.enter(); err != nil {
		return nil, err
	}
	defer pe.leave()
	if err := pe.alive(); err != nil {
		return nil, err
	}
	n := len(t.members)
	var argErr error
	if size < 1 || start < 0 || start >= n || (stride == 0 && size > 1) {
		argErr = fmt.Errorf("shmem: Split(start %d, stride %d, size %d) of a %d-PE team: %w", start, stride, size, n, ErrInvalid)
	} else if !splitFits(start, stride, size, n) {
		argErr = fmt.Errorf("shmem: Split(start %d, stride %d, size %d) of a %d-PE team reaches past its members: %w", start, stride, size, n, ErrBadPE)
	}
	valid := uint64(1)
	if argErr != nil {
		valid = 0
	}
	free, err := t.exchange([descWords]uint64{t.nextSeq(), kindSplit, uint64(start), uint64(stride), uint64(size), valid})
	if err != nil {
		return nil, err
	}
	if argErr != nil {
		return nil, argErr
	}
	slots, ok := takeSlots(free, 1)
	if !ok {
		return nil, fmt.Errorf("shmem: Split: no team slot is free on every member (%d teams at most): %w", heap.MaxTeams, ErrHeapExhausted)
	}
	members := make([]int, size)
	in := false
	for k := range members {
		members[k] = t.members[start+k*stride]
		in = in || members[k] == pe.rank
	}
	if !in {
		return nil, nil
	}
	nt := newTeam(pe, slots[0], members)
	pe.useSlot(nt)
	return nt, nil
}

// splitFits reports whether start + k*stride is in [0, n) for every k
// in 0..size-1 (0 <= start < n, size >= 1), without overflow: the last
// member is the farthest one, and |stride| <= (distance to the edge) /
// (size-1) keeps it inside.
func splitFits(start, stride, size, n int) bool {
	if size == 1 || stride == 0 {
		return true
	}
	k := size - 1
	if stride > 0 {
		return stride <= (n-1-start)/k
	}
	if stride == math.MinInt {
		return false
	}
	return -stride <= start/k
}

// Split2D splits t into a grid with rows of xRange members: x is this
// PE's row (members of t with the same index / xRange) and y its column
// (the same index % xRange). Collective over t. An xRange above the team
// size is taken as the team size.
func (t *Team) Split2D(xRange int) (x, y *Team, err error) {
	if t == nil {
		return nil, nil, fmt.Errorf("shmem: Split2D of a nil team: %w", ErrInvalid)
	}
	pe := t.pe
	if err := pe.enter(); err != nil {
		return nil, nil, err
	}
	defer pe.leave()
	if err := pe.alive(); err != nil {
		return nil, nil, err
	}
	n := len(t.members)
	var argErr error
	if xRange < 1 {
		argErr = fmt.Errorf("shmem: Split2D(xRange %d): %w", xRange, ErrInvalid)
	}
	valid := uint64(1)
	if argErr != nil {
		valid = 0
	}
	free, err := t.exchange([descWords]uint64{t.nextSeq(), kindSplit2D, uint64(xRange), 0, 0, valid})
	if err != nil {
		return nil, nil, err
	}
	if argErr != nil {
		return nil, nil, argErr
	}
	xRange = min(xRange, n)
	slots, ok := takeSlots(free, 2)
	if !ok {
		return nil, nil, fmt.Errorf("shmem: Split2D: fewer than two team slots are free on every member (%d teams at most): %w", heap.MaxTeams, ErrHeapExhausted)
	}
	row, col := t.me/xRange, t.me%xRange
	var xm, ym []int
	for i := row * xRange; i < min(row*xRange+xRange, n); i++ {
		xm = append(xm, t.members[i])
	}
	for i := col; i < n; i += xRange {
		ym = append(ym, t.members[i])
	}
	x, y = newTeam(pe, slots[0], xm), newTeam(pe, slots[1], ym)
	pe.useSlot(x)
	pe.useSlot(y)
	return x, y, nil
}

// Destroy releases the team (collective over its members), and frees the
// objects still allocated over it (TeamMalloc). The world and shared
// teams cannot be destroyed.
func (t *Team) Destroy() error {
	if t == nil {
		return fmt.Errorf("shmem: Destroy of a nil team: %w", ErrInvalid)
	}
	if t.predefined {
		return fmt.Errorf("shmem: the world and shared teams cannot be destroyed: %w", ErrInvalid)
	}
	if err := t.pe.enter(); err != nil {
		return err
	}
	defer t.pe.leave()
	// Freeing the team's objects moves this PE's floor: an allocation
	// call (teamheap.go), taken before the team's mutex.
	t.pe.th.order.Lock()
	defer t.pe.th.order.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.destroyed.Load() {
		return fmt.Errorf("shmem: team (slot %d) is already destroyed: %w", t.slot, ErrFinalized)
	}
	if err := t.syncLocked(); err != nil {
		return err
	}
	t.destroyed.Store(true)
	t.pe.releaseTeamBlocks(t)
	t.pe.releaseSlot(t.slot)
	return nil
}
