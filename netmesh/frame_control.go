package netmesh

// FLUSH (0x07) and FLUSH_REPLY (0x08): remote completion. The receiver of
// a FLUSH sends FLUSH_REPLY with the same ID after it has applied every
// frame it read before the FLUSH on that stream, and after every response
// to a request read before it.
//
//	offset  width  byte order  meaning
//	0       1      -           Version (0x02)
//	1       1      -           type 0x07 (FLUSH) or 0x08 (FLUSH_REPLY)
//	2       2      -           reserved, 0
//	4       4      LE uint32   ID, non-zero
//
// HEARTBEAT (0x09): sent on a stream that has sent nothing for one
// heartbeat interval. GOODBYE (0x0A): the sender sends no more frames on
// this stream and is closing it cleanly. Both are the prefix alone:
//
//	offset  width  byte order  meaning
//	0       1      -           Version (0x02)
//	1       1      -           type 0x09 or 0x0A
//
// ERROR (0x0B): the sender found a protocol violation and closes the
// link after this frame.
//
//	offset  width  byte order  meaning
//	0       1      -           Version (0x02)
//	1       1      -           type 0x0B
//	2       2      LE uint16   code (codeVersion ... codeOutstanding)
//	4       2      LE uint16   N: text bytes, N <= MaxErrorText
//	6       N      -           text: UTF-8, for logs only

// The FLUSH and FLUSH_REPLY header, field by field: each offset is the one
// before it plus that field's width.
const (
	flushReservedAt  = prefixLen           // reserved, 2 bytes
	flushIDAt        = flushReservedAt + 2 // ID, 4 bytes
	flushHdrLen      = flushIDAt + 4
	flushReplyHdrLen = flushHdrLen // the same layout
)

// HEARTBEAT and GOODBYE: the prefix alone.
const (
	heartbeatHdrLen = prefixLen
	goodbyeHdrLen   = prefixLen
)

// The ERROR header, field by field.
const (
	errorCodeAt = prefixLen       // code, 2 bytes
	errorLenAt  = errorCodeAt + 2 // N, 2 bytes
	errorHdrLen = errorLenAt + 2
)

// appendFlush appends a FLUSH request.
func appendFlush(b []byte, id uint32) []byte {
	return appendFlushID(b, typeFlush, id)
}

// flushLen is the length of a FLUSH frame.
func flushLen() int { return flushHdrLen }

// parseFlush decodes a FLUSH from the start of b.
func parseFlush(b []byte) (uint32, error) { return parseFlushID(b, typeFlush) }

// appendFlushReply appends a FLUSH_REPLY.
func appendFlushReply(b []byte, id uint32) []byte {
	return appendFlushID(b, typeFlushReply, id)
}

// flushReplyLen is the length of a FLUSH_REPLY frame.
func flushReplyLen() int { return flushReplyHdrLen }

// parseFlushReply decodes a FLUSH_REPLY from the start of b.
func parseFlushReply(b []byte) (uint32, error) { return parseFlushID(b, typeFlushReply) }

// appendFlushID appends a FLUSH or FLUSH_REPLY (t) with id.
func appendFlushID(b []byte, t byte, id uint32) []byte {
	var h [flushHdrLen]byte // the reserved bytes stay 0
	h[versionAt], h[typeAt] = Version, t
	le.PutUint32(h[flushIDAt:], id)
	return append(b, h[:]...)
}

func parseFlushID(b []byte, t byte) (uint32, error) {
	if err := checkHeader(b, t, flushHdrLen, flushReservedAt, flushReservedAt+1); err != nil {
		return 0, err
	}
	id := le.Uint32(b[flushIDAt:])
	if id == 0 {
		return 0, malformed(codeMalformed, "%s with id 0", typeName(t))
	}
	return id, nil
}

// appendHeartbeat appends a HEARTBEAT.
func appendHeartbeat(b []byte) []byte { return appendFramePrefix(b, typeHeartbeat) }

// heartbeatLen is the length of a HEARTBEAT frame.
func heartbeatLen() int { return heartbeatHdrLen }

// parseHeartbeat checks a HEARTBEAT at the start of b.
func parseHeartbeat(b []byte) error { return checkHeader(b, typeHeartbeat, heartbeatHdrLen) }

// appendGoodbye appends a GOODBYE.
func appendGoodbye(b []byte) []byte { return appendFramePrefix(b, typeGoodbye) }

// goodbyeLen is the length of a GOODBYE frame.
func goodbyeLen() int { return goodbyeHdrLen }

// parseGoodbye checks a GOODBYE at the start of b.
func parseGoodbye(b []byte) error { return checkHeader(b, typeGoodbye, goodbyeHdrLen) }

// appendError appends an ERROR frame; text is cut to MaxErrorText bytes.
func appendError(b []byte, code uint16, text string) []byte {
	text = text[:min(len(text), MaxErrorText)]
	var h [errorHdrLen]byte
	h[versionAt], h[typeAt] = Version, typeError
	le.PutUint16(h[errorCodeAt:], code)
	le.PutUint16(h[errorLenAt:], uint16(len(text)))
	b = append(b, h[:]...)
	return append(b, text...)
}

// errorLen is the length of an ERROR frame with text of n bytes.
func errorLen(n int) int { return errorHdrLen + min(n, MaxErrorText) }

// parseError decodes an ERROR header from the start of b: the code and
// the length of the text that follows.
func parseError(b []byte) (code uint16, n int, err error) {
	if err := checkHeader(b, typeError, errorHdrLen); err != nil {
		return 0, 0, err
	}
	code, n = le.Uint16(b[errorCodeAt:]), int(le.Uint16(b[errorLenAt:]))
	if n > MaxErrorText {
		return 0, 0, malformed(codeLength, "ERROR text of %d bytes: past %d", n, MaxErrorText)
	}
	return code, n, nil
}
