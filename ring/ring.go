package ring

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// Lane is a directed message channel from PE From to PE To: Depth slots
// of Capacity payload bytes, in To's heap.
type Lane struct{ From, To, Depth, Capacity int }

// Mode says what a full lane does.
type Mode int

const (
	// Safe lanes are acknowledgement-gated: a lane holds up to Depth
	// unacknowledged messages and Send waits beyond that. Nothing is
	// lost.
	Safe Mode = 1
	// Raw lanes never make the sender wait: it overwrites the oldest
	// slot. A receiver that was lapped gets the newest Depth messages in
	// order, and Stats().Lost counts the overwritten ones exactly.
	Raw Mode = 2
)

func (m Mode) String() string {
	switch m {
	case Safe:
		return "Safe"
	case Raw:
		return "Raw"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Message is one received message: its sender, its sequence number on
// the lane from that sender (1, 2, ...) and its payload. In Safe mode
// Data aliases the receiver's symmetric heap and is valid until the
// message is acknowledged (Ack of Seq or later) or the ring closed; in
// Raw mode it is a copy that stays valid. See the package caveats.
type Message struct {
	Origin int
	Seq    uint64
	Data   []byte
}

// Stats are a ring's counters on this PE, since New.
type Stats struct {
	Lost     uint64        // Raw: messages overwritten before this PE received them
	Corrupt  uint64        // messages whose slot stayed invalid after their put completed
	MaxLag   uint64        // the most sequence numbers one Poll (or Recv) advanced one lane
	Waits    uint64        // Safe: Sends that waited for an acknowledgement
	WaitTime time.Duration // the time those Sends waited
}

// Ring is one PE's handle on a set of lanes created together by New.
// Send, Poll, Recv, Ack and Stats are safe for concurrent use; Close is
// not.
type Ring struct {
	pe    *shmem.PE
	mode  Mode
	words shmem.Sym[uint64]
	extra shmem.Sym[uint64] // the words after the lanes' (newRingBell)
	data  shmem.Sym[byte]

	out   []*sendLane // lanes from this PE, in lanes order
	outTo []*sendLane // indexed by To; nil where there is no lane
	in    []*recvLane // lanes to this PE, in lanes order
	inFr  []*recvLane // indexed by From

	bell     shmem.Sym[uint64] // this PE's doorbell word
	bellWord *uint64
	useBell  bool // more than one incoming lane: Recv sleeps on the doorbell, not on a pub word
	sender   int  // the world PE every incoming lane comes from, when that is one PE other than this one; else -1
	spin     bool // this host has a CPU per PE: Recv polls for a while before it sleeps

	rmu sync.Mutex // guards the receive side: every recvLane's state and rr
	rr  int        // the incoming lane Recv looks at first

	closed  atomic.Bool
	lost    atomic.Uint64
	corrupt atomic.Uint64
	maxLag  atomic.Uint64
	waits   atomic.Uint64
	waitNs  atomic.Int64
}

// New creates the lanes on every PE (collective: every PE calls it with
// the same lanes and mode). It checks, on every PE alike, that the PEs
// agree (ErrAsymmetric otherwise) and that every lane is valid: both
// PEs in the job (ErrBadPE), not from a PE to itself, depth and capacity
// in range, no pair of PEs listed twice (ErrInvalid), and the whole ring
// within the heap (ErrHeapExhausted). On any error nothing stays
// allocated. A PE may be in no lane; it still calls New and Close.
func New(pe *shmem.PE, lanes []Lane, mode Mode) (*Ring, error) {
	return newRing(pe, lanes, mode, InlineMax)
}

// newRing is New with the inline limit as a parameter, for tests and
// benchmarks that move the crossover. It is part of the agreement.
func newRing(pe *shmem.PE, lanes []Lane, mode Mode, inlineMax int) (*Ring, error) {
	return newRingBell(pe, lanes, mode, inlineMax, bellShared, 0, 0)
}

// bellRule says which messages ring their receiver's doorbell.
type bellRule uint8

const (
	// bellShared: every message to a PE with more than one incoming
	// lane (Recv there sleeps on the doorbell, else on the pub word).
	bellShared bellRule = iota
	// bellAlways: every message (a Comm whose waits watch the doorbell
	// alone: one of more PEs than a wait watches lanes, watchLanes).
	bellAlways
	// bellNever: no message (a Comm whose waits watch every incoming
	// lane's pub word themselves). Such a ring is never Recv'd.
	bellNever
)

// newRingBell is newRing with the doorbell rule as a parameter, and
// extra words of the caller's after the lanes' in the words object
// (Ring.extra): a Comm's rendezvous state words, which its waits watch
// in the same WaitUntilAnyVector as the lanes' words. bulks, when
// positive, is how many bulk areas each lane has (Safe mode only; a
// lane of lower depth has Depth): a Comm's lanes are deeper in slots,
// which an inline message takes, than in bulk areas (layout.go).
func newRingBell(pe *shmem.PE, lanes []Lane, mode Mode, inlineMax int, bell bellRule, extra, bulks int) (*Ring, error) {
	if pe == nil {
		return nil, fmt.Errorf("ring: New on a nil PE: %w", shmem.ErrInvalid)
	}
	return newRingOver(pe.World(), lanes, mode, inlineMax, bell, extra, bulks)
}

// newRingOver is newRingBell over team t: collective over t's members
// only, its memory allocated over t (shmem.TeamMalloc). The lanes name
// world PEs, every one a member of t (ErrBadPE otherwise, on every
// member). A Comm over a team makes its ring so.
func newRingOver(t *shmem.Team, lanes []Lane, mode Mode, inlineMax int, bell bellRule, extra, bulks int) (*Ring, error) {
	pe := t.PE()
	if bulks < 0 || (bulks > 0 && mode != Safe) {
		// Raw mode tells a lapped slot by pub alone, which says nothing
		// of an area reused sooner than its slot.
		return nil, fmt.Errorf("ring: %d bulk areas per lane in mode %v (fewer bulk areas than slots need Safe mode): %w", bulks, mode, shmem.ErrInvalid)
	}
	if err := agree(t, descriptor(lanes, mode, inlineMax, bulks)); err != nil {
		return nil, err
	}
	// From here every PE has the same arguments, so every check below
	// fails on every PE or on none.
	if err := validate(lanes, mode, pe.NPEs()); err != nil {
		return nil, err
	}
	if t.NPEs() != pe.NPEs() {
		if err := validateMembers(lanes, t); err != nil {
			return nil, err
		}
	}
	info := pe.Info()
	lay, err := computeLayout(lanes, pe.NPEs(), info.CacheLine, inlineMax, bulks, info.HeapSize)
	if err != nil {
		return nil, err
	}
	words, err := shmem.TeamMalloc[uint64](t, lay.wordsLen+extra)
	if err != nil {
		return nil, fmt.Errorf("ring: %d words per PE: %w", lay.wordsLen+extra, err)
	}
	data, err := shmem.TeamMalloc[byte](t, lay.dataLen)
	if err != nil {
		if ferr := shmem.Free(words); ferr != nil {
			return nil, fmt.Errorf("ring: %d bytes per PE: %w (and freeing the words: %v)", lay.dataLen, err, ferr)
		}
		return nil, fmt.Errorf("ring: %d bytes of slots per PE: %w", lay.dataLen, err)
	}
	r := &Ring{pe: pe, mode: mode, words: words, data: data,
		outTo: make([]*sendLane, pe.NPEs()), inFr: make([]*recvLane, pe.NPEs()),
		spin: !info.Oversubscribed}
	me := pe.MyPE()
	wl := words.Local()
	r.bell = words.Slice(0, 1)
	r.extra = words.Slice(lay.wordsLen, lay.wordsLen+extra)
	r.bellWord = &wl[0]
	for i, l := range lanes {
		ll := lay.lanes[i]
		switch me {
		case l.From:
			s := &sendLane{lane: l, depth: uint64(l.Depth), bulks: uint64(ll.bulks), lay: ll, data: data,
				pub: words.Slice(ll.pubIdx, ll.pubIdx+1), bell: r.bell,
				ack: words.Slice(ll.ackIdx, ll.ackIdx+1), ackWord: &wl[ll.ackIdx],
				ringBell: bell == bellAlways || (bell == bellShared && ll.inLanes > 1), next: 1, stage: make([]byte, ll.slotSize)}
			r.out = append(r.out, s)
			r.outTo[l.To] = s
		case l.To:
			rl := &recvLane{lane: l, depth: uint64(l.Depth), bulks: uint64(ll.bulks), lay: ll, mode: mode,
				mem: data.Local(), pubWord: &wl[ll.pubIdx], pub: words.Slice(ll.pubIdx, ll.pubIdx+1),
				ack: words.Slice(ll.ackIdx, ll.ackIdx+1), next: 1}
			if mode == Raw {
				rl.scratch = make([]byte, ll.slotSize)
			}
			r.in = append(r.in, rl)
			r.inFr[l.From] = rl
		}
	}
	r.useBell = bell == bellAlways || len(r.in) > 1
	r.sender = -1
	for i, l := range r.in {
		if i == 0 && l.lane.From != pe.MyPE() {
			r.sender = l.lane.From
		} else if l.lane.From != r.sender {
			r.sender = -1
			break
		}
	}
	return r, nil
}

// usable is nil while the ring is open.
func (r *Ring) usable() error {
	if r == nil {
		return fmt.Errorf("ring: nil Ring: %w", shmem.ErrInvalid)
	}
	if r.closed.Load() {
		return fmt.Errorf("ring: the ring on PE %d is closed: %w", r.pe.MyPE(), shmem.ErrFinalized)
	}
	return nil
}

// Send sends data as the next message on the lane from this PE to PE
// to, and returns its sequence number. data may be reused when Send
// returns. In Safe mode Send waits (spinning, then sleeping) while the
// lane holds Depth unacknowledged messages; in Raw mode it never waits.
// Over shared memory a Send that does not wait allocates nothing.
func (r *Ring) Send(to int, data []byte) (uint64, error) {
	if err := r.usable(); err != nil {
		return 0, err
	}
	if uint(to) >= uint(len(r.outTo)) || r.outTo[to] == nil {
		return 0, fmt.Errorf("ring: Send from PE %d to PE %d: there is no such lane: %w", r.pe.MyPE(), to, shmem.ErrInvalid)
	}
	if err := r.enter(); err != nil {
		return 0, err
	}
	defer r.pe.Exit()
	return r.outTo[to].send(r, data)
}

// enter keeps the PE's memory mapped (shmem's PE.Enter) while a call
// reads or writes the lanes' words and slots in place; pair it with
// r.pe.Exit. The waits inside (shmem.WaitUntil) end with ErrFinalized
// when Finalize begins, so a call never holds Finalize up for long.
func (r *Ring) enter() error {
	if err := r.pe.Enter(); err != nil {
		return fmt.Errorf("ring: PE %d: %w", r.pe.MyPE(), err)
	}
	return nil
}

// Poll returns every message that has arrived on this PE's lanes and was
// not yet returned, each lane's in sequence order. It never blocks and
// reads only this PE's memory. On corruption or a broken lane it returns
// the messages it could deliver together with the error (like
// io.Reader: use the messages, then look at the error). A corrupt
// message is counted in Stats().Corrupt and skipped; it counts as
// received for Ack.
func (r *Ring) Poll() ([]Message, error) {
	return r.PollAppend(nil)
}

// PollAppend is Poll appending to dst, so that a caller who reuses dst
// polls without allocating (Safe mode).
func (r *Ring) PollAppend(dst []Message) ([]Message, error) {
	if err := r.usable(); err != nil {
		return dst, err
	}
	if err := r.enter(); err != nil {
		return dst, err
	}
	defer r.pe.Exit()
	r.rmu.Lock()
	defer r.rmu.Unlock()
	return r.pollEntered(dst)
}

// pollEntered is PollAppend for a caller that holds the PE entered and
// rmu, or that serializes every receive-side call itself (a Comm's gate,
// which is also the only user of its ring), and knows the ring open.
func (r *Ring) pollEntered(dst []Message) ([]Message, error) {
	for _, l := range r.in {
		var err error
		if dst, err = l.poll(r, dst, int(l.depth)); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// recvOne takes the next message of the first lane, in round-robin
// order, that has one. When there is none it returns the pub value that
// would mean a message on the first lane (for a PE with one incoming
// lane).
func (r *Ring) recvOne() (Message, bool, uint64, error) {
	var buf [1]Message
	r.rmu.Lock()
	defer r.rmu.Unlock()
	for i := range r.in {
		l := r.in[(r.rr+i)%len(r.in)]
		got, err := l.poll(r, buf[:0], 1)
		if len(got) == 1 {
			r.rr = (r.rr + i + 1) % len(r.in)
			return got[0], true, 0, err
		}
		if err != nil {
			return Message{}, false, 0, err
		}
	}
	return Message{}, false, r.in[0].next, nil
}

// recvSpin is how many loads a spinning wait makes between looks at
// the clock (Recv's spinFor) or at its gate (a Comm's, engine.spinFor).
const recvSpin = 512

// recvSpinFor bounds Recv's own spin, when the host has a CPU for every
// PE, before it calls shmem.WaitUntil (which spins about as long again
// on the word alone, then yields, then sleeps). Spinning here, Recv also
// loads the next slot's lines (spinFor), so a reply that lands within
// it is read in the round its pub word comes over; shmem's spin does
// not know the slot. 8-byte ping-pong over shared memory, slow state,
// two processes: 455-563 ns against 666-683 with 512 loads and no more
// (docs/performance.md, "Recv's spin bounded by time"). It spins as
// long as shmem's own wait does, and no spin happens where the PEs
// outnumber the CPUs.
const recvSpinFor = 4 * time.Microsecond

// Recv returns the next message from any of this PE's lanes, waiting for
// one on a word the senders advance after each message (the lane's pub
// word when the PE has one incoming lane, else the PE's doorbell): a
// short spin, then shmem.WaitUntil (spin, yield, then sleep). It ends with the
// shmem error (ErrPeerLost, ErrTimeout) when a peer is lost or the PE's
// timeout passes with nothing arriving, with ErrPeerLost once every
// incoming lane's sender (when that is one PE, not this one) has begun
// Finalize and nothing it sent is left, and with an error on corruption
// as Poll does.
func (r *Ring) Recv() (Message, error) {
	if err := r.usable(); err != nil {
		return Message{}, err
	}
	if len(r.in) == 0 {
		return Message{}, fmt.Errorf("ring: Recv on PE %d, which no lane leads to: %w", r.pe.MyPE(), shmem.ErrInvalid)
	}
	if err := r.enter(); err != nil {
		return Message{}, err
	}
	defer r.pe.Exit()
	gone := false // the one sender's finalizing bit was seen before this look
	for {
		// Read the doorbell before looking: a message that arrives after
		// the look rings it past this value.
		var bell uint64
		if r.useBell {
			bell = atomic.LoadUint64(r.bellWord)
		}
		m, ok, want, err := r.recvOne()
		if ok || err != nil {
			return m, err
		}
		slot := r.in[0].slotWords(want) // want is in[0]'s next message
		if gone {
			return Message{}, fmt.Errorf("ring: Recv on PE %d: its lanes' only sender, PE %d, has begun Finalize: %w",
				r.pe.MyPE(), r.sender, shmem.ErrPeerLost)
		}
		// Wait until word >= want.
		word, sym := r.in[0].pubWord, r.in[0].pub
		if r.useBell {
			word, sym, want = r.bellWord, r.bell, bell+1
		}
		if r.spin && spinFor(word, want, slot) {
			continue
		}
		if err := r.usable(); err != nil {
			return Message{}, err
		}
		if r.sender >= 0 && r.pe.Departed(r.sender) {
			// Its bit came after every message it sent: one more look
			// finds them all, or Recv gives up (above).
			gone = true
			continue
		}
		vs := [1]uint64{want}
		if _, err := shmem.WaitUntilAnyVectorFrom(sym, nil, shmem.CmpGE, vs[:], r.sender); err != nil {
			return Message{}, fmt.Errorf("ring: Recv on PE %d: %w", r.pe.MyPE(), err)
		}
	}
}

// spinFor loads *word until it is >= want, recvSpin times and then for
// about recvSpinFor more, and reports whether it got there. It only
// loads (no store of the receiver's takes a line from the sender while
// it writes).
//
// With the word it loads the first and last words of slot, the slot of the
// message it waits for (a message reads those, or, in a slot of one
// line, all of it): once the sender has written the slot, its lines
// come over in the same round as the word's, instead of one after the
// other when the message is read.
func spinFor(word *uint64, want uint64, slot [2]*uint64) bool {
	var start time.Time
	for {
		for i := 0; i < recvSpin; i++ {
			if atomic.LoadUint64(word) >= want {
				return true
			}
			atomic.LoadUint64(slot[0])
			atomic.LoadUint64(slot[1])
		}
		if start.IsZero() {
			start = time.Now()
		} else if time.Since(start) > recvSpinFor {
			return false
		}
	}
}

// Ack acknowledges every message up to seq on the lane from PE from
// (cumulative), freeing their slots for the sender, with one remote
// atomic add that Ack does not wait for. Acknowledging a message at or below one already
// acknowledged does nothing; acknowledging one not yet received (returned
// by Poll or Recv, or skipped as corrupt) is an error. Raw lanes take no
// acknowledgements.
func (r *Ring) Ack(from int, seq uint64) error {
	if err := r.usable(); err != nil {
		return err
	}
	if r.mode != Safe {
		return fmt.Errorf("ring: Ack on a %v ring: only Safe lanes are acknowledged: %w", r.mode, shmem.ErrInvalid)
	}
	if uint(from) >= uint(len(r.inFr)) || r.inFr[from] == nil {
		return fmt.Errorf("ring: Ack on PE %d of PE %d's messages: there is no such lane: %w", r.pe.MyPE(), from, shmem.ErrInvalid)
	}
	r.rmu.Lock()
	defer r.rmu.Unlock()
	return r.ackLocked(from, seq)
}

// ackLocked is Ack for a caller that holds rmu, or that serializes every
// receive-side call itself (a Comm's gate), and has checked from.
func (r *Ring) ackLocked(from int, seq uint64) error {
	l := r.inFr[from]
	if seq > l.given {
		return fmt.Errorf("ring: Ack of message %d on lane %d→%d, but only %d were received: %w",
			seq, l.lane.From, l.lane.To, l.given, shmem.ErrInvalid)
	}
	if seq <= l.acked {
		return nil
	}
	// AtomicAdd asks for no reply: over TCP the add travels in order on
	// the link without a round trip; over shared memory it is done on
	// return. (A fetching NBI add would need a destination word that
	// replies from several links write at once.)
	if err := shmem.AtomicAdd(l.ack, 0, seq-l.acked, from); err != nil {
		return fmt.Errorf("ring: Ack of message %d on lane %d→%d: %w", seq, l.lane.From, l.lane.To, err)
	}
	l.acked = seq
	return nil
}

// Stats returns this PE's counters.
func (r *Ring) Stats() Stats {
	return Stats{Lost: r.lost.Load(), Corrupt: r.corrupt.Load(), MaxLag: r.maxLag.Load(),
		Waits: r.waits.Load(), WaitTime: time.Duration(r.waitNs.Load())}
}

// Close frees the ring's heap space on every PE (collective). It first
// meets every PE, so messages sent before any PE entered Close were put
// completely. (A Comm's ring over a team: its members.) Messages' Data from Safe lanes are invalid afterwards, and
// every later call on the ring fails with ErrFinalized.
func (r *Ring) Close() error {
	if r == nil {
		return fmt.Errorf("ring: Close of a nil Ring: %w", shmem.ErrInvalid)
	}
	if r.closed.Swap(true) {
		return fmt.Errorf("ring: the ring on PE %d is already closed: %w", r.pe.MyPE(), shmem.ErrFinalized)
	}
	err := shmem.Free(r.data)
	if werr := shmem.Free(r.words); err == nil {
		err = werr
	}
	if err != nil {
		return fmt.Errorf("ring: Close on PE %d: %w", r.pe.MyPE(), err)
	}
	return nil
}
