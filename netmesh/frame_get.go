package netmesh

// GET (0x02): a request for Len bytes at Off of the receiver's segment.
// The receiver answers with a GET_RESP carrying the same ID.
//
//	offset  width  byte order  meaning
//	0       1      -           Version (0x02)
//	1       1      -           type 0x02
//	2       4      LE uint32   ID: the requester's id, non-zero
//	6       4      LE uint32   Len: 0 < Len <= MaxPayload
//	10      8      LE uint64   Off
//
// GET_RESP (0x03): the answer to the GET with this ID.
//
//	offset  width  byte order  meaning
//	0       1      -           Version (0x02)
//	1       1      -           type 0x03
//	2       1      -           status: 0x00 OK; any other value is a refusal
//	                           (none is defined in version 1) and then Len is 0
//	3       1      -           reserved, 0
//	4       4      LE uint32   ID of the GET
//	8       4      LE uint32   Len: the GET's Len when status is OK
//	12      Len    -           payload: the bytes read from the responder's segment
//
// A responder sends GET_RESP frames on the stream the GET came in on, in
// the order it read the GETs, and before the FLUSH_REPLY of any FLUSH it
// read after them. The requester reads the payload from the socket
// straight into the caller's destination.

// The GET header, field by field: each offset is the one before it plus
// that field's width.
const (
	getIDAt   = prefixLen    // ID, 4 bytes
	getLenAt  = getIDAt + 4  // Len, 4 bytes
	getOffAt  = getLenAt + 4 // Off, 8 bytes
	getHdrLen = getOffAt + 8
)

// The GET_RESP header, field by field.
const (
	getRespStatusAt   = prefixLen             // status, 1 byte
	getRespReservedAt = getRespStatusAt + 1   // reserved, 1 byte
	getRespIDAt       = getRespReservedAt + 1 // ID, 4 bytes
	getRespLenAt      = getRespIDAt + 4       // Len, 4 bytes
	getRespHdrLen     = getRespLenAt + 4
)

type getHdr struct {
	id  uint32
	n   uint32
	off uint64
}

// appendGet appends a GET request.
func appendGet(b []byte, id uint32, off uint64, n uint32) []byte {
	var h [getHdrLen]byte
	h[versionAt], h[typeAt] = Version, typeGet
	le.PutUint32(h[getIDAt:], id)
	le.PutUint32(h[getLenAt:], n)
	le.PutUint64(h[getOffAt:], off)
	return append(b, h[:]...)
}

// getLen is the length of a GET frame.
func getLen() int { return getHdrLen }

// parseGet decodes a GET from the start of b.
func parseGet(b []byte) (getHdr, error) {
	if err := checkHeader(b, typeGet, getHdrLen); err != nil {
		return getHdr{}, err
	}
	h := getHdr{id: le.Uint32(b[getIDAt:]), n: le.Uint32(b[getLenAt:]), off: le.Uint64(b[getOffAt:])}
	switch {
	case h.id == 0:
		return getHdr{}, malformed(codeMalformed, "GET with id 0")
	case h.n == 0 || h.n > MaxPayload:
		return getHdr{}, malformed(codeLength, "GET of %d bytes: want 1..%d", h.n, MaxPayload)
	}
	return h, nil
}

type getRespHdr struct {
	id     uint32
	status byte
	n      uint32
}

// appendGetResp appends a GET_RESP header for n payload bytes.
func appendGetResp(b []byte, id uint32, status byte, n uint32) []byte {
	var h [getRespHdrLen]byte // the reserved byte stays 0
	h[versionAt], h[typeAt] = Version, typeGetResp
	h[getRespStatusAt] = status
	le.PutUint32(h[getRespIDAt:], id)
	le.PutUint32(h[getRespLenAt:], n)
	return append(b, h[:]...)
}

// getRespLen is the length of a GET_RESP frame with n payload bytes.
func getRespLen(n int) int { return getRespHdrLen + n }

// parseGetResp decodes a GET_RESP header from the start of b.
func parseGetResp(b []byte) (getRespHdr, error) {
	if err := checkHeader(b, typeGetResp, getRespHdrLen, getRespReservedAt); err != nil {
		return getRespHdr{}, err
	}
	h := getRespHdr{status: b[getRespStatusAt], id: le.Uint32(b[getRespIDAt:]), n: le.Uint32(b[getRespLenAt:])}
	switch {
	case h.id == 0:
		return getRespHdr{}, malformed(codeMalformed, "GET_RESP with id 0")
	case h.n > MaxPayload:
		return getRespHdr{}, malformed(codeLength, "GET_RESP of %d bytes: past %d", h.n, MaxPayload)
	case h.status != statusOK && h.n != 0:
		return getRespHdr{}, malformed(codeMalformed, "GET_RESP with status 0x%02x and %d payload bytes", h.status, h.n)
	}
	return h, nil
}
