package ring

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"

	"github.com/goshmem/goshmem/shmem"
)

// Tagged two-sided messages: Comm. docs/ring.md ("Comm protocol") is the
// normative description; this file is the API, comm_engine.go the
// matching and rendezvous engine, comm_wire.go the header.

// AnySource and AnyTag, as Recv's and Probe's from and tag, match a
// message from any source or with any tag.
const (
	AnySource = -1
	AnyTag    = -1
)

// MaxTag is the largest tag: tags are 0..MaxTag.
const MaxTag = 1<<31 - 1

// EagerMax is the largest eager message: while fewer than EagerCredits
// messages of up to EagerMax bytes are unreceived from this PE at a
// target, Send to it returns without waiting for a matching Recv. (A Comm
// whose heap cannot hold that many lanes lowers its own limit: see
// Comm.EagerLimit; a heap of 3,786,496 bytes per peer holds them.)
const EagerMax = 64 << 10

// FragMax is the payload of one rendezvous frag (docs/ring.md):
// lanes carry frags of up to FragMax bytes, so their bulk areas are that
// large. (A Comm whose heap cannot hold that many lanes in an eighth of
// it lowers it, and below EagerMax the eager limit with it.) Frags to a
// PE on the same host are at most 128 KiB whatever the bulk areas'
// size.
const FragMax = 1 << 20

// EagerCredits is how many eager messages to one target may be
// unreceived before Send waits.
const EagerCredits = 16

// QueueCap is the default cap on the bytes of unexpected messages
// (arrived, not yet received) a Comm holds in Go memory on one PE. Beyond
// it, messages stay in their lanes (so their senders wait), and a Recv or
// Probe that could only be matched by one of them fails with ErrQueueFull.
// One message is kept beyond it: a rendezvous message whose sender had
// committed when the receive taking it ended; while the queue is over its
// cap, a Recv that would match a rendezvous message fails with
// ErrQueueFull (docs/ring.md "Matching").
const QueueCap = 256 << 20

// ErrTruncated: the message is larger than the receive buffer. It stays
// queued; Status says its size.
var ErrTruncated = errors.New("ring: message larger than the receive buffer")

// ErrQueueFull: the unexpected-message queue is at its cap (QueueCap) and
// the message a Recv or Probe waits for may be behind it, or the queue is
// over its cap and a Recv would match a rendezvous message. Nothing was
// consumed. It wraps shmem.ErrHeapExhausted too.
var ErrQueueFull = fmt.Errorf("ring: the Comm's unexpected-message queue is full: %w", shmem.ErrHeapExhausted)

// Status describes a received (or probed) message: its source (a team
// rank), its tag and its length in bytes.
type Status struct{ Source, Tag, Bytes int }

// Tunables of the engine; docs/ring.md explains each.
const (
	commAckBatch = 4                                       // a receiver acknowledges a lane every commAckBatch processed messages
	commAckIdle  = 2                                       // and, before it waits, one with at least commAckIdle
	specFrags    = 8                                       // frags a rendezvous Send may send before its match (see sendRdv)
	specBytes    = 2 << 20                                 // and bytes, but for at least one frag
	nearFrag     = 128 << 10                               // the longest frag to a PE on this host (engine.fragTo)
	commDepth    = EagerCredits + commAckBatch + specFrags // bulk areas per lane: EagerCredits unreceived plus commAckBatch-1 processed, unacknowledged, plus specFrags early frags
	commSlots    = 128                                     // slots per lane (lane depth): an inline message waits for room only behind commSlots unacknowledged ones
	specEpoch    = 1                                       // the epoch of a rendezvous message's early frags (see Comm.match)
	claimsPer    = 8                                       // claim words per (receiver, sender) pair: rendezvous messages one PE takes from one source at once
	minFrag      = 4 << 10                                 // the least eager limit a Comm accepts
	maxMessage   = 1 << 40                                 // the longest message (bytes)
	entryCost    = 128                                     // bytes charged to the queue cap per queued message besides its payload
)

