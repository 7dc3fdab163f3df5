package shmem

import (
	"errors"
	"fmt"

	"github.com/goshmem/goshmem/heap"
)

// SHMEM_DEBUG's check of the order of collective calls across teams.
//
// Two PEs that are both members of teams t and u, where one calls t's
// k-th collective and then u's j-th and the other the other way round,
// wait for each other forever: each is inside a call the other has not
// made. Their calls never meet on one set of words, so agree and the
// collectives' descriptors cannot see it (Malloc, a world call, against
// a t.Sync is the common case). The words below let a PE whose call
// timed out tell that deadlock apart from a peer that is merely slow or
// gone, and say so with ErrAsymmetric.
//
// Under SHMEM_DEBUG each member publishes, per team, how many collective
// calls it has entered on the team (heap.DebugEnteredOff):
// Team.syncLocked, and a call of package collective between
// BeginCollective and EndCollective, are one call each. The count only
// grows, and a PE's calls on one team are serialised by the team's lock.
//
// Why the verdict is never wrong: after this PE's call k on team t timed
// out, orderErr reads a peer m's count E on another team u of both, then
// m's count on t. E above this PE's own count on u says m entered u's
// call E, which this PE has not made; m's count on t, read later, below
// k says m had still not entered t's call k by then. So m made u:E
// before t:k, and this PE t:k before u:E (if ever): they ordered their
// calls differently, which is a fact about calls already made, not about
// timing. (The first PE to time out may have left its call by the time
// the other looks: the counts still tell.) The check runs only once the
// call has failed with ErrTimeout, so it changes which error is
// returned, never whether one is. A PE with several goroutines, one of
// which would make u's call later, is told of the order as it stood at
// its timeout.

// debugEnter counts a collective call on t and publishes the count.
// The caller holds t.mu.
func (t *Team) debugEnter() {
	if !t.pe.cfg.Debug {
		return
	}
	k := t.calls.Add(1)
	heap.Store64(t.pe.mem, heap.TeamSlotOff(t.slot)+heap.DebugEnteredOff, k)
}

// orderErr is err, the error of this PE's current collective call on t,
// wrapped with ErrAsymmetric when, under SHMEM_DEBUG, the call timed out
// and a member of t has made a call on another team of this PE's that
// this PE has not made, but not this call (see above). The caller holds
// t.mu, inside the call.
func (t *Team) orderErr(err error) error {
	pe := t.pe
	if !pe.cfg.Debug || !errors.Is(err, ErrTimeout) {
		return err
	}
	k := t.calls.Load()
	pe.teamMu.Lock()
	others := make([]*Team, 0, len(pe.teams))
	for _, u := range pe.teams {
		if u != t {
			others = append(others, u)
		}
	}
	pe.teamMu.Unlock()
	for _, m := range t.members {
		if m == pe.rank {
			continue
		}
		for _, u := range others {
			if !u.hasMember(m) {
				continue
			}
			var e, mk [1]uint64
			if pe.getWords(m, heap.TeamSlotOff(u.slot)+heap.DebugEnteredOff, e[:]) != nil {
				continue
			}
			j := e[0]
			if u.calls.Load() >= j {
				continue // this PE has made every call on u that m has
			}
			if pe.getWords(m, heap.TeamSlotOff(t.slot)+heap.DebugEnteredOff, mk[:]) != nil || mk[0] >= k {
				continue // m has made this call too
			}
			return fmt.Errorf("%w; SHMEM_DEBUG: PE %d made collective call %d on %s before call %d on %s, and PE %d the other way round: %w",
				err, m, j, u.describe(), k, t.describe(), pe.rank, ErrAsymmetric)
		}
	}
	return err
}

// hasMember reports whether world PE w is a member of t.
func (t *Team) hasMember(w int) bool {
	if t.predefined && t.slot == 0 {
		return w >= 0 && w < t.pe.npes
	}
	for _, m := range t.members {
		if m == w {
			return true
		}
	}
	return false
}

// describe names t in messages.
func (t *Team) describe() string {
	switch {
	case t == t.pe.world:
		return "the world team"
	case t == t.pe.shared:
		return fmt.Sprintf("the shared team (%d PEs)", len(t.members))
	}
	return fmt.Sprintf("the team in slot %d (%d PEs)", t.slot, len(t.members))
}
