package collective

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"

	"github.com/goshmem/goshmem/internal/testhook"
	"github.com/goshmem/goshmem/shmem"
)

// call is one collective call of this PE on a team, between
// BeginCollective and EndCollective.
type call struct {
	t     *shmem.Team
	pe    *shmem.PE
	n, me int               // team size, this PE's team index
	g     *geometry         // the team's (teamState), not copied per call
	words shmem.Sym[uint64] // the whole area, as words: the control words and the sequence words
	bytes shmem.Sym[uint8]  // the message buffers (from scratchOff)
	lw    []uint64          // words.Local()
	lb    []byte            // bytes.Local()
	algo  algo
	what  info   // the call, for error messages
	desc  uint64 // the call's descriptor (digest)
	// local is this PE's own argument error, if any; the call still
	// takes part in the entry exchange so the others learn of it.
	local error
	step  int  // the steps passed so far (reach)
	far   bool // some member's heap is not mapped here (spansHosts, once per team: teamState)
	nex   int  // the exchanges of this call so far
	// relayed has bit j set when member j's message of the latest
	// exchange is in the relay region (a gathered exchange's short
	// message) rather than in a flat buffer (inbox).
	relayed uint16
	stride  int // bytes from one member's relay entry to the next (fromEntries)
}

func (c *call) begin(t *shmem.Team) error {
	if err := t.BeginCollective(); err != nil {
		return err
	}
	c.t, c.pe = t, t.PE()
	c.n, c.me = t.NPEs(), t.MyPE()
	st := t.CollectiveState()
	ts, _ := (*st).(*teamState)
	if ts == nil {
		ts = c.newTeamState()
		*st = ts
	}
	c.words, c.bytes, c.lw, c.lb, c.far, c.g = ts.words, ts.bytes, ts.lw, ts.lb, ts.far, &ts.g
	if c.g.rounds > maxRounds || c.lw == nil || c.lb == nil {
		t.EndCollective(nil)
		return fmt.Errorf("collective: a team of %d PEs: at most %d are supported: %w", c.n, 1<<(maxRounds+1)-1, shmem.ErrInvalid)
	}
	if tracer != nil {
		tracer.note(c.pe, traceOp{kind: tBegin, word: -1})
	}
	if ts.algoOK {
		c.algo = ts.algo
		return nil
	}
	var err error
	c.algo, err = algoFromEnv()
	ts.algo, ts.algoOK = c.algo, err == nil
	c.fail(err)
	return nil
}

// teamState is what a call derives from its team alone, the same for
// every call on it: kept with the team (shmem.Team.CollectiveState).
type teamState struct {
	words shmem.Sym[uint64]
	bytes shmem.Sym[uint8]
	lw    []uint64
	lb    []byte
	far   bool
	g     geometry
	// algo is GOSHMEM_COLLECTIVE_ALGO as the team's first call with a
	// valid value read it (algoOK): read once per team, not per call
	// (os.Getenv takes a lock that the PEs of one process share, which
	// cost a 2-PE 8-byte AllReduce of goroutines a tenth of its time).
	// While the value is bad, every call reads it again.
	algo   algo
	algoOK bool
}

// newTeamState derives c's team's state; c has its team, PE and sizes.
func (c *call) newTeamState() *teamState {
	ts := new(teamState)
	var area shmem.Sym[uint8]
	ts.words, area = c.t.CollectiveArea()
	if area.Len() > scratchOff {
		ts.bytes = area.Slice(scratchOff, area.Len())
	}
	ts.lw, ts.lb = ts.words.Local(), ts.bytes.Local()
	ts.far = c.spansHosts()
	ts.g = newGeometry(c.n, len(ts.lb), ts.far)
	return ts
}

// end ends the call with its result err, which it returns (see
// shmem.Team.EndCollective).
func (c *call) end(err error) error {
	if tracer != nil {
		tracer.note(c.pe, traceOp{kind: tEnd, word: -1})
	}
	return c.t.EndCollective(err)
}

// useRD says whether a vector of size bytes of elemSize-byte elements
// goes through the scratch (reduceRD, broadcastRD): under auto when it
// fits one message (scratchMax), under rd whenever one element fits (in
// pieces).
func (c *call) useRD(size, elemSize int) bool {
	switch c.algo {
	case algoAuto:
		return size <= c.scratchMax()
	case algoRD:
		return elemSize <= c.g.payloadCap()
	}
	return false
}

