package shmem

import (
	"fmt"
	"sync/atomic"
)

// Context is an independent stream of operations with its own ordering
// and completion: operations through handles bound with Sym.Via(c) are
// ordered by c.Fence and completed by c.Quiet or c.Close, independently
// of the PE's default context. A typical use is one context per goroutine.
type Context struct {
	pe     *PE
	id     uint64
	closed atomic.Bool
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
	return &Context{pe: pe, id: pe.ctxSeq.Add(1)}, nil
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

// Fence orders the context's operations to each target.
//
// Contexts share each remote link's single ordered stream, so a
// context's Fence and Quiet order and complete the operations of every
// context to the links they touch: more than asked, never less.
func (c *Context) Fence() error {
	if err := c.check(); err != nil {
		return err
	}
	return c.pe.Fence()
}

// Quiet completes every operation issued through the context.
func (c *Context) Quiet() error {
	if err := c.check(); err != nil {
		return err
	}
	if err := c.pe.enter(); err != nil {
		return err
	}
	defer c.pe.leave()
	return c.pe.flushAll()
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
