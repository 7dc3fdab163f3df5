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
//	2          ring steps this member has taken on the team (reduceRing);
//	           written and read by the member only
//	3          ring progress of this member's left neighbour: it stores
//	           the count of ring steps it has finished; waits are for
//	           word >= a count. Only grows.
//	4..7       zero
//	8..39      exchange signals: word 8 + 16*parity + slot, where parity
//	           is k%2 and slot is 0 (PRE, written by the extra member
//	           paired with this one), 1 (POST, written by the host
//	           member of this extra one) or 2+r (round r of recursive
//	           doubling, written by this member's round-r partner). A
//	           writer stores k after the message's bytes; waits are for
//	           word >= k. Words only grow.
//
// Bytes: 2*(R+2) message buffers of slotBytes each, in the same
// (parity, slot) order as the signal words, where R is the number of
// recursive-doubling rounds of the team. slotBytes is a multiple of 16,
// so every buffer, and its payload after the 32-byte header, is aligned
// for every element type.
//
// A message is a header of four little-endian uint64 (see header)
// followed by a payload of up to slotBytes-32 bytes.
const (
	wordSeq     = 0
	wordCount   = 1
	wordRingSeq = 2
	wordRingIn  = 3
	wordSignals = 8
	slotsPer    = 16 // signal words per parity
	slotPre     = 0
	slotPost    = 1
	slotRound   = 2
	maxRounds   = slotsPer - slotRound // teams of fewer than 2^(maxRounds+1) PEs
	hdrBytes    = 32
)

// geometry is the shape of recursive doubling over n members: p2 is the
// largest power of two not above n, rounds its log2, and the rem = n-p2
// members from p2 up ("extras") hand their contribution to member
// i-p2 (their "host") before the rounds and get the result back after.
type geometry struct {
	n, p2, rounds, rem int
	slotBytes          int // bytes of one message buffer
}

func newGeometry(n, scratch int) geometry {
	g := geometry{n: n, p2: 1}
	for g.p2*2 <= n {
		g.p2 *= 2
		g.rounds++
	}
	g.rem = n - g.p2
	g.slotBytes = scratch / (2 * (g.rounds + 2)) &^ 15
	return g
}

// payloadCap is the largest payload of one message.
func (g geometry) payloadCap() int { return g.slotBytes - hdrBytes }

// bufOff is the byte offset of the buffer of (parity, slot).
func (g geometry) bufOff(parity, slot int) int { return (parity*(g.rounds+2) + slot) * g.slotBytes }

// sigWord is the index of the signal word of (parity, slot).
func sigWord(parity, slot int) int { return wordSignals + parity*slotsPer + slot }