// Comm is one PE's handle on a communicator over a team: point-to-point
// messages between the team's members, matched by (source, tag). Ranks
// are the team's. Send, Recv, Probe and SendRecv are safe for concurrent
// use by many goroutines; NewComm and Close are collective.
type Comm struct {
	e     *engine
	id    uint32
	team  *shmem.Team
	me, n int
	world []int // team rank → world PE
	rank  []int // world PE → team rank, or -1

	sub       bool        // made by Sub: shares the lanes of the Comm it came from
	subClosed atomic.Bool // a sub-Comm's Close has run

	// Guarded by the engine's gate.
	unexp  []*entry   // arrived, not yet received: in arrival order
	posted []*request // receives and probes waiting, in posting order
}

// NewComm creates a Comm over team t (collective over t's members; the
// other PEs take no part). t may be any team: the world, one of Split,
// Split2D or Shared, one member alone. Its lanes are allocated over t
// (shmem.TeamMalloc), between t's members only, and Close frees them
// (collective over t). Its lanes into a PE take (t.NPEs()-1) × 28 MiB
// of its heap where that is at most an eighth of it, else an eighth or,
// for frags of the eager limit, at most half of it (docs/ring.md
// "Memory bounds"): the eager limit is EagerMax
// while the heap has at least 3,786,496 bytes per peer in t
// ((t.NPEs()-1) × 3.61 MiB), and shrinks in 4 KiB steps below that
// (EagerLimit); under 345,856 bytes per peer it would be below 4 KiB and
// NewComm fails with ErrHeapExhausted on every member. Sub of an
// existing Comm is the cheaper way to a Comm over a sub-team of its
// team: it allocates nothing.
func NewComm(t *shmem.Team) (*Comm, error) { return newCommCap(t, QueueCap) }

// newCommCap is NewComm with the unexpected queue's cap as a parameter,
// for tests.
func newCommCap(t *shmem.Team, queueCap int) (*Comm, error) {
	if t == nil || t.PE() == nil {
		return nil, fmt.Errorf("ring: NewComm on a nil team: %w", shmem.ErrInvalid)
	}
	pe := t.PE()
	c, err := commOver(t, pe.NPEs())
	if err != nil {
		return nil, err
	}
	e, err := newEngine(t, queueCap)
	if err != nil {
		return nil, err
	}
	c.e = e
	e.comms[c.id], e.root = c, c
	return c, nil
}

// commOver is a Comm over team t of a job of npes PEs, its rank maps
// filled in.
func commOver(t *shmem.Team, npes int) (*Comm, error) {
	c := &Comm{team: t, me: t.MyPE(), n: t.NPEs(), world: make([]int, t.NPEs()), rank: make([]int, npes)}
	for i := range c.rank {
		c.rank[i] = -1
	}
	for i := range c.world {
		w := t.WorldPE(i)
		if w < 0 {
			return nil, fmt.Errorf("ring: member %d of the team has no world PE: %w", i, shmem.ErrInvalid)
		}
		c.world[i], c.rank[w] = w, i
	}
	return c, nil
}

// EagerLimit is the largest message this Comm sends eagerly: EagerMax,
// or, in a heap of less than 3,786,496 bytes per peer, the largest
// multiple of 4 KiB at most heap/(56 × (NPEs-1)) − 2080 bytes (half the
// heap holds the lanes' 28 bulk areas each; see NewComm).
func (c *Comm) EagerLimit() int { return c.e.eagerMax }

// Rank is this PE's rank in the Comm's team; Size is the team's size.
func (c *Comm) Rank() int { return c.me }

// Size is the number of members of the Comm's team.
func (c *Comm) Size() int { return c.n }

// Close releases the Comm (collective over its team). Messages not yet
// received are dropped. It must not run concurrently with other calls
// on the Comm; calls after it return ErrFinalized.
func (c *Comm) Close() error {
	if c == nil || c.e == nil {
		return fmt.Errorf("ring: Close of a nil Comm: %w", shmem.ErrInvalid)
	}
	if c.sub {
		return c.closeSub()
	}
	return c.e.close()
}

