package shmem

import (
	"fmt"

	"github.com/goshmem/goshmem/heap"
)

// The collective area of a team slot: the last 128512 bytes of each
// member's team slot (heap.TeamSlotSize), which the runtime itself does
// not use. The collective package owns its layout (collective/area.go:
// control words, then message buffers whose sequence words sit in the
// buffers' own cache lines); shmem only hands it out, serialises its
// users and zeroes it when the slot is released, so a team created later
// on the same slot starts from zero on every member.
//
//	offset in the slot   width   meaning
//	2560                 128512   collective area, laid out by package collective
const (
	collAreaOff = heap.TeamScratchOff + heap.TeamScratchLen // 2560
	collAreaLen = heap.TeamSlotSize - collAreaOff           // 128512
)

// CollectiveArea is the team's collective area on this PE, at the same
// offset on every member, 64-byte aligned and zero when the team is
// created, as two views of the same 128512 bytes: words, 16064 uint64 (for
// the wait, atomic and signal calls), and bytes (for puts and reads).
// Only the collective package should use it. Other members reach their
// copies through the usual RMA, atomic and wait calls with their world
// PE numbers. The area is not in the allocator's heap and is never
// freed: the slot is reserved for the lifetime of the segment. The
// handles share one block, made with the team, so a call costs no
// allocation.
func (t *Team) CollectiveArea() (words Sym[uint64], bytes Sym[uint8]) {
	b := &t.coll
	return Sym[uint64]{b: b, off: b.off, n: collAreaLen / 8},
		Sym[uint8]{b: b, off: b.off, n: collAreaLen}
}

// CollectiveState is where the collective package keeps what it derives
// once from the team (the local views of its area, the layout of its
// message buffers), for the team's lifetime, so that a call does not
// derive it again. Only the collective package should use it, and only
// between BeginCollective and EndCollective, whose lock guards it.
func (t *Team) CollectiveState() *any { return &t.collState }

// BeginCollective starts one collective call of this PE on the team: it
// takes the team's lock, which orders the call against this PE's other
// goroutines' collectives, Split, Split2D and Destroy on the team (Sync
// waits too) and admits the call into the PE (lifecycle.go: Finalize
// does not release the memory the call reads through Local and Ptr
// views until EndCollective), and fails if the team is destroyed or the
// PE finalized or broken. On success the caller must call EndCollective
// once, from the same call; it must not call Sync, Split or Destroy on t
// in between.
func (t *Team) BeginCollective() error {
	if t == nil {
		return fmt.Errorf("shmem: collective on a nil team: %w", ErrInvalid)
	}
	if err := t.lockCall(); err != nil {
		return err
	}
	if err := t.pe.brokenErr(); err != nil {
		t.mu.Unlock()
		return err
	}
	if t.destroyed.Load() {
		t.mu.Unlock()
		return fmt.Errorf("shmem: team (slot %d) is destroyed: %w", t.slot, ErrFinalized)
	}
	t.debugEnter()
	return nil
}

// EndCollective ends the call BeginCollective started; err is the
// call's result, which it returns, under SHMEM_DEBUG with ErrAsymmetric
// added when a timeout came of PEs making their collective calls on
// different teams in different orders (docs/env.md, SHMEM_DEBUG). An
// ErrFinalized of an operation on the link of a member that said
// goodbye while this PE runs becomes the job's ErrPeerLost, as in a
// barrier (goneErr): no collective with that member can complete.
func (t *Team) EndCollective(err error) error {
	if err == nil { // the common case: nothing to classify
		t.mu.Unlock()
		return nil
	}
	err = t.orderErr(t.pe.goneErr(err))
	t.mu.Unlock()
	return err
}

// WaitCollective waits, inside a collective call on t (between
// BeginCollective and EndCollective), until words[i] >= v, where
// words[i] is a word of this PE's that in this call only team member
// writer stores into (the sequence word of its message, say). It is
// WaitUntil(words, i, CmpGE, v) that also ends when writer has begun
// Finalize with the word still below v: writer made its stores of every
// collective call before its Finalize began (Finalize quiets, then sets
// writer's bit in this PE's finalizing bitmap), so it never made this
// call. That is ErrAsymmetric, and breaks the job on this PE, as a
// barrier that meets Finalize does (docs/memory-model.md, "Barriers").
// Under SHMEM_DEBUG Finalize sets no bits and this is WaitUntil. A
// writer outside t is ErrBadPE.
func (t *Team) WaitCollective(words Sym[uint64], i int, v uint64, writer int) error {
	if t == nil {
		return fmt.Errorf("shmem: WaitCollective on a nil team: %w", ErrInvalid)
	}
	if uint(writer) >= uint(len(t.members)) {
		return fmt.Errorf("shmem: WaitCollective for member %d of a %d-member team: %w", writer, len(t.members), ErrBadPE)
	}
	pe, err := localCheck(words, CmpGE)
	if err != nil {
		return err
	}
	defer pe.leave()
	if err := indexCheck(i, words.n); err != nil {
		return err
	}
	w := t.members[writer]
	off := words.off + 8*uint64(i)
	reached := func() bool { return heap.Load64(pe.mem, off) >= v }
	what := func() string {
		return fmt.Sprintf("a collective call on a %d-PE team (word %d at offset %d to reach %d, stored by PE %d)", len(t.members), i, words.off, v, w)
	}
	departed, err := pe.awaitWriter(w, off, 8, reached, what)
	if err != nil || !departed {
		return err
	}
	// The writer's bit, and no store: it never made this call.
	return pe.missedErr(w, what())
}

// awaitWriter is awaitFrom for a wait that only PE from's store can end:
// it also ends, with departed set, once from has begun Finalize with
// cond still false (its bit in this PE's finalizing bitmap comes after
// every store it made before, and wakes every wait of this PE). This
// PE's own Finalize, begun meanwhile on another goroutine, ends it as it
// ends every wait (ErrFinalized), also when both came.
func (pe *PE) awaitWriter(from int, off, n uint64, cond func() bool, what func() string) (departed bool, err error) {
	if !pe.hasRemote && !pe.oversub {
		// The first looks, as awaitFrom's, at the word alone: a
		// same-host writer with a CPU of its own usually lands within
		// them, and a departure waits the few hundred nanoseconds they
		// take.
		for i := 0; i < spinBetween; i++ {
			if cond() {
				return false, nil
			}
		}
	}
	if err := pe.awaitFrom(from, off, n, func() bool { return cond() || pe.finalizing(from) }, what); err != nil {
		return false, err
	}
	if cond() {
		return false, nil
	}
	if err := pe.alive(); err != nil {
		return false, fmt.Errorf("shmem: PE %d waiting for %s: %w", pe.rank, what(), err)
	}
	return true, nil
}

// PE is the PE the team belongs to.
func (t *Team) PE() *PE {
	if t == nil {
		return nil
	}
	return t.pe
}

// WorldPE is the world PE number of member i of the team (Translate to
// the world team without the search), or -1 when i is not a member.
func (t *Team) WorldPE(i int) int {
	if t == nil || uint(i) >= uint(len(t.members)) {
		return -1
	}
	return t.members[i]
}

// clearCollective zeroes this member's collective area of slot s when
// the slot is released. Every message of the team's last collective has
// arrived: each is awaited by its receiver inside the call, and Destroy
// met every member after their last call.
func (pe *PE) clearCollective(s int) {
	off := heap.TeamSlotOff(s) + collAreaOff
	clear(pe.mem[off : off+collAreaLen])
}
