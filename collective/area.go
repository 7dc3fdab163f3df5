package collective

// The layout of a team's collective area on each member (the 128512
// bytes shmem.Team.CollectiveArea hands out, as words and as bytes).
// Every member has the same layout at the same offsets.
//
// Control words (uint64, index: meaning):
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
//	           word >= a count. Only grows. (Also the root's signal of a
//	           Broadcast across hosts: the chunk it sent landed.)
//	4..6       recursive halving (reduceHalving): word 4+r is written by
//	           the partner at distance 2^r only, which stores counts
//	           from a per-call base; waits are for word >= a count.
//	           Only grow.
//	7          pushes this member has received that it counts: as the
//	           member of a Reduce chain (reduceChain) its upstream member
//	           adds 1 after each piece; in a Broadcast or an FCollect
//	           across hosts (broadcastScatter, fcollectPush) every put
//	           into this member's dst adds 1 after it. Waits are for
//	           word >= a base read before the
//	           entry exchange plus a count. Only grows.
//	8..39      signal words of the recursive-doubling exchange: word
//	           8 + 16*parity + slot, where parity is k%2 and slot is PRE
//	           (0, written by the extra member paired with this one), POST
//	           (1, written by the host member of this extra one) or 2+r
//	           (round r, written by this member's round-r partner); a
//	           writer stores k after the message's bytes; waits are for
//	           word >= k. Words only grow. Unused on flat teams.
//
// Bytes from scratchOff (word 40) on: 2*slots message buffers of
// slotBytes each, parity-major. A flat team's slot j holds member j's
// message; a recursive-doubling team's slots are PRE, POST and the
// rounds, as the signal words. slotBytes is a multiple of 16, so every
// buffer, and its payload after the 32-byte header, is aligned for every
// element type.
//
// On a flat team a buffer starts with its own sequence word (seqBytes,
// then the message): sender j stores k there after the message's bytes
// of exchange k (one PutSignal with SignalSet, one writer per word), and
// the receiver waits for every other member's word >= k. Word and
// message share the buffer's first cache line (a flat buffer of 128
// bytes or more is a multiple of 64, from a 64-byte aligned start), so a
// small message costs its receiver one line from each sender, not a line
// plus a counter that every sender adds to. Words only grow.
//
// A flat team of relayMin to flatMax members that spans hosts also has a
// relay region at the end of the scratch (relayOff on): 2*n relay slots
// of relaySlot bytes, parity-major, for the gathered exchange (call.go,
// exchangeGather). Relay slot (parity, j) is: a sequence word (on member
// 0, stored by member j after the rest of its gathered message, 2k for
// exchange k, or 2k+1 after its long message into member 0's flat
// buffer; unused elsewhere), the length word (member j's payload bytes;
// relayLong where member 0 filled the slot in for a long message), then
// member j's header and, when the payload is at most relayPayload bytes,
// the payload.
// On member 0 the slots are the gathered messages; on every other member
// the region of a parity is where member 0's release lands: its own
// slots of that parity, all n in one put. The release's signal is word
// wordRelease+parity, a word of the recursive-doubling signals that flat
// teams do not use.
//
// A message is a header of four little-endian uint64 (see header)
// followed by a payload of up to payloadCap bytes.
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
	ctlWords    = 40           // control words before the message buffers
	scratchOff  = 8 * ctlWords // byte offset of the message buffers in the area
	seqBytes    = 8            // a flat buffer's sequence word, before its message
	wordRelease = wordSignals  // and +1: the release of the gathered exchange of parity 0 and 1 (flat teams only)

	relayMin = 4 // the smallest team that gathers: on 3, 4 messages in two hops are no faster than 6 in one
	// relayBudget is the most bytes a relay region takes from the
	// scratch, both parities, and relayMaxSlot the largest slot: member
	// 0's release of n slots is one put per member, so a message of up
	// to 4 KiB costs less through member 0 than flat on 4 members over
	// TCP (docs/collectives.md, "Crossovers").
	relayBudget  = 40960
	relayMaxSlot = 4160
	relayHead    = 16      // the sequence and length words before a relay slot's message
	relayLong    = 1 << 30 // the length word member 0 writes for a member whose message is long
)

// geometry is the shape of an exchange over n members.
//
// Teams of up to flatMax members exchange flat: every member puts its
// message into slot "sender" of every other member's buffers and stores
// the exchange's number into that buffer's sequence word, then waits
// until the other members' words in its own buffers reach it. One wait
// per exchange (a look at each sender's word), which matters when PEs
// outnumber cores.
//
// Larger teams use recursive doubling: p2 is the largest power of two
// not above n, rounds its log2, and the rem = n-p2 members from p2 up
// ("extras") hand their contribution to member i-p2 (their "host")
// before the rounds and get the result back after.
type geometry struct {
	n, p2, rounds, rem int
	flat               bool
	slots              int // message buffers per parity
	slotBytes          int // bytes of one message buffer, its sequence word included
	seq                int // bytes before the message in a buffer: seqBytes on flat teams, else 0
	// relay says that the team's first exchange of a call gathers
	// (exchangeGather): a flat team of relayMin or more members that
	// spans hosts. The relay region starts at byte relayOff of the
	// scratch, after the message buffers.
	relay     bool
	relayOff  int
	relaySlot int // bytes of a relay slot: sequence word, length word, header, payload
}

// flatMax is the largest team that exchanges flat.
const flatMax = 8

// newGeometry is the geometry of a team of n members with scratch
// bytes of message buffers; far says that the team spans hosts (every
// member answers alike).
func newGeometry(n, scratch int, far bool) geometry {
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
		g.seq = seqBytes
		if far && n >= relayMin {
			g.relay = true
			g.relaySlot = min(relayBudget/(2*n)&^63, relayMaxSlot)
			scratch -= 2 * n * g.relaySlot
			g.relayOff = scratch
		}
	}
	per := scratch / (2 * g.slots)
	g.slotBytes = per &^ 15
	if g.flat && per >= 128 {
		g.slotBytes = per &^ 63 // whole lines: a small message shares its sequence word's line
	}
	return g
}

// payloadCap is the largest payload of one message.
func (g geometry) payloadCap() int { return g.slotBytes - g.seq - hdrBytes }

// bufOff is the byte offset, in the message buffers, of the message of
// (parity, slot): after the buffer's sequence word on a flat team.
func (g geometry) bufOff(parity, slot int) int { return (parity*g.slots+slot)*g.slotBytes + g.seq }

// seqWord is the index in the area's words of a flat team's sequence
// word of buffer (parity, slot).
func (g geometry) seqWord(parity, slot int) int {
	return ctlWords + (parity*g.slots+slot)*g.slotBytes/8
}

// relayAt is the byte offset, in the message buffers, of relay slot
// (parity, j): its sequence word.
func (g geometry) relayAt(parity, j int) int { return g.relayOff + (parity*g.n+j)*g.relaySlot }

// relayPayload is the largest payload of a short message, one that a
// gathered exchange relays through member 0.
func (g geometry) relayPayload() int { return g.relaySlot - relayHead - hdrBytes }

// sigWord is the index of the signal word of (parity, slot) of the
// recursive-doubling exchange.
func sigWord(parity, slot int) int { return wordSignals + parity*slotsPer + slot }