// Sub creates a Comm over team t that shares c's lanes (collective over
// t's members; every member of t must be a member of c's team,
// ErrInvalid otherwise). Its ranks are t's, and its messages never match
// another Comm's. Close it (collective over t) before c. It allocates
// nothing and meets only t's members once: the cheap way to a Comm over
// a sub-team of c's team, where NewComm(t) would give t lanes of its own.
func (c *Comm) Sub(t *shmem.Team) (*Comm, error) {
	if c == nil || c.e == nil {
		return nil, fmt.Errorf("ring: Sub of a nil Comm: %w", shmem.ErrInvalid)
	}
	if t == nil || t.PE() != c.e.pe {
		return nil, fmt.Errorf("ring: Sub over a nil team or one of another PE: %w", shmem.ErrInvalid)
	}
	e := c.e
	sc, err := commOver(t, e.npes)
	if err != nil {
		return nil, err
	}
	for i, w := range sc.world {
		if e.root.rank[w] < 0 {
			return nil, fmt.Errorf("ring: Sub: member %d of the team (PE %d) is not in the Comm's %d-PE team: %w", i, w, e.root.n, shmem.ErrInvalid)
		}
	}
	sc.e, sc.sub = e, true
	// The id: a hash of the member list and how many sub-Comms this PE
	// made over that list before, the same on every member because Sub
	// is collective over them.
	key := fmt.Sprint(sc.world)
	if err := e.lock(); err != nil {
		return nil, err
	}
	e.subSeq[key]++
	h := fnv.New32a()
	fmt.Fprintf(h, "%s/%d", key, e.subSeq[key])
	sc.id = h.Sum32() | 1 // never 0, the root's
	if e.comms[sc.id] != nil {
		e.unlock()
		return nil, fmt.Errorf("ring: Sub: comm id %#x is taken on PE %d (a hash collision; create it again): %w", sc.id, e.me, shmem.ErrInvalid)
	}
	e.comms[sc.id] = sc
	e.unlock()
	// Nobody sends to a member before every member has it.
	if err := t.Sync(); err != nil {
		if e.lock() == nil {
			delete(e.comms, sc.id)
			e.unlock()
		}
		return nil, fmt.Errorf("ring: Sub: %w", err)
	}
	return sc, nil
}

// closeSub closes a sub-Comm: every member meets, then it forgets the
// sub-Comm and what it still held.
func (c *Comm) closeSub() error {
	if c.subClosed.Swap(true) {
		return fmt.Errorf("ring: the Comm on PE %d is already closed: %w", c.e.me, shmem.ErrFinalized)
	}
	err := c.team.Sync()
	if lerr := c.e.lock(); lerr != nil {
		return lerr
	}
	for _, ent := range c.unexp {
		if ent.rdv {
			c.e.forget(ent)
			c.e.queued -= entryCost
			if ent.buffering {
				c.e.queued -= ent.bytes
			}
		} else {
			c.e.queued -= ent.bytes + entryCost
		}
	}
	c.unexp, c.posted = nil, nil
	delete(c.e.comms, c.id)
	c.e.unlock()
	if err != nil {
		return fmt.Errorf("ring: Close: %w", err)
	}
	return nil
}

// usable checks c, ctx and the PE before a call.
func (c *Comm) usable(ctx context.Context) error {
	if c == nil || c.e == nil {
		return fmt.Errorf("ring: nil Comm: %w", shmem.ErrInvalid)
	}
	if ctx == nil {
		return fmt.Errorf("ring: nil context: %w", shmem.ErrInvalid)
	}
	if c.e.closed.Load() || c.subClosed.Load() {
		return fmt.Errorf("ring: the Comm on PE %d is closed: %w", c.e.me, shmem.ErrFinalized)
	}
	return ctx.Err()
}

func (c *Comm) checkRank(what string, r int, any bool) error {
	if (any && r == AnySource) || (r >= 0 && r < c.n) {
		return nil
	}
	return fmt.Errorf("ring: %s rank %d: the Comm's team has ranks 0..%d: %w", what, r, c.n-1, shmem.ErrBadPE)
}

func checkTag(tag int, any bool) error {
	if (any && tag == AnyTag) || (tag >= 0 && tag <= MaxTag) {
		return nil
	}
	return fmt.Errorf("ring: tag %d: tags are 0..%d: %w", tag, MaxTag, shmem.ErrInvalid)
}

// Send sends the elements of v to rank to with tag. v may be reused when
// Send returns. Messages of up to EagerLimit bytes are eager (see
// EagerCredits); a longer one moves in pieces through the lane, its
// first ones at once and the rest once a Recv has matched it, and Send
// waits for that match (rendezvous). When ctx ends first, Send
// returns an error satisfying errors.Is(err, ctx.Err()) and the message
// is not delivered, in whole or in part.
func Send[T shmem.Elem](ctx context.Context, c *Comm, to, tag int, v []T) error {
	if err := c.usable(ctx); err != nil {
		return err
	}
	if err := c.checkRank("Send to", to, false); err != nil {
		return err
	}
	if err := checkTag(tag, false); err != nil {
		return err
	}
	return c.e.send(ctx, c, to, tag, kindOf[T](), asBytes(v))
}

