package shmem

import (
	"fmt"
	"sync/atomic"
)

// Context is an independent stream of operations with its own ordering
// and completion: operations through handles bound with Sym.Via(c) are
// ordered by c.Fence and completed by c.Quiet or c.Close, independently
// of the PE's default context. A typical use is one context per goroutine.
//
// Over shared memory an operation is complete when it returns. Over TCP a
// context remembers the links its operations used since its last Quiet,
// and c.Quiet and c.Fence flush those links only: two goroutines with
// contexts of their own that talk to different PEs never wait for each
// other, and none takes a lock of the PE. A link is one ordered stream,
// so a flush of a link c used also covers what other contexts queued on
// that link before it: c.Quiet then waits for those bytes to go ahead of
// its own, never for operations issued after it.
type Context struct {
	pe     *PE
	id     uint64
	team   *Team // whose PE numbers the context's operations take (teamctx.go)
	closed atomic.Bool
	remote []atomic.Bool // by world rank: an operation through c went over that PE's link since c's last Quiet
}

// NewContext creates a context on this PE.
func (pe *PE) NewContext() (*Context, error) {
	if pe == nil {
		return nil, errNilPE("NewContext")
	}
	if !pe.running() {
		return nil, pe.finalizedErr()
	}
	if err := pe.alive(); err != nil {
		return nil, err
	}
	return pe.newContext(pe.world), nil
}

func (pe *PE) newContext(t *Team) *Context {
	return &Context{pe: pe, id: pe.ctxSeq.Add(1), team: t, remote: make([]atomic.Bool, pe.npes)}
}

func (c *Context) check() error {
	if c == nil {
		return fmt.Errorf("shmem: nil context: %w", ErrInvalid)
	}
	if c.closed.Load() {
		return fmt.Errorf("shmem: context %d is closed: %w", c.id, ErrFinalized)
	}
	if !c.pe.running() {
		return c.pe.finalizedErr()
	}
	return c.pe.alive()
}

// Team is the team whose PE numbers the context's operations take
// (shmem_ctx_get_team): the world team for a context from PE.NewContext,
// t for one from t.NewContext.
func (c *Context) Team() *Team {
	if c == nil {
		return nil
	}
	return c.team
}

// Fence orders the context's operations to each target: those issued
// after it reach a target after those issued before.
func (c *Context) Fence() error {
	return c.links(nil, false)
}

// Quiet completes every operation issued through the context.
func (c *Context) Quiet() error {
	return c.links(nil, true)
}

// PEQuiet completes the operations issued through the context to the
// given targets (PE numbers of c.Team(); one outside it is ErrBadPE).
func (c *Context) PEQuiet(targets ...int) error {
	if targets == nil {
		targets = []int{}
	}
	return c.links(targets, true)
}

// links fences (quiet false) or flushes (quiet true) the links that
// operations through c used since its last Quiet: every one, or those of
// targets when targets is not nil.
func (c *Context) links(targets []int, quiet bool) error {
	if err := c.check(); err != nil {
		return err
	}
	pe := c.pe
	if err := pe.enter(); err != nil {
		return err
	}
	defer pe.leave()
	one := func(r int) error {
		// Clear before the flush: an operation queued after this point
		// marks the link again for a later Quiet, and one queued before
		// it is covered by the flush.
		if !quiet {
			if c.remote[r].Load() {
				return pe.peers[r].link.Fence()
			}
			return nil
		}
		if c.remote[r].Swap(false) {
			if err := pe.peers[r].link.Flush(); err != nil {
				c.remote[r].Store(true) // not complete: a later Quiet must try again
				return err
			}
		}
		return nil
	}
	if targets == nil {
		for r := range c.remote {
			if err := one(r); err != nil {
				return err
			}
		}
		return nil
	}
	for _, t := range targets {
		r, err := c.teamRank(t)
		if err != nil {
			return err
		}
		if _, err := pe.peer(r); err != nil {
			return err
		}
		if err := one(r); err != nil {
			return err
		}
	}
	return nil
}

// Close completes the context's operations and releases it. Operations
// through handles bound to it fail with ErrFinalized afterwards.
func (c *Context) Close() error {
	if err := c.check(); err != nil {
		return err
	}
	err := c.Quiet()
	c.closed.Store(true)
	return err
}
