package shmem

import "fmt"

// Team contexts (shmem_team_create_ctx, shmem_ctx_get_team): a context
// created from a team takes PE numbers in that team, in every operation
// through a handle bound to it (Via) and in its PEQuiet. It is otherwise
// a context like any other: its Quiet, Fence and PEQuiet cover only the
// links its own operations used (context.go).

// NewContext creates a context whose PE numbers are t's: an operation
// through a handle bound to it with Via addresses PE i of t, and
// c.PEQuiet(i) completes what went to that PE. A target outside t is
// ErrBadPE. Operations through it fail with ErrFinalized once t is
// destroyed; its Quiet and Close still complete what it issued before.
func (t *Team) NewContext() (*Context, error) {
	if t == nil {
		return nil, fmt.Errorf("shmem: NewContext of a nil team: %w", ErrInvalid)
	}
	pe := t.pe
	if !pe.running() {
		return nil, pe.finalizedErr()
	}
	if err := pe.alive(); err != nil {
		return nil, err
	}
	if t.destroyed.Load() {
		return nil, fmt.Errorf("shmem: NewContext of a destroyed team (slot %d): %w", t.slot, ErrFinalized)
	}
	return pe.newContext(t)
}

// rank maps target, a PE number of c's team, to its world rank. Out of
// range is ErrBadPE; the world team's numbers are the world ranks, which
// pe.peer checks.
func (c *Context) rank(target int) (int, error) {
	t := c.team
	if t == c.pe.world {
		return target, nil
	}
	if t.destroyed.Load() {
		return 0, fmt.Errorf("shmem: context %d: its team (slot %d) is destroyed: %w", c.id, t.slot, ErrFinalized)
	}
	return c.teamRank(target)
}

// teamRank is rank without the destroyed check (PEQuiet of a destroyed
// team's context still completes what it issued).
func (c *Context) teamRank(target int) (int, error) {
	t := c.team
	if t == c.pe.world {
		return target, nil
	}
	if uint(target) >= uint(len(t.members)) {
		return 0, fmt.Errorf("shmem: PE %d of a %d-PE team (context %d): the team has PEs 0..%d: %w",
			target, len(t.members), c.id, len(t.members)-1, ErrBadPE)
	}
	return t.members[target], nil
}
