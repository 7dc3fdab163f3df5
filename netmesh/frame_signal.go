package netmesh

// PUT_SIGNAL (0x06): write Len payload bytes at Off, then update the
// 8-byte signal word at SigOff (store or add SigV, atomically). The
// receiver checks both ranges before it applies either, and applies the
// data before the signal, so whoever sees the signal sees the data.
//
//	offset  width  byte order  meaning
//	0       1      -           Version (0x02)
//	1       1      -           type 0x06
//	2       1      -           signal op: 0x01 set, 0x02 add
//	3       1      -           reserved, 0
//	4       4      LE uint32   Len: payload bytes, 0 <= Len <= MaxPayload
//	8       8      LE uint64   Off: where the payload goes
//	16      8      LE uint64   SigOff: the signal word, a multiple of 8
//	24      8      LE uint64   SigV
//	32      Len    -           payload

type putSignalHdr struct {
	off    uint64
	n      uint32
	sigOff uint64
	sigOp  byte
	sigV   uint64
}

// putSignalLenAt is the offset of Len in the header.
const putSignalLenAt = 4

// appendPutSignal appends a PUT_SIGNAL header for n payload bytes.
func appendPutSignal(b []byte, off uint64, n uint32, sigOff uint64, sigOp byte, sigV uint64) []byte {
	b = append(b, Version, typePutSignal, sigOp, 0)
	b = le.AppendUint32(b, n)
	b = le.AppendUint64(b, off)
	b = le.AppendUint64(b, sigOff)
	return le.AppendUint64(b, sigV)
}

// putSignalLen is the length of a PUT_SIGNAL frame with n payload bytes.
func putSignalLen(n int) int { return putSignalHdrLen + n }

// parsePutSignal decodes a PUT_SIGNAL header from the start of b.
func parsePutSignal(b []byte) (putSignalHdr, error) {
	if err := checkHeader(b, typePutSignal, putSignalHdrLen, 3); err != nil {
		return putSignalHdr{}, err
	}
	h := putSignalHdr{
		sigOp:  b[2],
		n:      le.Uint32(b[putSignalLenAt:]),
		off:    le.Uint64(b[8:16]),
		sigOff: le.Uint64(b[16:24]),
		sigV:   le.Uint64(b[24:32]),
	}
	switch {
	case h.sigOp != signalSet && h.sigOp != signalAdd:
		return putSignalHdr{}, malformed(codeMalformed, "PUT_SIGNAL with signal op 0x%02x", h.sigOp)
	case h.n > MaxPayload:
		return putSignalHdr{}, malformed(codeLength, "PUT_SIGNAL of %d bytes: past %d", h.n, MaxPayload)
	}
	return h, nil
}