// Recv receives into dst the oldest message from rank from with tag tag
// (either may be AnySource / AnyTag) and returns its Status. A message of
// another element type is ErrInvalid, one longer than dst ErrTruncated;
// in both cases it stays queued. When ctx ends first, Recv returns an
// error satisfying errors.Is(err, ctx.Err()) and consumes nothing
// (dst's contents are then unspecified).
func Recv[T shmem.Elem](ctx context.Context, c *Comm, from, tag int, dst []T) (Status, error) {
	if err := c.usable(ctx); err != nil {
		return Status{}, err
	}
	if err := c.checkRank("Recv from", from, true); err != nil {
		return Status{}, err
	}
	if err := checkTag(tag, true); err != nil {
		return Status{}, err
	}
	return c.e.recv(ctx, c, request{c: c, from: from, tag: tag, kind: kindOf[T](), size: sizeOf[T](), dst: asBytes(dst)})
}

// Probe waits for a message that Recv(from, tag) would receive and
// returns its Status, receiving nothing.
func Probe(ctx context.Context, c *Comm, from, tag int) (Status, error) {
	if err := c.usable(ctx); err != nil {
		return Status{}, err
	}
	if err := c.checkRank("Probe from", from, true); err != nil {
		return Status{}, err
	}
	if err := checkTag(tag, true); err != nil {
		return Status{}, err
	}
	return c.e.recv(ctx, c, request{c: c, from: from, tag: tag, probe: true})
}

// SendRecv sends v to rank to with sendTag and receives into dst from
// rank from with recvTag, the two at once: it never deadlocks, whatever
// the sizes. When it fails, the error says which half failed; a half
// that ended by ctx left nothing behind (the other half may have
// completed: the send delivered, or the receive consumed its message).
func SendRecv[T shmem.Elem](ctx context.Context, c *Comm, to, sendTag int, v []T, from, recvTag int, dst []T) (Status, error) {
	if err := c.usable(ctx); err != nil {
		return Status{}, err
	}
	if err := c.checkRank("SendRecv to", to, false); err != nil {
		return Status{}, err
	}
	if err := checkTag(sendTag, false); err != nil {
		return Status{}, err
	}
	if err := c.checkRank("SendRecv from", from, true); err != nil {
		return Status{}, err
	}
	if err := checkTag(recvTag, true); err != nil {
		return Status{}, err
	}
	e, kind, src := c.e, kindOf[T](), asBytes(v)
	q := request{c: c, from: from, tag: recvTag, kind: kind, size: sizeOf[T](), dst: asBytes(dst)}
	// The common case: an eager send that finds room goes first, then the
	// receive, in this goroutine.
	if sent, err := e.trySend(c, to, sendTag, kind, src); err != nil {
		return Status{}, fmt.Errorf("ring: SendRecv: the send: %w", err)
	} else if sent {
		st, err := e.recv(ctx, c, q)
		if err != nil {
			return st, fmt.Errorf("ring: SendRecv: the receive (the send was delivered): %w", err)
		}
		return st, nil
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var serr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if serr = e.send(sctx, c, to, sendTag, kind, src); serr != nil {
			cancel()
		}
	}()
	st, rerr := e.recv(sctx, c, q)
	if rerr != nil {
		cancel()
	}
	wg.Wait()
	switch {
	case serr != nil && (rerr == nil || ctx.Err() == nil):
		what := "the receive was cancelled"
		if rerr == nil {
			what = "the receive completed"
		}
		return st, fmt.Errorf("ring: SendRecv: the send (%s): %w", what, serr)
	case rerr != nil:
		what := "the send was cancelled"
		if serr == nil {
			what = "the send was delivered"
		}
		return st, fmt.Errorf("ring: SendRecv: the receive (%s): %w", what, rerr)
	}
	return st, nil
}

// closedErr is the error of a call that met a closed Comm.
func (e *engine) closedErr() error {
	return fmt.Errorf("ring: the Comm on PE %d is closed: %w", e.me, shmem.ErrFinalized)
}
