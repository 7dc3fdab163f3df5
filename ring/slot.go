package ring

import (
	"encoding/binary"
	"hash/crc32"
)

// The slot image. A lane has Depth slots of slotSize bytes each in the
// receiver's heap; message seq lives in slot (seq-1) mod Depth. Send
// writes the whole image with one put. docs/ring.md holds the normative
// copy of this table.
//
//	offset   width  order  field
//	0        8      LE     seq: the message's sequence number on its lane, 1, 2, ...;
//	                       0 means the slot was never written
//	8        4      LE     word: bits 0..30 the payload length n; bit 31 set means
//	                       a bulk message (payload in the lane's bulk area)
//	12       4      LE     crc: CRC32C (Castagnoli) over bytes 0..11, then the
//	                       inline bytes (n of them, or 4 for a bulk message)
//	16       n             inline message: the payload
//	16       4      LE     bulk message: CRC32C of the n bulk payload bytes in Raw
//	                       mode, 0 in Safe mode (where it is not computed)
//	16+n|20  ...           padding up to the tail: stale bytes, not covered, never read
//	size-8   8      LE     tail: ^seq, the bitwise inverse of seq (the slot's last word)
//
// size is 24 plus the lane's inline capacity, rounded up to the cache
// line, so every slot starts on a cache line and the tail is 8-aligned.
// A never-written slot is all zero: seq 0 and tail 0 (not ^0), which no
// written image has.
const (
	offSeq     = 0
	offWord    = 8
	offCRC     = 12
	offPayload = 16
	tailSize   = 8
	slotFixed  = offPayload + tailSize // bytes of a slot that are not payload

	bulkInline = 4 // inline bytes of a bulk message: the bulk payload's CRC

	bulkFlag = 1 << 31              // in word: the payload is in the bulk area
	lenMask  = uint32(bulkFlag - 1) // bits of word that hold the length (MaxCapacity fits)
)

// castagnoli is the CRC32C table; hash/crc32 uses the CPU's CRC32
// instruction for it where there is one. It is read-only after init.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// slotSize is the size of a slot whose inline payload may be up to
// inline bytes, padded to line (a power of two).
func slotSize(inline, line int) int {
	return (slotFixed + inline + line - 1) &^ (line - 1)
}

// slotCRC is the checksum of an image with header bytes hdr (at least
// offCRC long) and inline payload p.
func slotCRC(hdr, p []byte) uint32 {
	return crc32.Update(crc32.Update(0, castagnoli, hdr[:offCRC]), castagnoli, p)
}

// encodeSlot writes the image of inline message seq carrying payload
// into dst, a whole slot (len(dst) is the slot size). The caller has
// checked that the payload fits: len(payload) <= len(dst)-slotFixed.
// The padding keeps whatever dst held.
func encodeSlot(dst []byte, seq uint64, payload []byte) {
	encode(dst, seq, uint32(len(payload)), payload)
}

// encodeSlot2 is encodeSlot of the payload hdr followed by data.
func encodeSlot2(dst []byte, seq uint64, hdr, data []byte) {
	n := copy(dst[offPayload:], hdr)
	n += copy(dst[offPayload+n:], data)
	encode(dst, seq, uint32(n), dst[offPayload:offPayload+n])
}

// encodeBulkSlot writes the image of bulk message seq, whose n payload
// bytes are in the bulk area and have CRC32C sum (0 in Safe mode). The
// caller has checked n <= MaxCapacity.
func encodeBulkSlot(dst []byte, seq uint64, n int, sum uint32) {
	// The CRC goes straight into dst: a local array handed to
	// hash/crc32 would escape, and Send allocates nothing.
	in := dst[offPayload : offPayload+bulkInline]
	binary.LittleEndian.PutUint32(in, sum)
	encode(dst, seq, uint32(n)|bulkFlag, in)
}

func encode(dst []byte, seq uint64, word uint32, inline []byte) {
	binary.LittleEndian.PutUint64(dst[offSeq:], seq)
	binary.LittleEndian.PutUint32(dst[offWord:], word)
	copy(dst[offPayload:], inline)
	binary.LittleEndian.PutUint32(dst[offCRC:], slotCRC(dst, inline))
	binary.LittleEndian.PutUint64(dst[len(dst)-tailSize:], ^seq)
}

// slotView is a parsed slot: its fields as read, and the inline
// payload, which aliases the parsed bytes.
type slotView struct {
	seq     uint64
	n       int    // payload length (inline or bulk)
	bulk    bool   // the payload is in the bulk area
	payload []byte // the inline bytes: the payload, or the bulk CRC
}

// slotState is what parsing found. Only slotOK images may be delivered;
// what the other states mean for a lane is judged by the lane (see
// recvLane.judge), since a state such as slotTorn is normal while the
// sender is writing.
type slotState uint8

const (
	slotOK       slotState = 0 // head, tail, length bound and CRC agree
	slotEmpty    slotState = 1 // never written: seq 0 and tail 0
	slotShort    slotState = 2 // fewer bytes than a slot's fixed part, or not 8-aligned
	slotTorn     slotState = 3 // tail is not ^seq
	slotBadLen   slotState = 4 // the inline length does not fit in the slot
	slotBadCRC   slotState = 5 // the checksum does not match
	numSlotState           = 6
)

var slotStateNames = [numSlotState]string{"ok", "never written", "short", "torn (tail is not ^seq)", "length out of bounds", "CRC mismatch"}

func (s slotState) String() string {
	if int(s) < len(slotStateNames) {
		return slotStateNames[s]
	}
	return "unknown"
}

// decodeSlot parses a whole slot image b. It never panics and never
// reads outside b. The length bound it checks is the slot's own: a bulk
// length and an inline length below the lane's capacity are judged by
// the caller, which knows the lane.
func decodeSlot(b []byte) (slotView, slotState) {
	if len(b) < slotFixed || len(b)%8 != 0 {
		return slotView{}, slotShort
	}
	seq := binary.LittleEndian.Uint64(b[offSeq:])
	tail := binary.LittleEndian.Uint64(b[len(b)-tailSize:])
	if seq == 0 && tail == 0 {
		return slotView{}, slotEmpty
	}
	if tail != ^seq {
		return slotView{seq: seq}, slotTorn
	}
	word := binary.LittleEndian.Uint32(b[offWord:])
	v := slotView{seq: seq, n: int(word & lenMask), bulk: word&bulkFlag != 0}
	in := v.n
	if v.bulk {
		in = bulkInline
	}
	if in > len(b)-slotFixed {
		return v, slotBadLen
	}
	v.payload = b[offPayload : offPayload+in]
	if binary.LittleEndian.Uint32(b[offCRC:]) != slotCRC(b, v.payload) {
		return v, slotBadCRC
	}
	return v, slotOK
}