// oneMessage says whether a payload of size bytes goes through a flat
// team's scratch in one exchange (FCollect, AllToAll): only under auto
// and rd, and only on flat teams, where every member's message reaches
// every other.
func (c *call) oneMessage(size int) bool {
	return c.g.flat && (c.algo == algoAuto || c.algo == algoRD) && size <= c.scratchMax()
}

// sameHostScratch is the largest message a team on one host sends
// through the scratch under auto. There the direct algorithm reads a
// peer's buffer in place, one copy across cores, for one more exchange,
// while the scratch costs two copies: with a core per member (2 members
// here) the scratch is slower from about 4 KiB (broadcast 0.63 against
// 1.00 µs), and with members sharing cores (4 on 2) an exchange is a
// hand-over of a core and the scratch is faster as far as it holds (2
// KiB: AllReduce 9.5 against 18 µs). docs/collectives.md, "Crossovers".
const sameHostScratch = 2048

// scratchMax is the largest vector (bytes) that auto sends through the
// scratch in one message: one message's payload on a team that spans
// hosts, where every exchange saved is a network round trip, and at
// most sameHostScratch on a team on one host. Every member of a team
// answers alike (spansHosts, read once per team into its teamState, then c.far).
func (c *call) scratchMax() int {
	if c.far {
		return c.g.payloadCap()
	}
	return min(c.g.payloadCap(), sameHostScratch)
}

// fail records this PE's first argument error.
func (c *call) fail(err error) {
	if c.local == nil {
		c.local = err
	}
}

// world is the world PE number of team member j.
func (c *call) world(j int) int { return c.t.WorldPE(j) }

// The algorithms GOSHMEM_COLLECTIVE_ALGO may force.
type algo uint8

const (
	algoAuto     algo = iota // by size: through the scratch when the vector fits one message
	algoRD                   // through the scratch at every size, in pieces of one message
	algoDirect               // never through the scratch: direct reads and writes of the buffers
	algoRing                 // as direct, with AllReduce by the ring (teams of 3 or more)
	algoPushRing             // as direct, with AllReduce by the pushing ring (3 or more) and Reduce by its reduce-scatter and a gather (3 or more; the chain on 2), dst apart from src
	algoHalving              // as direct, with AllReduce by recursive halving and doubling (4 or 8, dst apart from src)
	algoChain                // as direct, with Reduce by the chain (2 or more, dst apart from src)
)

const envAlgo = "GOSHMEM_COLLECTIVE_ALGO"

// algoFromEnv reads GOSHMEM_COLLECTIVE_ALGO. A team reads it at its
// first collective call and keeps a valid value for its life
// (teamState); a bad value fails the call, and the next call reads the
// variable again. Every PE of a team must see the same value when it
// reads it (the value is part of the call's descriptor, so PEs that
// differ all get ErrAsymmetric).
func algoFromEnv() (algo, error) {
	switch v := os.Getenv(envAlgo); v {
	case "", "auto":
		return algoAuto, nil
	case "rd":
		return algoRD, nil
	case "direct":
		return algoDirect, nil
	case "ring":
		return algoRing, nil
	case "pushring":
		return algoPushRing, nil
	case "halving":
		return algoHalving, nil
	case "chain":
		return algoChain, nil
	default:
		return algoAuto, fmt.Errorf("collective: %s=%q: want auto, rd, direct, ring, pushring, halving or chain: %w", envAlgo, v, shmem.ErrInvalid)
	}
}

// The collectives, as they appear in a call's descriptor.
const (
	collBroadcast = 1 + iota
	collReduce
	collAllReduce
	collInScan
	collExScan
	collFCollect
	collCollect
	collAllToAll
	collAllToAllS
)

// A descriptor is a 64-bit digest of a call's arguments that must agree
// on every member, the offsets of dst and src included: a member that
// passed another object would otherwise have the others write into it
// at the offsets of theirs. A member whose own arguments are wrong sends one of
// the small codes below instead; valid digests have the top bit set, so
// the minimum over the team is a code whenever any member is wrong.
const (
	codeInvalid     = 1 // shmem.ErrInvalid
	codeOutOfBounds = 2 // shmem.ErrOutOfBounds
	codeBadPE       = 3 // shmem.ErrBadPE
	validBit        = 1 << 63
)

