package netmesh

import "fmt"

// ATOMIC (0x04): apply Op to the Width-byte word at Off of the
// receiver's segment, with Config.Atomics (the same hardware atomics the
// same-host path uses).
//
//	offset  width  byte order  meaning
//	0       1      -           Version (0x02)
//	1       1      -           type 0x04
//	2       1      -           Op: AtomicOp, 0x01 fetch .. 0x08 fetch-xor
//	3       1      -           Width: 4 or 8
//	4       4      LE uint32   ID: 0 = no reply wanted; else answered by ATOMIC_RESP
//	8       8      LE uint64   Off: a multiple of Width
//	16      8      LE uint64   V: the operand (low 4 bytes at Width 4)
//	24      8      LE uint64   Cond: the compare value of compare-swap, else 0
//
// ATOMIC_RESP (0x05): the old value of the word.
//
//	offset  width  byte order  meaning
//	0       1      -           Version (0x02)
//	1       1      -           type 0x05
//	2       1      -           status: 0x00 OK (no other value is defined)
//	3       1      -           reserved, 0
//	4       4      LE uint32   ID of the ATOMIC
//	8       8      LE uint64   Old: the word before the op (zero-extended at Width 4;
//	                           0 for set)

// The ATOMIC header, field by field: each offset is the one before it
// plus that field's width.
const (
	atomicOpAt    = prefixLen         // Op, 1 byte
	atomicWidthAt = atomicOpAt + 1    // Width, 1 byte
	atomicIDAt    = atomicWidthAt + 1 // ID, 4 bytes
	atomicOffAt   = atomicIDAt + 4    // Off, 8 bytes
	atomicVAt     = atomicOffAt + 8   // V, 8 bytes
	atomicCondAt  = atomicVAt + 8     // Cond, 8 bytes
	atomicHdrLen  = atomicCondAt + 8
)

// The ATOMIC_RESP header, field by field.
const (
	atomicRespStatusAt   = prefixLen                // status, 1 byte
	atomicRespReservedAt = atomicRespStatusAt + 1   // reserved, 1 byte
	atomicRespIDAt       = atomicRespReservedAt + 1 // ID, 4 bytes
	atomicRespOldAt      = atomicRespIDAt + 4       // Old, 8 bytes
	atomicRespHdrLen     = atomicRespOldAt + 8
)

// AtomicOp is an ATOMIC frame's operation (its Op byte). The values are
// the wire's, pinned by TestConst.
type AtomicOp uint8

// The operations. A fetching op returns the word as it was before.
const (
	OpFetch    AtomicOp = 0x01 // return the word
	OpSet      AtomicOp = 0x02 // store V
	OpSwap     AtomicOp = 0x03 // store V, return the old word
	OpCSwap    AtomicOp = 0x04 // if word == Cond store V; return the old word
	OpFetchAdd AtomicOp = 0x05 // add V, return the old word
	OpFetchAnd AtomicOp = 0x06 // and V, return the old word
	OpFetchOr  AtomicOp = 0x07 // or V, return the old word
	OpFetchXor AtomicOp = 0x08 // xor V, return the old word
)

// Valid reports whether op is one of the defined operations.
func (op AtomicOp) Valid() bool { return op >= OpFetch && op <= OpFetchXor }

func (op AtomicOp) String() string {
	switch op {
	case OpFetch:
		return "fetch"
	case OpSet:
		return "set"
	case OpSwap:
		return "swap"
	case OpCSwap:
		return "compare-swap"
	case OpFetchAdd:
		return "fetch-add"
	case OpFetchAnd:
		return "fetch-and"
	case OpFetchOr:
		return "fetch-or"
	case OpFetchXor:
		return "fetch-xor"
	}
	return fmt.Sprintf("op 0x%02x", byte(op))
}

// Atomics applies ATOMIC and PUT_SIGNAL operations to the segment
// (Config.Atomics). Same-host PEs change the same words with hardware
// atomics, so a remote op must use the very same ones: the mesh's owner
// supplies them (shmem wires the heap's).
type Atomics interface {
	// Atomic applies op to the width-byte word (4 or 8, aligned) at off
	// of the segment and returns the word before it (zero-extended at
	// width 4; 0 for OpSet). off, width and op were checked.
	Atomic(off uint64, width int, op AtomicOp, v, cond uint64) uint64
}

type atomicHdr struct {
	id     uint32
	op     AtomicOp
	width  byte
	off    uint64
	v      uint64
	cond   uint64
	status byte
}

// appendAtomic appends an ATOMIC request.
func appendAtomic(b []byte, id uint32, op, width byte, off, v, cond uint64) []byte {
	var h [atomicHdrLen]byte
	h[versionAt], h[typeAt] = Version, typeAtomic
	h[atomicOpAt], h[atomicWidthAt] = op, width
	le.PutUint32(h[atomicIDAt:], id)
	le.PutUint64(h[atomicOffAt:], off)
	le.PutUint64(h[atomicVAt:], v)
	le.PutUint64(h[atomicCondAt:], cond)
	return append(b, h[:]...)
}

// atomicLen is the length of an ATOMIC frame.
func atomicLen() int { return atomicHdrLen }

// parseAtomic decodes an ATOMIC from the start of b. Whether the op,
// width and alignment are acceptable is judged by checkAtomic.
func parseAtomic(b []byte) (atomicHdr, error) {
	if err := checkHeader(b, typeAtomic, atomicHdrLen); err != nil {
		return atomicHdr{}, err
	}
	return atomicHdr{
		op:    AtomicOp(b[atomicOpAt]),
		width: b[atomicWidthAt],
		id:    le.Uint32(b[atomicIDAt:]),
		off:   le.Uint64(b[atomicOffAt:]),
		v:     le.Uint64(b[atomicVAt:]),
		cond:  le.Uint64(b[atomicCondAt:]),
	}, nil
}

type atomicRespHdr struct {
	id     uint32
	status byte
	old    uint64
}

// appendAtomicResp appends an ATOMIC_RESP.
func appendAtomicResp(b []byte, id uint32, status byte, old uint64) []byte {
	var h [atomicRespHdrLen]byte // the reserved byte stays 0
	h[versionAt], h[typeAt] = Version, typeAtomicResp
	h[atomicRespStatusAt] = status
	le.PutUint32(h[atomicRespIDAt:], id)
	le.PutUint64(h[atomicRespOldAt:], old)
	return append(b, h[:]...)
}

// atomicRespLen is the length of an ATOMIC_RESP frame.
func atomicRespLen() int { return atomicRespHdrLen }

// parseAtomicResp decodes an ATOMIC_RESP from the start of b.
func parseAtomicResp(b []byte) (atomicRespHdr, error) {
	if err := checkHeader(b, typeAtomicResp, atomicRespHdrLen, atomicRespReservedAt); err != nil {
		return atomicRespHdr{}, err
	}
	h := atomicRespHdr{status: b[atomicRespStatusAt], id: le.Uint32(b[atomicRespIDAt:]), old: le.Uint64(b[atomicRespOldAt:])}
	if h.id == 0 {
		return atomicRespHdr{}, malformed(codeMalformed, "ATOMIC_RESP with id 0")
	}
	return h, nil
}
