package shmem

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/goshmem/goshmem/heap"
	"github.com/goshmem/goshmem/netmesh"
)

// Context is an independent stream of operations with its own ordering
// and completion: operations through handles bound with Sym.Via(c) are
// ordered by c.Fence and completed by c.Quiet or c.Close, independently
// of the PE's default context. A typical use is one context per goroutine.
//
// Over shared memory an operation is complete when it returns. Over TCP
// a context's operations to a PE travel on a netmesh channel of their
// own: a TCP connection to that PE, opened on the context's first
// operation to it and closed by c.Close (netmesh/chan.go). c.Quiet and
// c.Fence flush the context's channels only, so they never wait for
// another context's operations nor the default context's, and two
// goroutines with contexts of their own share no lock or flush. The
// bound that keeps this true: a PE with PEs on other hosts has at most
// MaxRemoteContexts contexts open at once (netmesh's channel streams per
// link, the wire's slot bound), and NewContext beyond it fails
// (ErrInvalid), as shmem_ctx_create may; a PE whose PEs are all on its
// host opens no channels and has no bound. PE.Quiet, PEQuiet and
// BarrierAll complete the default context's operations only, as
// OpenSHMEM's shmem_quiet and shmem_barrier_all do; Finalize completes
// every context's.
type Context struct {
	pe     *PE
	id     uint64
	team   *Team // whose PE numbers the context's operations take (teamctx.go)
	closed atomic.Bool
	mu     sync.Mutex                // held while a channel opens and while the context closes
	chans  []atomic.Pointer[tcpChan] // by world rank, opened on first use; nil without remote peers (then not in pe.ctxOpen)
}

// tcpChan is a context's route to a PE on another host: a netmesh
// channel, whose atomics take the wire's op codes.
type tcpChan struct{ *netmesh.Channel }

func (ch tcpChan) Atomic(width int, op heap.AtomicOp, off, v, cond uint64) (uint64, error) {
	return ch.Channel.Atomic(width, wireOp(op), off, v, cond)
}

func (ch tcpChan) AtomicNBI(width int, op heap.AtomicOp, off, v, cond uint64, dst *uint64) error {
	return ch.Channel.AtomicNBI(width, wireOp(op), off, v, cond, dst)
}

// route returns the context's route to the remote PE of world rank r,
// opening its channel on first use.
func (c *Context) route(r int) (remoteLink, error) {
	if ch := c.chans[r].Load(); ch != nil {
		return ch, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch := c.chans[r].Load(); ch != nil {
		return ch, nil
	}
	if c.closed.Load() {
		return nil, fmt.Errorf("shmem: context %d is closed: %w", c.id, ErrFinalized)
	}
	tl, ok := c.pe.peers[r].link.(tcpLink)
	if !ok {
		return c.pe.peers[r].link, nil // not a netmesh link: no channels to open
	}
	nc, err := tl.Link.OpenChannel()
	if err != nil {
		return nil, fmt.Errorf("shmem: context %d: opening its stream to PE %d: %w", c.id, r, err)
	}
	ch := &tcpChan{nc}
	c.chans[r].Store(ch)
	return ch, nil
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
	return pe.newContext(pe.world)
}

// MaxRemoteContexts bounds the contexts a PE with PEs on other hosts has
// open at once: each context may open a TCP connection of its own to
// every remote PE it reaches, and a link carries at most
// netmesh.MaxChanStreams such connections per side. Within the bound
// every context has its own connections, so a context's Quiet never
// waits behind another's bytes; NewContext beyond it is ErrInvalid until
// a context is closed.
const MaxRemoteContexts = netmesh.MaxChanStreams

func (pe *PE) newContext(t *Team) (*Context, error) {
	c := &Context{pe: pe, team: t}
	if pe.hasRemote {
		for {
			n := pe.ctxOpen.Load()
			if n >= MaxRemoteContexts {
				return nil, fmt.Errorf("shmem: PE %d has %d contexts open, the most a PE with PEs on other hosts may have (each takes a connection of its own to each remote PE it reaches); close one first: %w",
					pe.rank, n, ErrInvalid)
			}
			if pe.ctxOpen.CompareAndSwap(n, n+1) {
				break
			}
		}
		c.chans = make([]atomic.Pointer[tcpChan], pe.npes)
	}
	c.id = pe.ctxSeq.Add(1)
	return c, nil
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

// links fences (quiet false) or flushes (quiet true) the channels that
// operations through c opened: every one, or those to targets when
// targets is not nil.
func (c *Context) links(targets []int, quiet bool) error {
	if err := c.check(); err != nil {
		return err
	}
	pe := c.pe
	if err := pe.enter(); err != nil {
		return err
	}
	defer pe.leave()
	if quiet {
		pe.storeLoadFence()
	}
	one := func(r int) error {
		if c.chans == nil {
			return nil // no remote peer: every operation completed when it returned
		}
		ch := c.chans[r].Load()
		switch {
		case ch == nil || !ch.Outstanding():
			return nil
		case !quiet:
			return ch.Fence()
		}
		return ch.Flush()
	}
	if targets == nil {
		for r := range c.chans {
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

// Close completes the context's operations and releases it, closing its
// TCP channels. Operations through handles bound to it fail with
// ErrFinalized afterwards.
func (c *Context) Close() error {
	if err := c.check(); err != nil {
		return err
	}
	err := c.Quiet()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed.Swap(true) && c.chans != nil {
		c.pe.ctxOpen.Add(-1)
	}
	for r := range c.chans {
		if ch := c.chans[r].Load(); ch != nil {
			if cerr := ch.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}
	}
	return err
}
