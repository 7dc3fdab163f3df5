package ring

import (
	"bytes"
	"context"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// engine is one PE's side of a Comm: a Safe ring with a lane between
// every ordered pair of PEs (whose messages ring no doorbell in a Comm
// of up to watchLanes+1 PEs), the rendezvous claim words, and the matching state. Every field below
// "guarded" is guarded by the gate (mu, taken with the PE held mapped:
// see enter); a call holds it only while it moves messages, never while
// it waits.
type engine struct {
	pe       *shmem.PE
	me, npes int
	mu       sync.Mutex // the gate's lock (enter)
	r        *Ring
	bell     shmem.Sym[uint64] // this PE's doorbell (the ring's)
	bellWord *uint64
	rdv      shmem.Sym[uint64] // the claim words, npes*claimsPer in each sender's heap (the ring's extra words)
	rdvLocal []uint64          // this PE's copy
	rdvIdx   int               // element of rdv[0] in the ring's words object (after the lanes' words: their count)
	spin     bool              // a CPU per PE: spin briefly before sleeping
	longSpin bool              // and every peer is on this host: spin up to commSpin (remote messages need the CPU for the link's reader)
	eagerMax int               // the eager limit
	frag     int               // the payload of one rendezvous frag (at least eagerMax)
	cap      int               // the unexpected queue's cap, in bytes
	// What waits watch besides the doorbell (see watchLanes): nil in a
	// Comm of more than watchLanes+1 PEs, whose messages and acks ring
	// the doorbell (bellMsgs).
	watch     []*uint64 // the incoming lanes' pub words, then the outgoing lanes' ack words
	watchIdx  []int     // their elements in the ring's words object
	watchRecv []bool    // over the lanes' words (rdvIdx of them): the doorbell and the pub words
	watchSend []bool    // and the ack words
	vsPool    sync.Pool // *[]uint64 of the words object's length: a sleeping wait's comparands
	maskPool  sync.Pool // *[]bool of that length: a rendezvous send's mask (watchSend and its target's claim words)
	bellMsgs  bool      // messages and acks ring their receiver's doorbell
	closed    atomic.Bool
	corks     bool          // some lane from this PE corks (a remote peer): receives count their waits
	waits     atomic.Uint64 // waits of receives (recvReq) begun: a lane to a remote PE corks a message sent with none since its previous one (sendLane.publish)

	// guarded by the gate:
	comms  map[uint32]*Comm  // by id: the root Comm (0) and its live sub-Comms
	root   *Comm             // comms[0], the Comm of NewComm (set once, before any call)
	subSeq map[string]uint32 // sub-Comms created so far over each member list
	batch  []Message
	lanes  []inLane          // by source world PE
	queued int               // bytes charged to the cap
	capped bool              // the last progress left a message in its lane because of the cap
	rdvIn  map[rdvKey]*entry // rendezvous messages whose frags may still come, by source and id
	cur    *request          // the request of the goroutine that holds mu, if any
	spare  *entry            // an entry no one refers to, for the next eager message
	kick   bool              // a request of another goroutine completed
	// Receiving: claimUsed[src] has bit j set while claim word j of this
	// PE's on world PE src holds a claim of this PE's (see entry.claim).
	claimUsed []uint8
	// Sending: the rendezvous messages announced and not yet finished
	// (committed or withdrawn), by id; sendSeq numbers them; claimSeen is
	// each of this PE's claim words as scanClaims last read it.
	sends     map[uint32]*rdvSend
	sendSeq   uint32
	claimSeen []uint64
}

// rdvSend is the sending state of one rendezvous message, guarded by
// the gate. claim is the claim word (an element of engine.rdv) that a
// receiver matched it with, v that word's value then; -1 while none.
type rdvSend struct {
	id    uint32
	dst   int
	claim int
	v     uint64
}

// inLane is the receiving state of the lane from one source.
type inLane struct {
	// backlog[head:] are polled but not processed (the queue was at its
	// cap, or the receive that polled them had its message); they alias
	// the heap. The slice is reused, not reallocated.
	backlog []Message
	head    int
	done    uint64 // every message up to done is processed
	acked   uint64 // acknowledged up to
	local   bool   // the source is on this host (idleAcks)
}

type rdvKey struct {
	src int
	id  uint32
}

// entry is a message that arrived and was not yet received.
type entry struct {
	src, wsrc int // source: team rank and world PE
	tag       int
	kind      uint8
	bytes     int
	data      []byte   // eager: the payload; rdv: the buffer while buffering
	rdv       bool     // announced by an rts; its data moves in frags
	id        uint32   // rdv: the message's id (its sender's number)
	claimed   bool     // rdv: this PE holds a claim word for it (claim)
	claim     int      // rdv: which of this PE's claim words on the sender: 0..claimsPer-1
	epoch     uint32   // the current (or last) match's epoch
	taker     *request // rdv: the receive it is moving into
	got       int      // rdv: bytes arrived for the current match
	buffering bool     // rdv: its sender finished but the receive that matched it ended: frags go into data
	spilled   bool     // rdv: an early frag (epoch specEpoch) came before any match and was dropped
}

func (ent *entry) status() Status { return Status{Source: ent.src, Tag: ent.tag, Bytes: ent.bytes} }

// request is a Recv or Probe in progress.
type request struct {
	c         *Comm
	from, tag int
	kind      uint8
	size      int
	dst       []byte
	probe     bool
	posted    bool   // in c.posted
	blocked   bool   // posted behind a matching message another receive is taking
	ent       *entry // the rendezvous message it is taking
	done      bool
	st        Status
	err       error
}

func (q *request) matches(ent *entry) bool {
	return (q.from == AnySource || q.from == ent.src || ignoreSource) && (q.tag == AnyTag || q.tag == ent.tag)
}

// ignoreSource breaks matches on purpose: the mutant that the
// exploration's mutation check (comm_explore_test.go) must catch. Only
// that test sets it, while no other test runs.
var ignoreSource bool

// fits checks the message's kind and length against the receive.
func (q *request) fits(ent *entry) error {
	if ent.kind != q.kind {
		return fmt.Errorf("ring: Recv into %s elements of a message of %s elements (%d bytes, tag %d, from rank %d); it stays queued: %w",
			kindName(q.kind), kindName(ent.kind), ent.bytes, ent.tag, ent.src, shmem.ErrInvalid)
	}
	if ent.bytes > len(q.dst) {
		return fmt.Errorf("ring: Recv of a %d-byte message (tag %d, from rank %d) into %d bytes; it stays queued: %w",
			ent.bytes, ent.tag, ent.src, len(q.dst), ErrTruncated)
	}
	return nil
}

// commInline is the inline limit of a Comm's lanes: their slots are one
// cache line (of at least 64 bytes), so an eager message of up to
// commInline-hdrEager payload bytes (24 with 64-byte lines) is one line
// to write and one to read, header, payload and tail; a longer one goes
// through the slot's bulk area. (With the ring's InlineMax, 1 KiB, a
// slot is 17 lines: an 8-byte message's tail lies 1 KiB from its head,
// a second line on both sides.)
func commInline(line int) int {
	return (64+line-1)&^(line-1) - slotFixed
}

// commLimits is the frag size and the eager limit of a Comm over a team
// of n PEs (its lanes join those n only) in a heap of heap bytes. The lanes into a PE may take half its heap for
// frags of up to the eager limit, an eighth of it for longer ones: (n-1)
// lanes of commDepth (28) bulk areas and commSlots slots, counted at
// 2 KiB a bulk area for the slots (more than their cache line or two:
// commSlots lines of up to 256 bytes fit in it) and hdrLong for the
// header. So, with per(part) = heap/part/(28(n-1)) - 2080 rounded down
// to a multiple of minFrag (4 KiB):
//
//	eager = min(EagerMax, per(2))
//	frag  = max(eager, min(FragMax, per(8)))
//
// The eager limit is the full 64 KiB when heap >= 3,786,496 * (n-1)
// bytes (3.61 MiB a peer; the default 128 MiB heap holds up to 36
// PEs); below 345,856 * (n-1) bytes per(2) is under 4 KiB and NewComm
// fails with ErrHeapExhausted. One PE has no lanes: FragMax, EagerMax.
func commLimits(heap, n int) (frag, eager int, err error) {
	if n <= 1 {
		return FragMax, EagerMax, nil
	}
	per := func(part int) int {
		return (heap/part/((n-1)*commDepth) - 2*InlineMax - hdrLong) &^ (minFrag - 1)
	}
	eager = min(EagerMax, per(2))
	if eager < minFrag {
		return 0, 0, fmt.Errorf("ring: NewComm: %d PEs need at least %d bytes of heap each for their lanes; the heap has %d: %w",
			n, 2*(n-1)*commDepth*(minFrag+2*InlineMax+hdrLong), heap, shmem.ErrHeapExhausted)
	}
	return max(eager, min(FragMax, per(8))), eager, nil
}

// fragTo is the payload of the rendezvous frags this PE sends to world
// PE dst: the lanes' frag size to a PE on another host, where every frag
// costs a frame, a socket write and the receiver's wake-ups, so that
// fewer, larger frags go faster; at most nearFrag to a PE on this host,
// where the sender's copy into a bulk area and the receiver's copy out of
// it overlap better in smaller pieces (docs/ring.md, "Frag sizes").
func (e *engine) fragTo(dst int) int {
	if e.lanes[dst].local {
		return min(e.frag, nearFrag)
	}
	return e.frag
}

// newEngine is the engine of a Comm over team t (collective over t): a
// lane between every ordered pair of t's members, allocated over t.
// Its state is indexed by world PE, over the whole job; its limits are
// those of a Comm of t's size.
func newEngine(t *shmem.Team, queueCap int) (*engine, error) {
	pe := t.PE()
	info := pe.Info()
	n, me, size := pe.NPEs(), pe.MyPE(), t.NPEs()
	frag, eager, err := commLimits(int(info.HeapSize), size)
	if err != nil {
		return nil, err
	}
	var lanes []Lane
	for i := range size {
		for j := range size {
			if i != j {
				lanes = append(lanes, Lane{From: t.WorldPE(i), To: t.WorldPE(j), Depth: commSlots, Capacity: hdrLong + frag})
			}
		}
	}
	bellMsgs := size-1 > watchLanes
	rule := bellNever
	if bellMsgs {
		rule = bellAlways
	}
	// The claim words are the ring's extra words: in the words object a
	// wait watches, so a sender waiting for its match sees the
	// receiver's claim land, with no doorbell after it (over TCP the
	// frame of the claim itself ends the sender's poll).
	r, err := newRingOver(t, lanes, Safe, commInline(info.CacheLine), rule, n*claimsPer, commDepth)
	if err != nil {
		return nil, fmt.Errorf("ring: NewComm: %w", err)
	}
	rdv := r.extra
	e := &engine{pe: pe, me: me, npes: n, r: r, bell: r.bell, bellWord: r.bellWord, rdv: rdv, rdvLocal: rdv.Local(),
		spin: !info.Oversubscribed, eagerMax: eager, frag: frag, cap: queueCap,
		comms: map[uint32]*Comm{}, subSeq: map[string]uint32{}, lanes: make([]inLane, n), rdvIn: map[rdvKey]*entry{},
		batch: make([]Message, 0, 64), bellMsgs: bellMsgs,
		claimUsed: make([]uint8, n), sends: map[uint32]*rdvSend{}, claimSeen: make([]uint64, n*claimsPer)}
	e.longSpin = e.spin
	for i := range size {
		p := t.WorldPE(i)
		e.lanes[p].local = pe.SameHost(p)
		if !e.lanes[p].local {
			e.longSpin = false
		}
	}
	for _, l := range r.out {
		l.cork, l.waits, l.lastWaits = !pe.SameHost(l.lane.To), &e.waits, ^uint64(0)
		e.corks = e.corks || l.cork
	}
	if !bellMsgs {
		words := r.words.Local()
		idx := func(w shmem.Sym[uint64]) int { return int((w.Offset() - r.words.Offset()) / 8) }
		for _, l := range r.in {
			e.watch, e.watchIdx = append(e.watch, l.pubWord), append(e.watchIdx, idx(l.pub))
		}
		for _, l := range r.out {
			e.watch, e.watchIdx = append(e.watch, l.ackWord), append(e.watchIdx, idx(l.ack))
		}
		e.rdvIdx = idx(rdv)
		e.watchRecv, e.watchSend = make([]bool, e.rdvIdx), make([]bool, e.rdvIdx)
		e.watchRecv[0], e.watchSend[0] = true, true
		for i, k := range e.watchIdx {
			e.watchRecv[k] = i < len(r.in)
			e.watchSend[k] = true
		}
		e.vsPool.New = func() any { vs := make([]uint64, len(words)); return &vs }
		e.maskPool.New = func() any { m := make([]bool, len(words)); return &m }
	}
	return e, nil
}

func (e *engine) close() error {
	if e.closed.Swap(true) {
		return e.closedErr()
	}
	return e.r.Close() // the claim words with the ring's
}

// enter holds the gate: until exit, Finalize does not unmap this PE's
// memory (shmem's PE.Enter), which the engine reads and writes directly
// (the doorbell, the state words, the lanes' slots), and the engine's
// matching state is this goroutine's (mu). It fails once the PE is
// finalizing, or the Comm closed. The engine never waits while it holds
// the gate (shmem's waits are safe by themselves).
func (e *engine) enter() error {
	if e.closed.Load() {
		return e.closedErr()
	}
	if err := e.pe.Enter(); err != nil {
		return fmt.Errorf("ring: Comm on PE %d: %w", e.me, err)
	}
	e.mu.Lock()
	return nil
}

func (e *engine) exit() {
	e.mu.Unlock()
	e.pe.Exit()
}

// hold keeps the PE's memory mapped (shmem's PE.Enter) without the
// gate's mutex: for a send, which reads this PE's words in place (its
// mark, the lane's ack word) but no matching state, and whose lane has a
// mutex of its own. Pair it with e.pe.Exit.
func (e *engine) hold() error {
	if e.closed.Load() {
		return e.closedErr()
	}
	if err := e.pe.Enter(); err != nil {
		return fmt.Errorf("ring: Comm on PE %d: %w", e.me, err)
	}
	return nil
}

// lock enters the gate, which is also the mutex of the engine's
// matching state.
func (e *engine) lock() error { return e.enter() }

// unlock leaves the gate, first waking this PE's sleepers if a request
// of another goroutine completed meanwhile.
func (e *engine) unlock() {
	k := e.kick
	e.kick = false
	e.cur = nil
	e.exit()
	if k {
		e.kickSelf()
	}
}

// kickSelf rings this PE's own doorbell: every call waiting on it looks
// again.
func (e *engine) kickSelf() { _ = shmem.AtomicAdd(e.bell, 0, 1, e.me) }

// ringBell rings world PE p's doorbell without waiting (ringDoorbell).
func (e *engine) ringBell(p int) error { return ringDoorbell(e.bell, p) }

func (e *engine) finish(q *request, st Status, err error) {
	q.done, q.st, q.err = true, st, err
	if q != e.cur {
		e.kick = true
	}
}

// waiter waits for one call until something it may be waiting for
// moved, ctx ends, or shmem's wait fails (peer lost, timeout,
// finalized). What moves is one of the words the engine watches (see
// watchLanes): the doorbell, and in a Comm of at most watchLanes+1 PEs
// the pub word of every incoming lane and the ack word of every
// outgoing one, and for a rendezvous send the claim words of its target
// (which the receiver's match and give-back move). mark records them, holding the gate, before the call
// looks (polls, matches, tries to send); wait returns once one differs
// from its mark, so nothing that lands after the look is missed.
type waiter struct {
	stop func() bool
	// acks: the call may wait for room on a lane (a send), so it watches
	// the outgoing lanes' ack words too; a receive watches the doorbell
	// and the pub words only.
	acks bool
	// claims: a rendezvous send watches the claim words its target
	// (world PE claims-1; 0: none) sets in this PE's heap too.
	claims int
	// dep is 1 + the world PE whose departure (shmem's PE.Departed: it
	// has begun Finalize) also ends the sleep, when the call can
	// complete only with its help: a receive's named source, a send's
	// target (0, or this PE: none). The caller then looks once more,
	// and gives up if nothing came (departedErr).
	dep     int
	seen    [1 + 2*watchLanes]uint64 // the doorbell, then e.watch's words, as marked
	seenRdv [claimsPer]uint64        // the claim words, as marked
	vs      *[]uint64                // the sleep's comparands over the words object (from e.vsPool)
	mask    *[]bool                  // with claims: watchSend and the claim words (from e.maskPool)
}

// claimWords is w's claim words: those of target claims-1 in this PE's
// heap (nil without claims).
func (w *waiter) claimWords(e *engine) []uint64 {
	if w.claims == 0 {
		return nil
	}
	base := (w.claims - 1) * claimsPer
	return e.rdvLocal[base : base+claimsPer]
}

// watched is how many of e.watch's words w watches.
func (w *waiter) watched(e *engine) int {
	if w.acks || e.watch == nil {
		return len(e.watch)
	}
	return len(e.watch) - len(e.r.out)
}

// mark records the watched words; the caller holds the gate.
func (w *waiter) mark(e *engine) {
	w.seen[0] = atomic.LoadUint64(e.bellWord)
	for i, p := range e.watch[:w.watched(e)] {
		w.seen[1+i] = atomic.LoadUint64(p)
	}
	cw := w.claimWords(e)
	for j := range cw {
		w.seenRdv[j] = atomic.LoadUint64(&cw[j])
	}
}

// moved reports whether a watched word differs from its mark; the caller
// holds the gate.
func (w *waiter) moved(e *engine) bool {
	if atomic.LoadUint64(e.bellWord) != w.seen[0] {
		return true
	}
	for i, p := range e.watch[:w.watched(e)] {
		if atomic.LoadUint64(p) != w.seen[1+i] {
			return true
		}
	}
	cw := w.claimWords(e)
	for j := range cw {
		if atomic.LoadUint64(&cw[j]) != w.seenRdv[j] {
			return true
		}
	}
	return false
}

func (w *waiter) wait(ctx context.Context, e *engine) error {
	_, err := w.waitKeep(ctx, e, false)
	return err
}

// waitKeep is wait that, when keep is set and its spin saw a move,
// returns holding the gate (held), as lock leaves it: the caller looks
// at once, without leaving and entering the gate again.
func (w *waiter) waitKeep(ctx context.Context, e *engine, keep bool) (held bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if e.closed.Load() {
		return false, e.closedErr()
	}
	if e.spin {
		moved, err := e.spinFor(w, keep)
		if err != nil || moved {
			return moved && keep && err == nil, err
		}
	}
	if w.stop == nil && ctx.Done() != nil {
		w.stop = context.AfterFunc(ctx, e.kickSelf)
		if err := ctx.Err(); err != nil {
			return false, err
		}
	}
	if e.watch == nil {
		_, err = shmem.WaitUntilAnyVectorFrom(e.bell.Slice(0, 1), nil, shmem.CmpNE, w.seen[:1], w.dep-1)
	} else {
		// One wait on the words object: a write to any watched word (a
		// pub word's signal, an ack's add, the doorbell's add, a claim
		// word of a rendezvous send's target) ends it. It covers the
		// lanes' words, and a rendezvous send's claim words and those
		// before them (the wait compares every word of what it covers,
		// masked or not, at every look).
		if w.vs == nil {
			w.vs = e.vsPool.Get().(*[]uint64)
		}
		vs := *w.vs
		vs[0] = w.seen[0]
		for i, k := range e.watchIdx[:w.watched(e)] {
			vs[k] = w.seen[1+i]
		}
		mask := e.watchRecv
		if w.acks {
			mask = e.watchSend
		}
		n := e.rdvIdx
		if w.claims > 0 {
			base := e.rdvIdx + (w.claims-1)*claimsPer
			n = base + claimsPer
			if w.mask == nil {
				w.mask = e.maskPool.Get().(*[]bool)
				copy(*w.mask, e.watchSend)
				for j := range claimsPer {
					(*w.mask)[base+j] = true
				}
			}
			mask = (*w.mask)[:n]
			copy(vs[base:n], w.seenRdv[:])
		}
		_, err = shmem.WaitUntilAnyVectorFrom(e.r.words.Slice(0, n), mask, shmem.CmpNE, vs[:n], w.dep-1)
	}
	if err != nil {
		return false, fmt.Errorf("ring: Comm on PE %d: %w", e.me, err)
	}
	return false, nil
}

func (w *waiter) done(e *engine) {
	if w.stop != nil {
		w.stop()
	}
	if w.vs != nil {
		e.vsPool.Put(w.vs)
		w.vs = nil
	}
	if w.mask != nil {
		clear((*w.mask)[e.rdvIdx:])
		e.maskPool.Put(w.mask)
		w.mask = nil
	}
}

// spinFor loads the watched words for up to about commSpin until one
// moved from w's mark. It holds the gate for recvSpin loads at a time,
// so that the PE's other goroutines get their turns while it spins; with
// keep, it returns still holding it when it saw a move.
func (e *engine) spinFor(w *waiter, keep bool) (bool, error) {
	var start time.Time
	var slotBuf [watchLanes][2]*uint64
	for {
		if err := e.enter(); err != nil {
			return false, err
		}
		slots := e.nextSlots(slotBuf[:0])
		for range recvSpin {
			for _, p := range slots {
				atomic.LoadUint64(p[0])
				atomic.LoadUint64(p[1])
			}
			if w.moved(e) {
				if !keep {
					e.exit()
				}
				return true, nil
			}
		}
		e.exit()
		if !e.longSpin {
			return false, nil
		}
		if start.IsZero() {
			start = time.Now()
		} else if time.Since(start) > commSpin {
			return false, nil
		}
	}
}

// nextSlots appends the first and last words of the slot that the next
// message of each incoming lane from a PE on this host lands in (up to
// watchLanes lanes), holding the gate. spinFor loads them with the words
// it watches: the slot's lines then come over while the pub word's does,
// instead of after it, when the message is read. 8-byte ping-pong over
// shared memory, two processes, slow state: 680-797 ns against 816-943
// without (docs/performance.md, "The next slot's lines in the spin").
func (e *engine) nextSlots(dst [][2]*uint64) [][2]*uint64 {
	for _, l := range e.r.in {
		if len(dst) == cap(dst) {
			break
		}
		if e.lanes[l.lane.From].local {
			dst = append(dst, l.slotWords(l.next))
		}
	}
	return dst
}

// commSpin bounds a Comm wait's spin (when the host has a CPU per PE and
// every peer is on it) before it sleeps in shmem.WaitUntil: a partner
// streaming messages usually answers within a few microseconds, and a
// sleep and wake costs more than that. With remote peers the spin
// is recvSpin loads: a longer one takes the CPU the link's reader needs
// to deliver the message.
const commSpin = 20 * time.Microsecond

// watchLanes is how many incoming (and outgoing) lanes a Comm's waits
// watch themselves. In a Comm of at most watchLanes+1 PEs a wait
// watches every incoming lane's pub word (which a message's PutSignal
// sets) and every outgoing lane's ack word (which the receiver's Ack
// adds to) besides the doorbell, so neither a message nor an ack rings
// the doorbell: each costs its own write alone (one cache-line transfer
// over shared memory, one frame over TCP). In a larger Comm a wait
// would load too many words per look: there every message and every
// ack also rings the receiver's doorbell, the one word a wait watches.
const watchLanes = 8

// departedErr is the error of a call that can complete only with world
// PE wpe, which has begun Finalize: nothing more comes from it, and it
// takes nothing more.
func departedErr(wpe int) error {
	return fmt.Errorf("PE %d (world rank) has begun Finalize: %w", wpe, shmem.ErrPeerLost)
}

// depOf is 1 + the world PE that receive q can complete only with: the
// sender of the rendezvous message it is taking, or its named source;
// 0 when none (the source is this PE, or AnySource: this PE's other
// goroutines may still send to it).
func (e *engine) depOf(c *Comm, q *request) int {
	src := -1
	switch {
	case q.ent != nil:
		src = q.ent.wsrc
	case q.from != AnySource:
		src = c.world[q.from]
	}
	if src == e.me {
		return 0
	}
	return src + 1
}

// ctxErr wraps ctx's error for a call.
func ctxErr(what string, err error) error {
	return fmt.Errorf("ring: %s: %w", what, err)
}

// ---- receiving side ----

// progress takes every message that has arrived on this PE's lanes:
// first what the cap held back, then whatever Poll returns. Holding the gate.
func (e *engine) progress() error {
	var first error
	note := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	e.capped = false
	for src := range e.lanes {
		l := &e.lanes[src]
		for l.held() && !e.enough() {
			m := l.backlog[l.head]
			ok, err := e.handle(src, m)
			note(err)
			if !ok {
				e.capped = true
				break
			}
			l.backlog[l.head] = Message{}
			l.head++
			note(e.processed(src, m.Seq))
		}
		if !l.held() {
			l.backlog, l.head = l.backlog[:0], 0
		}
	}
	if e.enough() {
		return first
	}
	batch, err := e.r.pollEntered(e.batch[:0])
	for _, m := range batch {
		l := &e.lanes[m.Origin]
		if l.held() || e.enough() {
			// Behind a held message, or the caller's receive is done:
			// it stays in its lane (unacknowledged) for the next
			// receive, which then takes it without the queue's copy.
			l.backlog = append(l.backlog, m)
			continue
		}
		ok, herr := e.handle(m.Origin, m)
		note(herr)
		if !ok {
			e.capped = true
			l.backlog = append(l.backlog, m)
			continue
		}
		note(e.processed(m.Origin, m.Seq))
	}
	clear(batch)
	e.batch = batch[:0]
	note(err)
	return first
}

// held reports whether the lane has polled messages not yet processed.
func (l *inLane) held() bool { return l.head < len(l.backlog) }

// enough: the goroutine that progresses has what it came for and no other
// receive waits, so the messages still to take can stay where they are.
func (e *engine) enough() bool {
	if e.cur == nil || !e.cur.done {
		return false
	}
	if c := e.root; c != nil && len(e.comms) == 1 {
		return len(c.posted) == 0 // no sub-Comm: no map to walk
	}
	for _, c := range e.comms {
		if len(c.posted) > 0 {
			return false
		}
	}
	return true
}

// processed records that message seq from src is taken care of and
// acknowledges the lane once commAckBatch of them are unacknowledged.
// Fewer wait for idleAcks, which a call runs before it waits: in a
// ping-pong the acknowledgement then leaves while the reply is on its
// way, not between a message and its reply.
func (e *engine) processed(src int, seq uint64) error {
	l := &e.lanes[src]
	l.done = seq
	if l.done-l.acked < commAckBatch {
		return nil
	}
	return e.ack(src)
}

// ack acknowledges every processed message of the lane from src (and
// beyond watchLanes+1 PEs rings the sender's doorbell, in case it waits
// for room). Holding the gate.
func (e *engine) ack(src int) error {
	l := &e.lanes[src]
	l.acked = l.done
	if err := e.r.ackLocked(src, l.done); err != nil {
		return err
	}
	if !e.bellMsgs {
		return nil // the sender's waits watch its ack word
	}
	return e.ringBell(src)
}

// idleAcks acknowledges every lane from a PE on this host with at least
// commAckIdle processed, unacknowledged messages. A call runs it,
// holding the gate, when it has looked and is about to wait: it has
// nothing else to do then. No lane needs it to make progress: processed
// acknowledges at commAckBatch, and a lane's depth leaves room for
// commAckBatch-1 processed messages besides the EagerCredits unreceived
// ones. Over shared memory an acknowledgement is an atomic add on a
// cache line of the sender's, a transfer the ping-pong would otherwise
// wait for between a message and its reply; over TCP it is a frame that
// netmesh corks until this PE's next frame (the reply) or wait, so it
// costs no write of its own there, and waiting for idleAcks would add
// one.
func (e *engine) idleAcks() error {
	for src := range e.lanes {
		if l := &e.lanes[src]; l.local && l.done-l.acked >= commAckIdle {
			if err := e.ack(src); err != nil {
				return err
			}
		}
	}
	return nil
}

// handle takes one lane message from world PE src. It returns false
// when the message must stay in its lane (the queue is at its cap).
func (e *engine) handle(src int, m Message) (bool, error) {
	h, payload, err := parseHeader(m.Data)
	if err != nil {
		return true, fmt.Errorf("ring: Comm on PE %d: message %d from PE %d: %w", e.me, m.Seq, src, err)
	}
	c := e.root
	if h.comm != 0 || c == nil {
		c = e.comms[h.comm]
	}
	if c == nil {
		// A sub-Comm closed here with messages still on their way
		// (Close drops what was not received).
		return true, nil
	}
	if c.rank[src] < 0 {
		return true, fmt.Errorf("ring: Comm on PE %d: message %d from PE %d names comm %d, which this PE does not have: %w", e.me, m.Seq, src, h.comm, shmem.ErrProtocol)
	}
	rs := c.rank[src]
	switch h.typ {
	case msgEager:
		// The entry is a spare one unless the message is queued: most
		// eager messages go straight to a posted receive.
		ent := e.spare
		if ent == nil {
			ent = new(entry)
		}
		e.spare = nil
		*ent = entry{src: rs, wsrc: src, tag: h.tag, kind: h.kind, bytes: len(payload), data: payload}
		if done, err := c.offer(ent); done || err != nil {
			ent.data = nil
			e.spare = ent
			return true, err
		}
		if e.queued+len(payload)+entryCost > e.cap {
			return false, nil
		}
		ent.data = bytes.Clone(payload)
		e.queued += len(payload) + entryCost
		c.unexp = append(c.unexp, ent)
	case msgRTS:
		if e.queued+entryCost > e.cap {
			return false, nil
		}
		if e.rdvIn[rdvKey{src, h.id}] != nil {
			return true, fmt.Errorf("ring: Comm on PE %d: message %d from PE %d announces rendezvous message %d again: %w", e.me, m.Seq, src, h.id, shmem.ErrProtocol)
		}
		ent := &entry{rdv: true, src: rs, wsrc: src, tag: h.tag, kind: h.kind, bytes: int(h.n), id: h.id}
		e.rdvIn[rdvKey{src, h.id}] = ent
		if _, err := c.offer(ent); err != nil {
			e.forget(ent)
			return true, err
		}
		e.queued += entryCost
		c.unexp = append(c.unexp, ent)
	case msgAbort:
		// The sender withdrew the message (its Send ended before it
		// committed); the abort comes after every frag it sent.
		if ent := e.rdvIn[rdvKey{src, h.id}]; ent != nil {
			if q := ent.taker; q != nil {
				e.kick = true // its receive looks again
			}
			c.drop(ent)
			e.rematch()
		}
	case msgFrag:
		ent := e.rdvIn[rdvKey{src, h.id}]
		if ent == nil || ent.epoch != h.epoch || (ent.taker == nil && !ent.buffering) {
			if ent != nil && ent.epoch == 0 {
				ent.spilled = true // an early frag: the first match restarts the stream
			}
			return true, nil // early, or of a match that ended: dropped
		}
		if h.n > uint64(ent.bytes) || len(payload) > ent.bytes-int(h.n) {
			return true, fmt.Errorf("ring: Comm on PE %d: a frag of %d bytes at %d of a %d-byte message from PE %d: %w",
				e.me, len(payload), h.n, ent.bytes, src, shmem.ErrProtocol)
		}
		if q := ent.taker; q != nil {
			copy(q.dst[h.n:], payload)
		} else {
			copy(ent.data[h.n:], payload)
		}
		ent.got += len(payload)
		if ent.got == ent.bytes {
			c.arrived(ent)
		}
	}
	return true, nil
}

// arrived: the last frag of rendezvous message ent is in.
func (c *Comm) arrived(ent *entry) {
	e := c.e
	e.forget(ent)
	if q := ent.taker; q != nil {
		c.remove(ent)
		q.ent = nil
		e.finish(q, ent.status(), nil)
	} else {
		// Buffered whole: from now on it is like an eager message.
		ent.rdv, ent.buffering = false, false
	}
	e.rematch()
}

// offer gives a message that just arrived to the posted receives, in
// posting order. It reports whether the message is gone (received);
// otherwise the caller queues it (an rts may then have a taker).
func (c *Comm) offer(ent *entry) (bool, error) {
	e := c.e
	for i := 0; i < len(c.posted); {
		q := c.posted[i]
		if q.blocked || !q.matches(ent) {
			i++
			continue
		}
		if ent.taker != nil {
			q.blocked = true
			i++
			continue
		}
		if q.probe {
			c.unpost(i)
			e.finish(q, ent.status(), nil)
			continue
		}
		if err := q.fits(ent); err != nil {
			c.unpost(i)
			e.finish(q, ent.status(), err)
			continue
		}
		if !ent.rdv {
			copy(q.dst, ent.data)
			c.unpost(i)
			e.finish(q, ent.status(), nil)
			return true, nil
		}
		if err := e.overCap(ent); err != nil {
			c.unpost(i)
			e.finish(q, ent.status(), err)
			continue
		}
		if !e.claimable(ent) {
			q.blocked = true // until a claim word is free (rematch)
			i++
			continue
		}
		if err := c.match(q, ent); err != nil {
			return false, err
		}
		c.unpost(i)
	}
	return false, nil
}

// search looks for q's message among the queued ones: the first that
// matches. It reports whether q is settled (finished, or taking a
// rendezvous message); otherwise q must be posted (blocked when the
// first match is being taken by another receive).
func (c *Comm) search(q *request) (bool, error) {
	e := c.e
	for i := 0; i < len(c.unexp); {
		ent := c.unexp[i]
		if !q.matches(ent) {
			i++
			continue
		}
		if ent.taker != nil {
			q.blocked = true
			return false, nil
		}
		if q.probe {
			e.finish(q, ent.status(), nil)
			return true, nil
		}
		if err := q.fits(ent); err != nil {
			e.finish(q, ent.status(), err)
			return true, nil
		}
		switch {
		case !ent.rdv:
			copy(q.dst, ent.data)
			c.removeAt(i)
			e.queued -= ent.bytes + entryCost
			e.finish(q, ent.status(), nil)
			return true, nil
		case ent.buffering:
			copy(q.dst, ent.data[:ent.got])
			e.queued -= ent.bytes
			ent.data, ent.buffering, ent.taker, q.ent = nil, false, q, ent
			return true, nil
		}
		if err := e.overCap(ent); err != nil {
			e.finish(q, ent.status(), err)
			return true, nil
		}
		if !e.claimable(ent) {
			q.blocked = true // until a claim word is free (rematch)
			return false, nil
		}
		if err := c.match(q, ent); err != nil {
			return false, err
		}
		return true, nil
	}
	q.blocked = false
	return false, nil
}

// claimable reports whether this PE has a free claim word on the sender
// of rendezvous message ent, so that a receive may match it now.
func (e *engine) claimable(ent *entry) bool { return e.claimUsed[ent.wsrc] != 1<<claimsPer-1 }

// claimUsed's masks are uint8: claimsPer above 8 fails to compile here.
const _ uint8 = 1<<claimsPer - 1

// overCap is the error of a receive that would match rendezvous message
// ent while the unexpected queue is over its cap: only a match can take
// the queue beyond it (a receive that ends after the message's sender
// committed leaves it buffered there: see Comm.cancel), so while it is
// over, no match is made and the excess stays bounded.
func (e *engine) overCap(ent *entry) error {
	if e.queued <= e.cap {
		return nil
	}
	return fmt.Errorf("ring: Recv on PE %d of a %d-byte rendezvous message (tag %d, from rank %d): the unexpected queue holds %d bytes, over its cap of %d (messages left buffered by receives that ended: receive them first): %w",
		e.me, ent.bytes, ent.tag, ent.src, e.queued, e.cap, ErrQueueFull)
}

// match claims rendezvous message ent for q: it takes a free claim
// word of this PE's on the sender (the caller checked claimable) and
// sets it to matched (id, a new epoch), then, beyond watchLanes+1 PEs,
// rings the sender's doorbell. The set is a swap, whose old value is of
// no use: over TCP a fetching atomic is written at once, where a
// non-fetching one waits in the link's cork queue for this PE's next
// write or wait (after it copied the early frags that follow the rts). The sender decides: it sends the frags
// of that epoch and commits, or withdraws the message (an abort).
//
// The new epoch is the next one, except for a first match: the sender
// sends its first frags before any match, tagged specEpoch (1). A first
// match made before any of them was taken (they come after the rts in
// its lane: a receive posted when the rts arrives, or one that finds it
// queued while its frags are still in the lane) takes them all: epoch
// 1, and the sender goes on from where it is. A first match made after
// one was dropped (spilled) is epoch 2: the early frags still on their
// way are dropped too, and the sender starts again from the first byte.
func (c *Comm) match(q *request, ent *entry) error {
	e := c.e
	next := ent.epoch + 1
	if ent.epoch == 0 && ent.spilled {
		next = specEpoch + 1
	}
	j := bits.TrailingZeros8(^e.claimUsed[ent.wsrc])
	if _, err := shmem.AtomicSwap(e.rdv, e.me*claimsPer+j, rdvWord(ent.id, next, rdvMatched), ent.wsrc); err != nil {
		return fmt.Errorf("ring: Comm on PE %d: claiming a %d-byte message from PE %d: %w", e.me, ent.bytes, ent.wsrc, err)
	}
	e.claimUsed[ent.wsrc] |= 1 << j
	ent.claimed, ent.claim, ent.epoch = true, j, next
	ent.taker, ent.got, q.ent = q, 0, ent
	if !e.bellMsgs {
		return nil // the sender's wait watches its claim words
	}
	return e.ringBell(ent.wsrc)
}

// cancel withdraws q, which ended before it completed: off the posted
// list, and a rendezvous message it was taking goes back to its place in
// the queue (or, if its sender already committed, is buffered there).
func (c *Comm) cancel(q *request) error {
	if q.posted {
		for i, p := range c.posted {
			if p == q {
				c.unpost(i)
				break
			}
		}
	}
	ent := q.ent
	if ent == nil {
		return nil
	}
	e := c.e
	q.ent, ent.taker = nil, nil
	defer e.rematch()
	cond := rdvWord(ent.id, ent.epoch, rdvMatched)
	old, err := shmem.AtomicCompareSwap(e.rdv, e.me*claimsPer+ent.claim, cond, rdvWord(ent.id, ent.epoch, rdvGiven), ent.wsrc)
	if err != nil {
		c.drop(ent)
		return err
	}
	switch old {
	case cond:
		// Given back: the frags of this epoch still on their way are
		// dropped, and the sender waits for the next match. The claim
		// word is free: the sender compares it with what it matched
		// before it sends or commits.
		e.unclaim(ent)
		return nil
	case rdvWord(ent.id, ent.epoch, rdvDone):
		// The sender committed (its Send returns nil), so the message
		// must be kept, whatever the cap: what has arrived is copied
		// into a buffer and the rest follows into it. This is the one
		// way the queue goes beyond its cap, and while it is beyond, no
		// receive matches a rendezvous message (overCap): the excess is
		// at most the messages this PE was taking when it crossed the
		// cap, claimsPer per source.
		ent.data = make([]byte, ent.bytes)
		copy(ent.data, q.dst[:ent.got])
		ent.buffering = true
		e.queued += ent.bytes
		if ent.got == ent.bytes {
			e.forget(ent)
			ent.rdv, ent.buffering = false, false
		}
		return nil
	}
	c.drop(ent)
	return fmt.Errorf("ring: Comm on PE %d: the claim word of a message from PE %d holds %#x, want %#x (matched) or done: %w", e.me, ent.wsrc, old, cond, shmem.ErrProtocol)
}

// rematch runs every posted receive of every Comm of the engine against
// its queue again, after a message was taken, given back or dropped (a
// claim word freed by one Comm's receive may unblock another's).
func (e *engine) rematch() {
	if c := e.root; c != nil && len(e.comms) == 1 {
		c.rematch()
		return
	}
	for _, c := range e.comms {
		c.rematch()
	}
}

// rematch runs every posted receive against the queue again.
func (c *Comm) rematch() {
	for i := 0; i < len(c.posted); {
		q := c.posted[i]
		q.blocked = false
		settled, err := c.search(q)
		if err != nil {
			c.unpost(i)
			c.e.finish(q, Status{}, err)
			continue
		}
		if settled {
			c.unpost(i)
			continue
		}
		i++
	}
}

func (c *Comm) unpost(i int) {
	c.posted[i].posted = false
	c.posted = append(c.posted[:i], c.posted[i+1:]...)
}

func (c *Comm) removeAt(i int) { c.unexp = append(c.unexp[:i], c.unexp[i+1:]...) }

func (c *Comm) remove(ent *entry) {
	for i, x := range c.unexp {
		if x == ent {
			c.removeAt(i)
			if ent.rdv {
				c.e.queued -= entryCost
			}
			return
		}
	}
}

// forget: no more frags of rendezvous message ent will be taken (it
// arrived whole, or is dropped). It leaves rdvIn, and its claim word is
// free: its sender writes the word no more (it committed before its last
// frag, or withdrew the message before its abort).
func (e *engine) forget(ent *entry) {
	if k := (rdvKey{ent.wsrc, ent.id}); e.rdvIn[k] == ent {
		delete(e.rdvIn, k)
	}
	e.unclaim(ent)
}

// unclaim frees ent's claim word, if it holds one.
func (e *engine) unclaim(ent *entry) {
	if ent.claimed {
		e.claimUsed[ent.wsrc] &^= 1 << ent.claim
		ent.claimed = false
	}
}

// drop forgets a rendezvous message (its sender withdrew it).
func (c *Comm) drop(ent *entry) {
	c.e.forget(ent)
	if ent.taker != nil {
		ent.taker.ent = nil
		ent.taker = nil
	}
	if ent.buffering {
		c.e.queued -= ent.bytes
	}
	c.remove(ent)
}

// stuck reports whether q could be waiting for a message the cap holds
// back in a lane.
func (c *Comm) stuck(q *request) bool {
	if !c.e.capped {
		return false
	}
	for src, l := range c.e.lanes {
		if l.held() && (q.from == AnySource || c.world[q.from] == src) {
			return true
		}
	}
	return false
}

// reqPool recycles requests: once recv returns, nothing refers to its
// request (it is off the posted list and takes no message).
var reqPool = sync.Pool{New: func() any { return new(request) }}

// recv runs Recv or Probe r to its end.
func (e *engine) recv(ctx context.Context, c *Comm, r request) (Status, error) {
	q := reqPool.Get().(*request)
	*q = r
	var w waiter
	st, err := e.recvReq(ctx, c, q, &w)
	w.done(e)
	*q = request{}
	reqPool.Put(q)
	return st, err
}

// recvReq is recv's loop for request q, waiting with w.
func (e *engine) recvReq(ctx context.Context, c *Comm, q *request, w *waiter) (Status, error) {
	what := "Recv"
	if q.probe {
		what = "Probe"
	}
	// gone is 1 + the world PE whose finalizing bit was seen before
	// this look (depOf; 0: none).
	gone := 0
	for held := false; ; {
		if !held {
			if err := e.lock(); err != nil {
				return Status{}, ctxErr(what, err)
			}
		}
		w.mark(e)
		e.cur = q
		// Look in the queue, and post the receive if it is not there,
		// before taking what arrived: an arrival that matches then goes
		// straight into dst.
		var err error
		if q.probe && !q.posted {
			// A Probe takes what has arrived first: an abort of a
			// withdrawn rendezvous message then drops it before the
			// Probe could report it.
			err = e.progress()
		}
		if err == nil && !q.done && !q.posted && q.ent == nil {
			var settled bool
			if settled, err = c.search(q); err == nil && !settled {
				q.posted = true
				c.posted = append(c.posted, q)
			}
		}
		if err == nil {
			err = e.progress()
		}
		if q.done {
			e.unlock()
			return q.st, q.err
		}
		if err == nil {
			err = ctx.Err()
		}
		if err == nil && gone > 0 && e.depOf(c, q) == gone {
			err = departedErr(gone - 1)
		}
		if err == nil && c.stuck(q) {
			err = fmt.Errorf("ring: %s on PE %d (from %d, tag %d): %d bytes of unexpected messages are queued, the cap is %d, and the message may be behind them: %w",
				what, e.me, q.from, q.tag, e.queued, e.cap, ErrQueueFull)
		}
		if err == nil {
			err = e.idleAcks()
		}
		if err != nil {
			cerr := c.cancel(q)
			e.unlock()
			if cerr != nil {
				return Status{}, fmt.Errorf("ring: %s: %w (and giving back a message: %v)", what, err, cerr)
			}
			return Status{}, ctxErr(what, err)
		}
		w.dep = e.depOf(c, q)
		if w.dep > 0 && w.dep != gone && e.pe.Departed(w.dep-1) {
			// The source has begun Finalize: its bit came after every
			// message it sent, so one more look finds them all, or the
			// receive gives up (above).
			gone, held = w.dep, true
			continue
		}
		e.unlock()
		if e.corks {
			e.waits.Add(1)
		}
		if held, err = w.waitKeep(ctx, e, true); err != nil {
			if lerr := e.lock(); lerr != nil {
				return Status{}, ctxErr(what, err)
			}
			if q.done { // completed meanwhile: it counts
				e.unlock()
				return q.st, q.err
			}
			cerr := c.cancel(q)
			e.unlock()
			if cerr != nil {
				return Status{}, fmt.Errorf("ring: %s: %w (and giving back a message: %v)", what, err, cerr)
			}
			return Status{}, ctxErr(what, err)
		}
	}
}

// ---- sending side ----

// send sends data (team rank to, world PE dst) as one message.
func (e *engine) send(ctx context.Context, c *Comm, to, tag int, kind uint8, data []byte) error {
	dst := c.world[to]
	if dst == e.me {
		return e.sendSelf(c, tag, kind, data)
	}
	if len(data) <= e.eagerMax {
		return e.sendEager(ctx, c, dst, tag, kind, data)
	}
	if uint64(len(data)) > maxMessage {
		return fmt.Errorf("ring: Send of %d bytes: the longest message is %d bytes: %w", len(data), uint64(maxMessage), shmem.ErrInvalid)
	}
	return e.sendRdv(ctx, c, dst, tag, kind, data)
}

// trySend sends an eager message if its lane has room now.
func (e *engine) trySend(c *Comm, to, tag int, kind uint8, data []byte) (bool, error) {
	dst := c.world[to]
	if dst == e.me {
		return true, e.sendSelf(c, tag, kind, data)
	}
	if len(data) > e.eagerMax {
		return false, nil
	}
	var h [hdrEager]byte
	putEager(h[:], kind, c.id, tag, len(data))
	if err := e.hold(); err != nil {
		return false, err
	}
	defer e.pe.Exit()
	_, sent, err := e.r.outTo[dst].sendv(e.r, h[:], data, false)
	return sent, err
}

// sendSelf delivers a message to this PE: to a posted receive, or into
// the queue (within its cap).
func (e *engine) sendSelf(c *Comm, tag int, kind uint8, data []byte) error {
	if err := e.lock(); err != nil {
		return err
	}
	ent := &entry{src: c.me, wsrc: e.me, tag: tag, kind: kind, bytes: len(data), data: data}
	done, err := c.offer(ent)
	if err == nil && !done {
		if e.queued+len(data)+entryCost > e.cap {
			err = fmt.Errorf("ring: Send of %d bytes to this PE: %d bytes of unexpected messages are queued, the cap is %d: %w",
				len(data), e.queued, e.cap, ErrQueueFull)
		} else {
			ent.data = bytes.Clone(data)
			e.queued += len(data) + entryCost
			c.unexp = append(c.unexp, ent)
			e.kick = true // a Probe or Recv of another goroutine may be waiting
		}
	}
	e.unlock()
	return err
}

// sendOn sends hdr+data on the lane to world PE dst, waiting (ctx
// bounded) for room, and taking this PE's own messages meanwhile so that
// two PEs that fill each other's lanes do not wait for each other.
func (e *engine) sendOn(ctx context.Context, w *waiter, dst int, hdr, data []byte) error {
	l := e.r.outTo[dst]
	w.dep = dst + 1
	// The first try needs no mark: only one that finds no room waits,
	// and it tries again after marking.
	for marked := false; ; marked = true {
		if err := e.hold(); err != nil {
			return err
		}
		gone := false
		if marked {
			w.mark(e)
			// Read before the try: dst's acknowledgements made before
			// its Finalize began are here for it.
			gone = e.pe.Departed(dst)
		}
		_, sent, err := l.sendv(e.r, hdr, data, false)
		e.pe.Exit()
		if err != nil || sent || !marked {
			if err != nil || sent {
				return err
			}
			continue
		}
		if gone {
			return departedErr(dst)
		}
		if err := e.lock(); err != nil {
			return err
		}
		err = e.progress()
		if err == nil {
			err = e.idleAcks()
		}
		e.unlock()
		if err != nil {
			return err
		}
		if err := w.wait(ctx, e); err != nil {
			return err
		}
	}
}

func (e *engine) sendEager(ctx context.Context, c *Comm, dst, tag int, kind uint8, data []byte) error {
	var h [hdrEager]byte
	putEager(h[:], kind, c.id, tag, len(data))
	w := waiter{acks: true}
	defer w.done(e)
	if err := e.sendOn(ctx, &w, dst, h[:], data); err != nil {
		return ctxErr("Send", err)
	}
	return nil
}

// scanClaims reads the claim words that world PE dst sets in this PE's
// heap and gives each new match to the rendezvous message it names, if
// this PE still sends that message to dst (a match of a withdrawn
// message is ignored: its abort tells the receiver). Holding the gate.
// Only a change since the last scan counts: a word keeps its last
// value until its receiver claims with it again, and (id, epoch) is
// never set twice (ids wrap after 2^32 messages, which is no concern
// for a word that is read on every change).
func (e *engine) scanClaims(dst int) {
	base := dst * claimsPer
	for i := base; i < base+claimsPer; i++ {
		v := atomic.LoadUint64(&e.rdvLocal[i])
		if v == e.claimSeen[i] {
			continue
		}
		e.claimSeen[i] = v
		if id, _, st := rdvSplit(v); st == rdvMatched {
			if s := e.sends[id]; s != nil && s.dst == dst {
				s.claim, s.v = i, v
			}
		}
	}
}

// sendRdv sends a message longer than the eager limit. It announces it
// (an rts on the lane, with an id of this PE's), sends its first frags
// at once (early: see spec below), and waits for a receiver's match: a
// claim word of the receiver's in this PE's heap set to matched (id,
// epoch). Then it sends the rest of the data in frags through the
// lane's bulk areas but the final frag, commits (a compare-and-swap of
// the claim word from matched to done) and sends the final frag. A match
// of epoch 1 took the early frags; any other epoch (a later first
// match, or a match after a receiver gave one back, matched → given
// back) restarts the stream from the first byte. ctx ending before the
// commit withdraws the message: an abort on the lane, after which the
// receiver drops it. A pending Send holds nothing but its place in the
// lane, so any number of them may wait for their receives.
func (e *engine) sendRdv(ctx context.Context, c *Comm, dst, tag int, kind uint8, data []byte) (err error) {
	w := waiter{acks: true, claims: dst + 1, dep: dst + 1}
	defer w.done(e)
	if err := e.lock(); err != nil {
		return ctxErr("Send", err)
	}
	e.sendSeq++
	if e.sendSeq == 0 {
		e.sendSeq++ // 0 names no message
	}
	s := &rdvSend{id: e.sendSeq, dst: dst, claim: -1}
	e.sends[s.id] = s
	e.unlock()
	defer func() {
		if e.lock() == nil {
			delete(e.sends, s.id)
			e.unlock()
		}
	}()
	var h [hdrLong]byte
	putLong(h[:], msgRTS, kind, c.id, tag, uint64(len(data)), s.id, 0)
	if err := e.sendOn(ctx, &w, dst, h[:], nil); err != nil {
		return ctxErr("Send", err) // not announced: nothing to withdraw
	}
	l := e.r.outTo[dst]
	// The early frags (before spec) go each only while fewer than
	// specFrags early frags of the lane (this message's or another's)
	// are unacknowledged (sendvEarly: the lane's other slots stay the
	// eager messages').
	frag := e.fragTo(dst)
	last, spec := rdvCut(len(data), frag)
	ep, off, matched := uint32(specEpoch), 0, false
	gone := false // dst's finalizing bit was seen before this look
	for {
		// One look at the claim words, and what they ask for, holding
		// the gate (the words are read in place).
		if err := e.enter(); err != nil {
			return ctxErr("Send", err)
		}
		w.mark(e)
		e.scanClaims(dst)
		if s.claim >= 0 && atomic.LoadUint64(&e.rdvLocal[s.claim]) != s.v {
			s.claim = -1 // given back
		}
		claimed := s.claim >= 0
		var v uint64
		if claimed {
			v, matched = s.v, true
			if _, epoch, _ := rdvSplit(v); epoch != ep {
				ep, off = epoch, 0
			}
		}
		moved := false
		early := !matched && off < spec
		if claimed || early {
			end, limit := last, 0
			if early {
				end, limit = spec, specFrags
			}
			for off < end && ctx.Err() == nil && (!claimed || atomic.LoadUint64(&e.rdvLocal[s.claim]) == v) {
				n := min(frag, end-off)
				putLong(h[:], msgFrag, kind, c.id, 0, uint64(off), s.id, ep)
				_, sent, err := l.sendvEarly(e.r, h[:], data[off:off+n], false, limit)
				if err != nil {
					e.exit()
					return ctxErr("Send", err)
				}
				if !sent {
					break
				}
				off += n
				moved = true
			}
			if claimed && off == last && ctx.Err() == nil {
				old, err := shmem.AtomicCompareSwap(e.rdv, s.claim, v, rdvWord(s.id, ep, rdvDone), e.me)
				if err == nil && old == v {
					delete(e.sends, s.id)
				}
				e.exit()
				if err != nil {
					return ctxErr("Send", err)
				}
				if old != v {
					continue // given back meanwhile: look again
				}
				// Committed: the final frag goes whatever ctx says (the
				// receiver drains its lanes, into dst or a buffer).
				putLong(h[:], msgFrag, kind, c.id, 0, uint64(last), s.id, ep)
				if err := e.sendOn(context.Background(), &w, dst, h[:], data[last:]); err != nil {
					return ctxErr("Send", err)
				}
				return nil
			}
		}
		e.exit()
		if moved && ctx.Err() == nil {
			continue
		}
		werr := ctx.Err()
		if werr == nil && gone {
			werr = departedErr(dst)
		}
		if werr == nil && e.pe.Departed(dst) {
			// dst has begun Finalize: its bit came after any match it
			// made, so one more look finds it, or the Send gives up.
			gone = true
			continue
		}
		if werr == nil {
			if werr = e.lock(); werr == nil {
				if werr = e.progress(); werr == nil {
					werr = e.idleAcks()
				}
				e.unlock()
			}
		}
		if werr == nil {
			if werr = w.wait(ctx, e); werr == nil {
				continue
			}
		}
		return e.withdraw(c, s, kind, werr)
	}
}

// rdvCut is how a rendezvous Send cuts a message of n bytes (more than
// the eager limit) into frags of up to frag bytes: they run from the
// first byte up to last, where the final frag begins: the last half of
// the message, or the last frag's worth if that is less. The final frag
// goes after the commit: a receive that has every byte knows the sender
// committed, so it may complete (and reuse its claim word) at once; the
// receiver copies out what came before it while it travels, and a
// message of up to two frags still sends half of itself before the
// match. Being at least half of a message above the eager limit (4 KiB
// at least), it is longer than corkMax, so it is published at once, not
// corked behind the sender's next wait. The frags before spec may go early, before any match, tagged
// specEpoch (sendRdv): whole frags, at most specFrags of them and
// specBytes (but at least one frag), never the final frag. A receive
// that matches as the rts arrives takes them (Comm.match), so a message
// whose receive is waiting does not wait a round trip for its first
// bytes; otherwise they are dropped.
func rdvCut(n, frag int) (last, spec int) {
	last = n - min(frag, (n+1)/2)
	return last, min(last, min(specFrags, max(1, specBytes/frag))*frag)
}

// withdraw ends rendezvous Send s, which has not committed, with werr
// (its ctx, or a failed wait): from now on this PE ignores matches of
// it, and an abort on the lane, after every frag sent, tells the
// receiver to drop it (a receive taking it matches again). The abort
// waits for room on the lane if it must (one inline slot, which the
// receiver frees by taking its messages), bounded by the PE's timeout.
func (e *engine) withdraw(c *Comm, s *rdvSend, kind uint8, werr error) error {
	if err := e.lock(); err == nil {
		delete(e.sends, s.id)
		e.unlock()
	}
	var h [hdrLong]byte
	putLong(h[:], msgAbort, kind, c.id, 0, 0, s.id, 0)
	aw := waiter{acks: true}
	err := e.sendOn(context.Background(), &aw, s.dst, h[:], nil)
	aw.done(e)
	if err != nil {
		return ctxErr("Send", fmt.Errorf("%w (and telling the receiver: %v)", werr, err))
	}
	return ctxErr("Send", werr)
}