// digest mixes each field on its own, by its position (an add and a
// multiplication by an odd constant of that position, which the CPU
// overlaps, where a chained FNV waited for each multiplication before
// the next: 8 % of a 1-PE AllReduce of 8 bytes in a profile, 5 % now), sums the
// products, and mixes the sum. Two argument sets that differ in one
// field always differ in the sum (the multiplier is odd), and the final
// mix is a bijection, so they differ in the digest but for its top bit.
func digest(fields ...uint64) uint64 {
	var h uint64
	for i, f := range fields {
		h += (f + 0x9e3779b97f4a7c15) * digestMul[i%len(digestMul)]
	}
	h ^= h >> 32
	h *= 0xd6e8feb86659fd93
	h ^= h >> 32
	return h | validBit
}

// digestMul are digest's odd multipliers, one per field position (a
// descriptor has at most eight fields).
var digestMul = [8]uint64{0x27ae6b1ff4bdb52b, 0x1a23b247c9cf23f5, 0xb37bc348ee6e708d, 0x24919a8d2502f9cb,
	0x54296609a57d26a5, 0x4ca564d74f811c2d, 0x065e28e21576139b, 0x9b73968414d2647f}

// header is the first 32 bytes of every exchange message: what the
// members learn about each other's calls. Merging takes the minimum and
// maximum of the descriptor (equal on every member iff all agree), the
// minimum of aux and the sum of sum, over every member exactly once.
type header struct {
	minDesc, maxDesc, minAux, sum uint64
}

func (h *header) merge(o header) {
	h.minDesc = min(h.minDesc, o.minDesc)
	h.maxDesc = max(h.maxDesc, o.maxDesc)
	h.minAux = min(h.minAux, o.minAux)
	h.sum += o.sum
}

func (h header) put(b []byte) {
	binary.LittleEndian.PutUint64(b[0:], h.minDesc)
	binary.LittleEndian.PutUint64(b[8:], h.maxDesc)
	binary.LittleEndian.PutUint64(b[16:], h.minAux)
	binary.LittleEndian.PutUint64(b[24:], h.sum)
}

func readHeader(b []byte) header {
	return header{
		minDesc: binary.LittleEndian.Uint64(b[0:]),
		maxDesc: binary.LittleEndian.Uint64(b[8:]),
		minAux:  binary.LittleEndian.Uint64(b[16:]),
		sum:     binary.LittleEndian.Uint64(b[24:]),
	}
}

// newHeader is this member's header for a call with descriptor desc.
func (c *call) newHeader(desc uint64) header {
	if c.local != nil {
		desc = codeOf(c.local)
	}
	return header{minDesc: desc, maxDesc: desc, minAux: math.MaxUint64}
}

func codeOf(err error) uint64 {
	switch {
	case errors.Is(err, shmem.ErrOutOfBounds):
		return codeOutOfBounds
	case errors.Is(err, shmem.ErrBadPE):
		return codeBadPE
	}
	return codeInvalid
}

// verdict turns the merged header of an entry exchange into the call's
// outcome, the same on every member: nil when every member's arguments
// were valid and agree.
func (c *call) verdict(h header) error {
	if c.local != nil {
		return c.local
	}
	if h.minDesc == h.maxDesc && h.minDesc&validBit != 0 {
		return nil
	}
	switch h.minDesc {
	case codeOutOfBounds:
		return fmt.Errorf("collective: %v on a %d-PE team: another member's buffer is too small: %w", c.what, c.n, shmem.ErrOutOfBounds)
	case codeBadPE:
		return fmt.Errorf("collective: %v on a %d-PE team: another member named a root outside the team: %w", c.what, c.n, shmem.ErrBadPE)
	case codeInvalid:
		return fmt.Errorf("collective: %v on a %d-PE team: another member's arguments are invalid: %w", c.what, c.n, shmem.ErrInvalid)
	}
	return fmt.Errorf("collective: %v on a %d-PE team: members passed different counts, roots, operators, element types or algorithms: %w",
		c.what, c.n, shmem.ErrAsymmetric)
}

