package collective

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"sync/atomic"

	"github.com/goshmem/goshmem/internal/testhook"
	"github.com/goshmem/goshmem/shmem"
)

// call is one collective call of this PE on a team, between
// BeginCollective and EndCollective.
type call struct {
	t     *shmem.Team
	pe    *shmem.PE
	n, me int // team size, this PE's team index
	g     geometry
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
	far   bool // some member's heap is not mapped here (spansHosts, once per call)
}

func (c *call) begin(t *shmem.Team) error {
	if err := t.BeginCollective(); err != nil {
		return err
	}
	c.t, c.pe = t, t.PE()
	c.n, c.me = t.NPEs(), t.MyPE()
	var area shmem.Sym[uint8]
	c.words, area = t.CollectiveArea()
	if area.Len() > scratchOff {
		c.bytes = area.Slice(scratchOff, area.Len())
	}
	c.lw, c.lb = c.words.Local(), c.bytes.Local()
	c.g = newGeometry(c.n, len(c.lb))
	c.far = c.spansHosts()
	if c.g.rounds > maxRounds || c.lw == nil || c.lb == nil {
		t.EndCollective(nil)
		return fmt.Errorf("collective: a team of %d PEs: at most %d are supported: %w", c.n, 1<<(maxRounds+1)-1, shmem.ErrInvalid)
	}
	if tracer != nil {
		tracer.note(c.pe, traceOp{kind: tBegin, word: -1})
	}
	var err error
	c.algo, err = algoFromEnv()
	c.fail(err)
	return nil
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
// answers alike (spansHosts, read once per call into c.far).
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
	algoPushRing             // as direct, with AllReduce by the pushing ring (3 or more, dst apart from src)
	algoHalving              // as direct, with AllReduce by recursive halving and doubling (4 or 8, dst apart from src)
)

const envAlgo = "GOSHMEM_COLLECTIVE_ALGO"

// algoFromEnv reads GOSHMEM_COLLECTIVE_ALGO. It is read at every call,
// not cached, so a program may change it between calls; every PE of a
// team must see the same value when it calls (the value is part of the
// call's descriptor, so PEs that differ all get ErrAsymmetric).
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
	default:
		return algoAuto, fmt.Errorf("collective: %s=%q: want auto, rd, direct, ring, pushring or halving: %w", envAlgo, v, shmem.ErrInvalid)
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

func digest(fields ...uint64) uint64 {
	h := uint64(14695981039346656037)
	for _, f := range fields {
		h ^= f
		h *= 1099511628211
		h ^= h >> 29
	}
	return h | validBit
}

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

// exchange is one exchange over the team, flat or by recursive
// doubling (geometry). msg holds this member's header (first hdrBytes)
// and payload; on return it holds the merged header and the payload as
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
	if g.flat {
		return c.exchangeFlat(msg, merge, k)
	}
	if me >= g.p2 { // an extra: hand in, get the result
		if err := c.send(msg, me-g.p2, par, slotPre, k, shmem.SignalSet); err != nil {
			return err
		}
		in, err := c.recv(par, slotPost, k, len(msg))
		if err != nil {
			return err
		}
		copy(msg, in)
		return nil
	}
	if me < g.rem {
		in, err := c.recv(par, slotPre, k, len(msg))
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
		in, err := c.recv(par, slotRound+r, k, len(msg))
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
	off := c.g.bufOff(par, c.me)
	dst := c.bytes.Slice(off, off+len(msg))
	sw := c.g.seqWord(par, c.me)
	sig := c.words.Slice(sw, sw+1)
	for s := 1; s < c.n; s++ {
		to := c.world((c.me + s) % c.n)
		traceSignal(c, dst, to, sw, shmem.SignalSet, k)
		if err := shmem.PutSignal(dst, msg, sig, k, shmem.SignalSet, to); err != nil {
			return err
		}
	}
	c.traceWaitExchange(par, k)
	for s := 1; s < c.n; s++ {
		// Member me-s put its message first into me-s+1, ..., so the
		// left-hand neighbour's is usually the first to land here.
		w := c.g.seqWord(par, (c.me+c.n-s)%c.n)
		if atomic.LoadUint64(&c.lw[w]) >= k {
			continue // here already: no wait call (the call is admitted by BeginCollective)
		}
		if err := shmem.WaitUntil(c.words, w, shmem.CmpGE, k); err != nil {
			return err
		}
	}
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
	return nil
}

// inbox is the first n bytes of member j's message of this member's
// latest exchange on a flat team, valid until the next exchange.
func (c *call) inbox(j, n int) []byte {
	off := c.g.bufOff(int(c.lw[wordSeq]%2), j)
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

// recv waits for this member's buffer (par, slot) of exchange k and
// returns its first n bytes.
func (c *call) recv(par, slot int, k uint64, n int) ([]byte, error) {
	c.traceWait(sigWord(par, slot), k)
	if err := shmem.WaitUntil(c.words, sigWord(par, slot), shmem.CmpGE, k); err != nil {
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
