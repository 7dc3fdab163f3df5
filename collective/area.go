package collective

// The layout of a team's collective area on each member (the words and
// bytes shmem.Team.CollectiveArea hands out). Every
// member has the same layout at the same offsets.
//
// Words (uint64, index: meaning):
//
//	0          exchanges this member has started on the team (k of the
//	           latest one); written and read by the member only
//	1          this member's count in the Collect in progress, read by
//	           the other members between the entry and exit exchanges
//	2          the base of this member's next step algorithm on the team
//	           (the ring, the pair, recursive halving, the Reduce ring):
//	           each call advances it by the signal values it uses, alike
//	           on every member; written and read by the member only
//	3          ring progress of this member's left neighbour: it stores
//	           the count of ring steps it has finished; waits are for
//	           word >= a count. Only grows.
//	4..6       recursive halving (reduceHalving): word 4+r is written by
//	           the partner at distance 2^r only, which stores counts
//	           from a per-call base; waits are for word >= a count.
//	           Only grow.
//	7          gathers this member has received as the root of the
//	           Reduce ring (reduceRootRing): every other member adds 1
//	           after its chunk; waits are for word >= a count. Only grows.
//	8..39      exchange signals: word 8 + 16*parity + slot, where parity
//	           is k%2. Flat teams (see geometry) use slot 0 only: a
//	           counter to which every sender adds 1 after its message's
//	           bytes; waits are for the count of all exchanges of that
//	           parity so far. Recursive-doubling teams: slot 0 (PRE,
//	           written by the extra member paired with this one), 1
//	           (POST, written by the host member of this extra one) or
//	           2+r (round r, written by this member's round-r partner);
//	           a writer stores k after the message's bytes; waits are
//	           for word >= k. Words only grow.
//
// Bytes: 2*slots message buffers of slotBytes each, parity-major. A flat
// team's slot j holds member j's message; a recursive-doubling team's
// slots are PRE, POST and the rounds, as the signal words. slotBytes is
// a multiple of 16, so every buffer, and its payload after the 32-byte
// header, is aligned for every element type.
//
// A message is a header of four little-endian uint64 (see header)
// followed by a payload of up to slotBytes-32 bytes.
const (
	wordSeq     = 0
	wordCount   = 1
	wordStepSeq = 2
	wordRingIn  = 3
	wordHalvIn  = 4 // to 6: distances 1, 2, 4
	wordGather  = 7
	halvingMax  = 8 // the largest team reduceHalving takes: 3 words
	wordSignals = 8
	slotsPer    = 16 // signal words per parity
	slotPre     = 0
	slotPost    = 1
	slotRound   = 2
	maxRounds   = slotsPer - slotRound // teams of fewer than 2^(maxRounds+1) PEs
	hdrBytes    = 32
)

// geometry is the shape of an exchange over n members.
//
// Teams of up to flatMax members exchange flat: every member puts its
// message into slot "sender" of every other member's buffers and adds 1
// to their counter (signal word 8 + 16*parity), then waits for its own
// counter to count the n-1 messages of the exchange. One wait per
// exchange, which matters when PEs outnumber cores.
//
// Larger teams use recursive doubling: p2 is the largest power of two
// not above n, rounds its log2, and the rem = n-p2 members from p2 up
// ("extras") hand their contribution to member i-p2 (their "host")
// before the rounds and get the result back after.
type geometry struct {
	n, p2, rounds, rem int
	flat               bool
	slots              int // message buffers per parity
	slotBytes          int // bytes of one message buffer
}

// flatMax is the largest team that exchanges flat.
const flatMax = 8

func newGeometry(n, scratch int) geometry {
	g := geometry{n: n, p2: 1}
	for g.p2*2 <= n {
		g.p2 *= 2
		g.rounds++
	}
	g.rem = n - g.p2
	g.flat = n <= flatMax
	g.slots = g.rounds + 2
	if g.flat {
		g.slots = n
	}
	g.slotBytes = scratch / (2 * g.slots) &^ 15
	return g
}

// payloadCap is the largest payload of one message.
func (g geometry) payloadCap() int { return g.slotBytes - hdrBytes }

// bufOff is the byte offset of the buffer of (parity, slot).
func (g geometry) bufOff(parity, slot int) int { return (parity*g.slots + slot) * g.slotBytes }

// sigWord is the index of the signal word of (parity, slot).
func sigWord(parity, slot int) int { return wordSignals + parity*slotsPer + slot }
