package netmesh

import "github.com/goshmem/goshmem/heap"

// ATOMIC (0x04): apply Op to the Width-byte word at Off of the
// receiver's segment, with heap.AtomicAt (the same hardware atomics the
// same-host path uses).
//
//	offset  width  byte order  meaning
//	0       1      -           Version (0x01)
//	1       1      -           type 0x04
//	2       1      -           Op: heap.AtomicOp, 0x01 fetch .. 0x08 fetch-xor
//	3       1      -           Width: 4 or 8
//	4       4      LE uint32   ID: 0 = no reply wanted; else answered by ATOMIC_RESP
//	8       8      LE uint64   Off: a multiple of Width
//	16      8      LE uint64   V: the operand (low 4 bytes at Width 4)
//	24      8      LE uint64   Cond: the compare value of compare-swap, else 0
//
// ATOMIC_RESP (0x05): the old value of the word.
//
//	offset  width  byte order  meaning
//	0       1      -           Version (0x01)
//	1       1      -           type 0x05
//	2       1      -           status: 0x00 OK (no other value is defined)
//	3       1      -           reserved, 0
//	4       4      LE uint32   ID of the ATOMIC
//	8       8      LE uint64   Old: the word before the op (zero-extended at Width 4;
//	                           0 for set)

type atomicHdr struct {
	id     uint32
	op     heap.AtomicOp
	width  byte
	off    uint64
	v      uint64
	cond   uint64
	status byte
}

// appendAtomic appends an ATOMIC request.
func appendAtomic(b []byte, id uint32, op, width byte, off, v, cond uint64) []byte {
	b = append(b, Version, typeAtomic, op, width)
	b = le.AppendUint32(b, id)
	b = le.AppendUint64(b, off)
	b = le.AppendUint64(b, v)
	return le.AppendUint64(b, cond)
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
		op:    heap.AtomicOp(b[2]),
		width: b[3],
		id:    le.Uint32(b[4:8]),
		off:   le.Uint64(b[8:16]),
		v:     le.Uint64(b[16:24]),
		cond:  le.Uint64(b[24:32]),
	}, nil
}

type atomicRespHdr struct {
	id     uint32
	status byte
	old    uint64
}

// appendAtomicResp appends an ATOMIC_RESP.
func appendAtomicResp(b []byte, id uint32, status byte, old uint64) []byte {
	b = append(b, Version, typeAtomicResp, status, 0)
	b = le.AppendUint32(b, id)
	return le.AppendUint64(b, old)
}

// atomicRespLen is the length of an ATOMIC_RESP frame.
func atomicRespLen() int { return atomicRespHdrLen }

// parseAtomicResp decodes an ATOMIC_RESP from the start of b.
func parseAtomicResp(b []byte) (atomicRespHdr, error) {
	if err := checkHeader(b, typeAtomicResp, atomicRespHdrLen, 3); err != nil {
		return atomicRespHdr{}, err
	}
	h := atomicRespHdr{status: b[2], id: le.Uint32(b[4:8]), old: le.Uint64(b[8:16])}
	if h.id == 0 {
		return atomicRespHdr{}, malformed(codeMalformed, "ATOMIC_RESP with id 0")
	}
	return h, nil
}