// exchange is one exchange over the team: flat, gathered through member
// 0 (a call's first on a team of 4 to 8 that spans hosts:
// exchangeGather) or by recursive doubling (geometry). msg holds this
// member's header (first hdrBytes) and payload; on return it holds the
// merged header and the payload as
// merge left it. merge is called with each message received (header and
// payload, as long as msg) and must fold its payload into msg's; it sees
// msg's header before the received one is merged in. merge may be nil
// for header-only messages, and callers that need the messages in rank
// order use a flat team's inbox instead.
//
// The exchange is also a barrier: it returns only after every member has
// started it. It touches no user buffer, so it needs no entry handshake:
// a message for exchange k goes to a buffer of parity k%2 that its
// receiver last read in exchange k-2, and the sender has since received
// the receiver's message of exchange k-1, which the receiver sent after
// finishing k-2.
func (c *call) exchange(msg []byte, merge func(in []byte)) error {
	g := c.g
	if g.n == 1 {
		return nil
	}
	if len(msg) > g.slotBytes {
		panic(fmt.Sprintf("collective: a %d-byte message for %d-byte buffers", len(msg), g.slotBytes))
	}
	c.reach()
	k := c.lw[wordSeq] + 1
	c.lw[wordSeq] = k
	par := int(k % 2)
	me := c.me
	gather := c.gathers()
	c.nex++
	c.relayed = 0
	if g.flat {
		if gather {
			return c.exchangeGather(msg, merge, k)
		}
		return c.exchangeFlat(msg, merge, k)
	}
	if me >= g.p2 { // an extra: hand in, get the result
		if err := c.send(msg, me-g.p2, par, slotPre, k, shmem.SignalSet); err != nil {
			return err
		}
		in, err := c.recv(par, slotPost, k, len(msg), me-g.p2)
		if err != nil {
			return err
		}
		copy(msg, in)
		return nil
	}
	if me < g.rem {
		in, err := c.recv(par, slotPre, k, len(msg), me+g.p2)
		if err != nil {
			return err
		}
		c.fold(msg, in, merge)
	}
	for r := 0; r < g.rounds; r++ {
		if r > 0 {
			c.reach() // each round of recursive doubling is a step
		}
		partner := me ^ (1 << r)
		if err := c.send(msg, partner, par, slotRound+r, k, shmem.SignalSet); err != nil {
			return err
		}
		in, err := c.recv(par, slotRound+r, k, len(msg), partner)
		if err != nil {
			return err
		}
		c.fold(msg, in, merge)
	}
	if me < g.rem {
		return c.send(msg, me+g.p2, par, slotPost, k, shmem.SignalSet)
	}
	return nil
}

// exchangeFlat is exchange k on a flat team: msg to every other member,
// starting with the right-hand neighbour so that no member is written by
// all at once, each PutSignal storing k into the buffer's sequence word
// after the message, then one wait for all of theirs: a look at each
// sender's word in turn (a word seen at k stays seen: words only grow).
func (c *call) exchangeFlat(msg []byte, merge func([]byte), k uint64) error {
	par := int(k % 2)
	if err := c.putFlat(msg, par, k, false); err != nil {
		return err
	}
	if err := c.awaitFlat(par, k, true); err != nil {
		return err
	}
	c.fromFlat(msg, merge)
	return nil
}

// putFlat puts msg into this member's slot of every other member's flat
// buffers of parity par, each PutSignal storing k into the buffer's
// sequence word after the message.
//
// In a gathered exchange (relay) the message to member 0 signals this
// member's relay slot there instead, with 2k+1 where a short message's
// slot gets 2k: member 0 waits for one word per member and learns from
// it which way the message came.
func (c *call) putFlat(msg []byte, par int, k uint64, relay bool) error {
	off := c.g.bufOff(par, c.me)
	dst := c.bytes.Slice(off, off+len(msg))
	sw := c.g.seqWord(par, c.me)
	for s := 1; s < c.n; s++ {
		j := (c.me + s) % c.n
		w, v := sw, k
		if relay && j == 0 {
			w, v = ctlWords+c.g.relayAt(par, c.me)/8, 2*k+1
		}
		traceSignal(c, dst, c.world(j), w, shmem.SignalSet, v)
		if err := shmem.PutSignal(dst, msg, c.words.Slice(w, w+1), v, shmem.SignalSet, c.world(j)); err != nil {
			return err
		}
	}
	return nil
}

