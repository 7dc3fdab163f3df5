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

// The PUT_SIGNAL header, field by field: each offset is the one before it
// plus that field's width.
const (
	putSignalOpAt       = prefixLen               // signal op, 1 byte
	putSignalReservedAt = putSignalOpAt + 1       // reserved, 1 byte
	putSignalLenAt      = putSignalReservedAt + 1 // Len, 4 bytes
	putSignalOffAt      = putSignalLenAt + 4      // Off, 8 bytes
	putSignalSigOffAt   = putSignalOffAt + 8      // SigOff, 8 bytes
	putSignalSigVAt     = putSignalSigOffAt + 8   // SigV, 8 bytes
	putSignalHdrLen     = putSignalSigVAt + 8
)

type putSignalHdr struct {
	off    uint64
	n      uint32
	sigOff uint64
	sigOp  byte
	sigV   uint64
}

// appendPutSignal appends a PUT_SIGNAL header for n payload bytes.
func appendPutSignal(b []byte, off uint64, n uint32, sigOff uint64, sigOp byte, sigV uint64) []byte {
	var h [putSignalHdrLen]byte // the reserved byte stays 0
	h[versionAt], h[typeAt] = Version, typePutSignal
	h[putSignalOpAt] = sigOp
	le.PutUint32(h[putSignalLenAt:], n)
	le.PutUint64(h[putSignalOffAt:], off)
	le.PutUint64(h[putSignalSigOffAt:], sigOff)
	le.PutUint64(h[putSignalSigVAt:], sigV)
	return append(b, h[:]...)
}

// putSignalLen is the length of a PUT_SIGNAL frame with n payload bytes.
func putSignalLen(n int) int { return putSignalHdrLen + n }

// parsePutSignal decodes a PUT_SIGNAL header from the start of b.
func parsePutSignal(b []byte) (putSignalHdr, error) {
	if err := checkHeader(b, typePutSignal, putSignalHdrLen, putSignalReservedAt); err != nil {
		return putSignalHdr{}, err
	}
	h := putSignalHdr{
		sigOp:  b[putSignalOpAt],
		n:      le.Uint32(b[putSignalLenAt:]),
		off:    le.Uint64(b[putSignalOffAt:]),
		sigOff: le.Uint64(b[putSignalSigOffAt:]),
		sigV:   le.Uint64(b[putSignalSigVAt:]),
	}
	switch {
	case h.sigOp != signalSet && h.sigOp != signalAdd:
		return putSignalHdr{}, malformed(codeMalformed, "PUT_SIGNAL with signal op 0x%02x", h.sigOp)
	case h.n > MaxPayload:
		return putSignalHdr{}, malformed(codeLength, "PUT_SIGNAL of %d bytes: past %d", h.n, MaxPayload)
	}
	return h, nil
}
