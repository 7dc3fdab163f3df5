package netmesh

// PUT (0x01): write Len payload bytes at Off of the receiver's segment.
// No reply; a later FLUSH_REPLY says it was applied.
//
//	offset  width  byte order  meaning
//	0       1      -           Version (0x02)
//	1       1      -           type 0x01
//	2       4      LE uint32   Len: payload bytes, 0 < Len <= MaxPayload
//	6       8      LE uint64   Off: where the payload goes in the receiver's segment
//	14      Len    -           payload
//
// The receiver checks Off+Len <= len(segment) before it reads a payload
// byte, then reads the payload from the socket straight into the segment.

// The PUT header, field by field: each offset is the one before it plus
// that field's width.
const (
	putLenAt  = prefixLen    // Len, 4 bytes
	putOffAt  = putLenAt + 4 // Off, 8 bytes
	putHdrLen = putOffAt + 8
)

type putHdr struct {
	off uint64
	n   uint32
}

// appendPut appends a PUT header for n payload bytes at off.
func appendPut(b []byte, off uint64, n uint32) []byte {
	var h [putHdrLen]byte
	h[versionAt], h[typeAt] = Version, typePut
	le.PutUint32(h[putLenAt:], n)
	le.PutUint64(h[putOffAt:], off)
	return append(b, h[:]...)
}

// putLen is the length of a PUT frame with n payload bytes.
func putLen(n int) int { return putHdrLen + n }

// parsePut decodes a PUT header from the start of b.
func parsePut(b []byte) (putHdr, error) {
	if err := checkHeader(b, typePut, putHdrLen); err != nil {
		return putHdr{}, err
	}
	h := putHdr{n: le.Uint32(b[putLenAt:]), off: le.Uint64(b[putOffAt:])}
	if h.n == 0 || h.n > MaxPayload {
		return putHdr{}, malformed(codeLength, "PUT of %d bytes: want 1..%d", h.n, MaxPayload)
	}
	return h, nil
}