// awaitFlat waits until every other member's flat buffer of parity par
// holds its message of exchange k. With own, each sequence word is
// stored by its buffer's member alone (a flat exchange), and the wait
// for it ends with ErrAsymmetric once that member has begun Finalize
// without the store (Team.WaitCollective): it never made this call.
// Without (a long member's wait in a gathered exchange, where member 0
// may store a short member's word), it is a plain wait.
func (c *call) awaitFlat(par int, k uint64, own bool) error {
	c.traceWaitExchange(par, k)
	for s := 1; s < c.n; s++ {
		// Member me-s put its message first into me-s+1, ..., so the
		// left-hand neighbour's is usually the first to land here.
		j := (c.me + c.n - s) % c.n
		w := c.g.seqWord(par, j)
		if atomic.LoadUint64(&c.lw[w]) >= k {
			continue // here already: no wait call (the call is admitted by BeginCollective)
		}
		var err error
		if own {
			err = c.t.WaitCollective(c.words, w, k, j)
		} else {
			err = shmem.WaitUntil(c.words, w, shmem.CmpGE, k)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// fromFlat folds the other members' flat messages, in rank order, into
// msg: merge their payloads, merge their headers.
func (c *call) fromFlat(msg []byte, merge func([]byte)) {
	h := readHeader(msg)
	for j := range c.n {
		if j == c.me {
			continue
		}
		in := c.inbox(j, len(msg))
		if merge != nil {
			merge(in)
		}
		h.merge(readHeader(in))
	}
	h.put(msg)
}

// gathers says whether the call's next exchange is gathered
// (exchangeGather): its first, on a team with a relay region. Only the
// first exchange of a call must take a way that every member chooses
// alike whatever its arguments; the later ones come after an agreement
// and follow data puts, which a flat exchange orders with a fence.
func (c *call) gathers() bool {
	return c.g.relay && c.nex == 0
}

// exchangeGather is exchange k on a flat team of relayMin or more
// members that spans hosts. A short message (payload of at most
// relayPayload() bytes) goes through member 0: 2(n-1) messages where
// exchangeFlat sends n(n-1), each a network write whose CPU time is
// what a small collective costs when PEs outnumber cores. A long message
// goes flat, as exchangeFlat's.
//
// A member with a short message writes its length into the first word
// of its own flat buffer (a sequence word that no one else writes or
// reads) and puts that word, its header and its payload into its relay
// slot at member 0, signalling the slot's sequence word with 2k, then
// waits for the release. A member with a long message puts it into
// every other member's flat buffer as exchangeFlat does, the one to
// member 0 signalling its relay slot there with 2k+1 instead, and waits
// for every other member's flat buffer as exchangeFlat does. Member 0
// waits for one word per member and learns from it which way each
// message came. Every member's message of one call has the same length
// when the members agree (Collect, whose counts may differ, sends only
// short messages here), so member 0 sees one of three things:
//
//   - every message short: it releases every member with one put each of
//     every member's entry (length, header, payload) packed at a stride
//     that fits the longest, the stride in the first word; each member
//     reads the others' messages there;
//   - every message long: nothing more; it finishes flat, as the others;
//   - some of each: the members disagree. Member 0 releases every member
//     (the long messages' entries carry their header only), fences, then
//     sets, in each long member, the flat sequence words of the short
//     members to k, for which the long member waits. A long member that
//     finds the release signalled once its flat words are there takes
//     the headers from the release and fences its own long messages,
//     which the short members do not wait for: they land later in flat
//     buffers of this parity, before anything that member sends after.
//     The verdict is an error on every member.
//
// Reuse of the relay slots and the release region follows exchangeFlat's
// argument: each is written for exchange k only by a member that has
// received the release (or, on member 0, the relay slot or the flat
// message) of exchange k-1 from its reader, which that reader sent after
// it had finished exchange k-2. Member 0 writes a long member's flat
// sequence word for a short one (which it never writes otherwise) only
// in exchange k and before that member can finish k; the short member's
// next write of that word comes after the long member has taken part in
// exchange k+1, so it cannot be overwritten by the older value.
func (c *call) exchangeGather(msg []byte, merge func([]byte), k uint64) error {
	g := c.g
	par := int(k % 2)
	pay := len(msg) - hdrBytes
	short := pay <= g.relayPayload()
	if !short {
		if err := c.putFlat(msg, par, k, true); err != nil {
			return err
		}
	} else if c.me != 0 {
		own := g.bufOff(par, c.me)
		if &msg[0] != &c.lb[own] {
			copy(c.lb[own:], msg) // message() builds it here: only a caller's own buffer is copied
		}
		binary.LittleEndian.PutUint64(c.lb[own-seqBytes:], uint64(pay))
		at := g.relayAt(par, c.me)
		sw := ctlWords + at/8
		d := c.bytes.Slice(at+8, at+relayHead+len(msg))
		traceSignal(c, d, c.world(0), sw, shmem.SignalSet, 2*k)
		if err := shmem.PutSignal(d, c.lb[own-seqBytes:own+len(msg)], c.words.Slice(sw, sw+1), 2*k, shmem.SignalSet, c.world(0)); err != nil {
			return err
		}
	}
	if c.me == 0 {
		return c.gatherRoot(msg, merge, par, k)
	}
	if short {
		c.traceWait(wordRelease+par, k)
		if err := c.t.WaitCollective(c.words, wordRelease+par, k, 0); err != nil {
			return err
		}
		return c.fromRelease(msg, merge, par)
	}
	if err := c.awaitFlat(par, k, false); err != nil {
		return err
	}
	if atomic.LoadUint64(&c.lw[wordRelease+par]) >= k {
		// A mix: member 0 set the short members' words after the release.
		if err := c.fromRelease(msg, nil, par); err != nil {
			return err
		}
		return c.pe.Fence()
	}
	c.fromFlat(msg, merge)
	return nil
}

// releasePool holds member 0's release buffers (gatherRoot), so that a
// gathered exchange allocates nothing once warm.
var releasePool = sync.Pool{New: func() any { return new([]byte) }}

// gatherRoot is member 0's part of gathered exchange k, after its own
// long message, if it has one, has gone flat.
func (c *call) gatherRoot(msg []byte, merge func([]byte), par int, k uint64) error {
	g := c.g
	pay := len(msg) - hdrBytes
	var lens [flatMax]int // the members' payload bytes; relayLong for a long one
	lens[0] = pay
	if pay > g.relayPayload() {
		lens[0] = relayLong
	}
	c.traceWaitRelay(par, 2*k)
	nShort, width := 0, 0
	for j := c.n - 1; j >= 0; j-- {
		if j > 0 {
			w := ctlWords + g.relayAt(par, j)/8
			if atomic.LoadUint64(&c.lw[w]) < 2*k {
				if err := c.t.WaitCollective(c.words, w, 2*k, j); err != nil {
					return err
				}
			}
			// 2k: the slot holds a short message; 2k+1: a long one is in
			// the flat buffer, and its header goes into the slot for a
			// release.
			at := g.relayAt(par, j)
			if atomic.LoadUint64(&c.lw[w]) == 2*k && binary.LittleEndian.Uint64(c.lb[at+8:]) <= uint64(g.relayPayload()) {
				lens[j] = int(binary.LittleEndian.Uint64(c.lb[at+8:]))
			} else {
				lens[j] = relayLong
				copy(c.lb[at+relayHead:at+relayHead+hdrBytes], c.inbox(j, hdrBytes))
			}
		}
		if lens[j] <= g.relayPayload() {
			nShort++
			width = max(width, lens[j])
		}
	}
	if nShort == 0 {
		c.fromFlat(msg, merge)
		return nil
	}
	// The release: entry j (its first word unused, then length, header
	// and, if short, payload) at j*stride, the stride in entry 0's first
	// word; one put into every other member, starting with member 1 as
	// every member sends to its right-hand neighbour first.
	stride := (relayHead + hdrBytes + width + 15) &^ 15
	bp := releasePool.Get().(*[]byte)
	defer releasePool.Put(bp)
	if cap(*bp) < c.n*stride {
		*bp = make([]byte, c.n*g.relaySlot)
	}
	rel := (*bp)[:c.n*stride]
	for j := range c.n {
		e := rel[j*stride : (j+1)*stride]
		binary.LittleEndian.PutUint64(e[8:], uint64(lens[j]))
		pl := lens[j] // the payload the entry carries: none for a long message
		if pl == relayLong {
			pl = 0
		}
		body := msg[:hdrBytes+pl]
		if j > 0 {
			at := g.relayAt(par, j) + relayHead
			body = c.lb[at : at+hdrBytes+pl]
		}
		copy(e[relayHead:], body)
	}
	binary.LittleEndian.PutUint64(rel, uint64(stride))
	at := g.relayAt(par, 0)
	d := c.bytes.Slice(at, at+len(rel))
	sig := c.words.Slice(wordRelease+par, wordRelease+par+1)
	for j := 1; j < c.n; j++ {
		traceSignal(c, d, c.world(j), wordRelease+par, shmem.SignalSet, k)
		if err := shmem.PutSignal(d, rel, sig, k, shmem.SignalSet, c.world(j)); err != nil {
			return err
		}
	}
	if nShort < c.n {
		// A mix: the long members wait for flat messages that the short
		// ones never sent. The fence puts the release before the words.
		if err := c.pe.Fence(); err != nil {
			return err
		}
		for j := 1; j < c.n; j++ {
			if lens[j] <= g.relayPayload() {
				continue
			}
			for s := range c.n {
				if s == j || lens[s] > g.relayPayload() {
					continue
				}
				w := g.seqWord(par, s)
				traceSignal(c, c.words.Slice(w, w), c.world(j), w, shmem.SignalSet, k)
				if err := shmem.SignalUpdate(c.words.Slice(w, w+1), k, shmem.SignalSet, c.world(j)); err != nil {
					return err
				}
			}
		}
	}
	c.stride = g.relaySlot // member 0 reads the others' messages in its relay slots
	c.fromEntries(msg, merge, par, lens[:c.n])
	return nil
}

// fromRelease ends a gathered exchange on a member other than 0 once
// member 0's release has landed in its relay region of parity par.
func (c *call) fromRelease(msg []byte, merge func([]byte), par int) error {
	g := c.g
	base := g.relayAt(par, 0)
	stride := int(binary.LittleEndian.Uint64(c.lb[base:]))
	if stride < relayHead+hdrBytes || stride%16 != 0 || stride > g.relaySlot {
		return fmt.Errorf("collective: %v on a %d-PE team: member 0's release has a stride of %d bytes: %w", c.what, c.n, stride, shmem.ErrInvalid)
	}
	c.stride = stride
	var lens [flatMax]int
	for j := range c.n {
		if j == c.me {
			lens[j] = len(msg) - hdrBytes
			continue
		}
		lens[j] = int(min(binary.LittleEndian.Uint64(c.lb[base+j*stride+8:]), relayLong))
		if lens[j] <= g.relayPayload() && relayHead+hdrBytes+lens[j] > stride {
			return fmt.Errorf("collective: %v on a %d-PE team: member 0's release has a %d-byte message in %d-byte entries: %w", c.what, c.n, lens[j], stride, shmem.ErrInvalid)
		}
	}
	c.fromEntries(msg, merge, par, lens[:c.n])
	return nil
}

// fromEntries folds the entries of a gathered exchange (every other
// member's header, and payload if short; member j's at c.stride*j in
// the relay region of parity par) into msg: the merged header, and, if
// every message is short, the others' payloads merged in rank order and
// their entries in inbox. When some message is long the members
// disagree (exchangeGather), and the merged header says so even if the
// descriptors happen to agree.
func (c *call) fromEntries(msg []byte, merge func([]byte), par int, lens []int) {
	h := readHeader(msg)
	mix := false
	for j := range c.n {
		if lens[j] > c.g.relayPayload() {
			mix = true
		}
		if j != c.me {
			at := c.g.relayAt(par, 0) + j*c.stride + relayHead
			h.merge(readHeader(c.lb[at : at+hdrBytes]))
		}
	}
	if mix {
		h.maxDesc = math.MaxUint64 // not a valid digest's equal: the verdict is an error
		h.put(msg)
		return
	}
	for j := range c.n {
		if j != c.me {
			c.relayed |= 1 << j
		}
	}
	if merge != nil {
		for j := range c.n {
			if j != c.me && lens[j] == len(msg)-hdrBytes {
				merge(c.inbox(j, len(msg)))
			}
		}
	}
	h.put(msg)
}

// inbox is the first n bytes of member j's message of this member's
// latest exchange on a flat team, valid until the next exchange: in its
// relay slot after a gathered exchange that relayed it, else in its flat
// buffer.
func (c *call) inbox(j, n int) []byte {
	par := int(c.lw[wordSeq] % 2)
	if c.relayed&(1<<j) != 0 {
		off := c.g.relayAt(par, 0) + j*c.stride + relayHead
		return c.lb[off : off+n]
	}
	off := c.g.bufOff(par, j)
	return c.lb[off : off+n]
}

func (c *call) fold(msg, in []byte, merge func([]byte)) {
	if merge != nil {
		merge(in)
	}
	h := readHeader(msg)
	h.merge(readHeader(in))
	h.put(msg)
}

// await waits until the call's word w reaches v (words only grow): one
// step of the algorithm.
func (c *call) await(w int, v uint64) error {
	c.traceWait(w, v)
	c.reach()
	return shmem.WaitUntil(c.words, w, shmem.CmpGE, v)
}

// reach counts one step of the call: an exchange or an await. A test's
// testhook.Step sees each, numbered from 0, so that it can stop this PE
// there; while no hook is set it costs one atomic load.
func (c *call) reach() {
	if h := testhook.Step.Load(); h != nil {
		(*h)(c.pe.MyPE(), c.step)
	}
	c.step++
}

// send puts msg into team member j's buffer (par, slot) and signals it.
func (c *call) send(msg []byte, j, par, slot int, k uint64, op shmem.SignalOp) error {
	off := c.g.bufOff(par, slot)
	sw := sigWord(par, slot)
	traceSignal(c, c.bytes.Slice(off, off+len(msg)), c.world(j), sw, op, k)
	return shmem.PutSignal(c.bytes.Slice(off, off+len(msg)), msg, c.words.Slice(sw, sw+1), k, op, c.world(j))
}

// recv waits for this member's buffer (par, slot) of exchange k, which
// member from alone signals (Team.WaitCollective), and returns its
// first n bytes.
func (c *call) recv(par, slot int, k uint64, n, from int) ([]byte, error) {
	c.traceWait(sigWord(par, slot), k)
	if err := c.t.WaitCollective(c.words, sigWord(par, slot), k, from); err != nil {
		return nil, err
	}
	off := c.g.bufOff(par, slot)
	return c.lb[off : off+n], nil
}

// spansHosts reports whether some member's heap is not mapped here.
// Every member of a team that spans hosts has a member on another host,
// so all members answer alike.
func (c *call) spansHosts() bool {
	for j := range c.n {
		if !c.pe.SameHost(c.world(j)) {
			return true
		}
	}
	return false
}

// complete makes this member's puts into the others' buffers visible
// to them by the time they finish the next exchange. A flat exchange
// sends this member's message to every member after its data, on the
// same ordered route, so a fence is enough (free over shared memory and
// over a single TCP stream); recursive doubling reaches most members
// only through others, so it needs the data complete first (Quiet).
func (c *call) complete() error {
	if c.g.flat {
		return c.pe.Fence()
	}
	return c.pe.Quiet()
}

// sync is a header-only exchange that also checks agreement: the entry
// or exit step of the algorithms that touch other members' buffers.
func (c *call) sync() (header, error) {
	return c.syncHeader(c.message(0), c.newHeader(c.desc))
}

// syncHeader is sync with a header of the caller's (Collect's sums).
func (c *call) syncHeader(b []byte, h header) (header, error) {
	h.put(b)
	if err := c.exchange(b, nil); err != nil {
		return h, err
	}
	h = readHeader(b)
	return h, c.verdict(h)
}

// info describes a call for error messages. It is formatted only when
// a call fails.
type info struct {
	name                 string
	op                   Op // 0: none
	k                    kind
	n                    int
	per                  string // "per pair", "per PE" or ""
	root                 int    // -1: none
	dstStride, srcStride int    // AllToAllS
}

func (i info) String() string {
	s := i.name
	if i.op != 0 {
		s += "(" + i.op.String() + ")"
	}
	s += fmt.Sprintf(" of %d %v", i.n, i.k)
	if i.per != "" {
		s += " " + i.per
	}
	if i.root >= 0 || i.root < -1 {
		s += fmt.Sprintf(" with root %d", i.root)
	}
	if i.dstStride != 0 {
		s += fmt.Sprintf(", strides %d and %d", i.dstStride, i.srcStride)
	}
	return s
}
