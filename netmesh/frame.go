package netmesh

import (
	"encoding/binary"
	"fmt"

	"github.com/goshmem/goshmem/internal/errs"
)

// Every frame starts with the same two bytes:
//
//	offset  width  meaning
//	0       1      Version (0x02); checked before anything else
//	1       1      frame type (typePut ... typeError)
//
// All multi-byte integers are little-endian. Each frame type has a fixed
// header length (hdrLen); PUT, PUT_SIGNAL, GET_RESP and ERROR headers are
// followed by a payload whose length the header states. Reserved bytes
// are zero, and a receiver refuses a frame where they are not.
//
// Each frame type has three functions in its own file: appendX appends
// the header (the payload, if any, is sent after it separately, so large
// payloads are never copied), xLen reports the whole frame's length, and
// parseX decodes a header from bytes. Parsing only checks that the bytes
// are well-formed; judging whether offsets and lengths fit this PE's
// segment is validate.go's job.
//
// Each file defines its frames' field offsets as constants right after
// their byte tables: each offset is the one before it plus that field's
// width, starting at prefixLen, and the header length (xHdrLen) is the
// last offset plus its width. Encoders and parsers use only those names.

// The prefix, field by field.
const (
	versionAt = 0             // Version, 1 byte
	typeAt    = versionAt + 1 // frame type, 1 byte
)

// Ensure prefixLen (const.go) is the prefix's length: a negative constant
// converted to uint does not compile.
const _ = uint(prefixLen-(typeAt+1)) + uint(typeAt+1-prefixLen)

// maxHdrLen is the longest header of any frame type.
const maxHdrLen = max(putHdrLen, getHdrLen, getRespHdrLen, atomicHdrLen, atomicRespHdrLen,
	putSignalHdrLen, flushHdrLen, flushReplyHdrLen, heartbeatHdrLen, goodbyeHdrLen, errorHdrLen)

var le = binary.LittleEndian

// appendFramePrefix appends the prefix of a frame of type t.
func appendFramePrefix(b []byte, t byte) []byte {
	var h [prefixLen]byte
	h[versionAt], h[typeAt] = Version, t
	return append(b, h[:]...)
}

// hdrLen returns the header length of frame type t, or 0 for an unknown
// type.
func hdrLen(t byte) int {
	switch t {
	case typePut:
		return putHdrLen
	case typeGet:
		return getHdrLen
	case typeGetResp:
		return getRespHdrLen
	case typeAtomic:
		return atomicHdrLen
	case typeAtomicResp:
		return atomicRespHdrLen
	case typePutSignal:
		return putSignalHdrLen
	case typeFlush:
		return flushHdrLen
	case typeFlushReply:
		return flushReplyHdrLen
	case typeHeartbeat:
		return heartbeatHdrLen
	case typeGoodbye:
		return goodbyeHdrLen
	case typeError:
		return errorHdrLen
	}
	return 0
}

// payloadLen returns the payload length that hdr, the whole header of a
// frame of type t, states: read at the offset the type's parser reads it
// from, without judging it (0 for a type without a payload).
func payloadLen(t byte, hdr []byte) int {
	switch t {
	case typePut:
		return int(le.Uint32(hdr[putLenAt:]))
	case typePutSignal:
		return int(le.Uint32(hdr[putSignalLenAt:]))
	case typeGetResp:
		return int(le.Uint32(hdr[getRespLenAt:]))
	case typeError:
		return int(le.Uint16(hdr[errorLenAt:]))
	}
	return 0
}

// typeName names frame type t for messages.
func typeName(t byte) string {
	switch t {
	case typePut:
		return "PUT"
	case typeGet:
		return "GET"
	case typeGetResp:
		return "GET_RESP"
	case typeAtomic:
		return "ATOMIC"
	case typeAtomicResp:
		return "ATOMIC_RESP"
	case typePutSignal:
		return "PUT_SIGNAL"
	case typeFlush:
		return "FLUSH"
	case typeFlushReply:
		return "FLUSH_REPLY"
	case typeHeartbeat:
		return "HEARTBEAT"
	case typeGoodbye:
		return "GOODBYE"
	case typeError:
		return "ERROR"
	}
	return fmt.Sprintf("type 0x%02x", t)
}

// wireError is a malformed frame: the code for the ERROR frame that tells
// the peer, and the error for the local side (it wraps errs.Protocol).
type wireError struct {
	code uint16
	msg  string
}

func (e *wireError) Error() string { return "netmesh: " + e.msg }
func (e *wireError) Unwrap() error { return errs.Protocol }

func malformed(code uint16, format string, args ...any) error {
	return &wireError{code: code, msg: fmt.Sprintf(format, args...)}
}

// parsePrefix checks the first two bytes of a frame: the version first,
// then that the type is known. It returns the type and its header length.
func parsePrefix(b []byte) (t byte, n int, err error) {
	if len(b) < prefixLen {
		return 0, 0, malformed(codeMalformed, "frame of %d bytes, shorter than its %d-byte prefix", len(b), prefixLen)
	}
	if b[versionAt] != Version {
		return 0, 0, malformed(codeVersion, "frame of protocol version %d, want %d", b[versionAt], Version)
	}
	t = b[typeAt]
	n = hdrLen(t)
	if n == 0 {
		return 0, 0, malformed(codeType, "unknown frame type 0x%02x", t)
	}
	return t, n, nil
}

// checkHeader verifies that b holds at least the n-byte header of type t
// and that bytes[at] for each at in zero are zero.
func checkHeader(b []byte, t byte, n int, zero ...int) error {
	if len(b) < n {
		return malformed(codeMalformed, "%s header of %d bytes, want %d", typeName(t), len(b), n)
	}
	if b[versionAt] != Version {
		return malformed(codeVersion, "frame of protocol version %d, want %d", b[versionAt], Version)
	}
	if b[typeAt] != t {
		return malformed(codeType, "%s parsed as %s", typeName(b[typeAt]), typeName(t))
	}
	for _, at := range zero {
		if b[at] != 0 {
			return malformed(codeMalformed, "%s reserved byte %d is 0x%02x, want 0", typeName(t), at, b[at])
		}
	}
	return nil
}

// Frame is one decoded frame of any type, for the fuzz target and tests;
// the reader decodes headers with the per-type parsers and streams
// payloads straight to their destination instead.
type Frame struct {
	Type    byte
	ID      uint32
	Off     uint64
	Len     uint32 // payload or request length
	Op      byte   // ATOMIC: AtomicOp; PUT_SIGNAL: signalSet/signalAdd
	Width   byte
	V, Cond uint64 // ATOMIC operands; PUT_SIGNAL: V is the signal value
	SigOff  uint64
	Status  byte
	Old     uint64
	Code    uint16
	Payload []byte // PUT, PUT_SIGNAL, GET_RESP payload; ERROR text
}

// AppendFrame appends f's whole encoding (header and payload) to b. It
// trusts f: lengths come from len(f.Payload) where there is a payload.
func AppendFrame(b []byte, f *Frame) []byte {
	switch f.Type {
	case typePut:
		b = appendPut(b, f.Off, uint32(len(f.Payload)))
	case typeGet:
		return appendGet(b, f.ID, f.Off, f.Len)
	case typeGetResp:
		b = appendGetResp(b, f.ID, f.Status, uint32(len(f.Payload)))
	case typeAtomic:
		return appendAtomic(b, f.ID, f.Op, f.Width, f.Off, f.V, f.Cond)
	case typeAtomicResp:
		return appendAtomicResp(b, f.ID, f.Status, f.Old)
	case typePutSignal:
		b = appendPutSignal(b, f.Off, uint32(len(f.Payload)), f.SigOff, f.Op, f.V)
	case typeFlush:
		return appendFlush(b, f.ID)
	case typeFlushReply:
		return appendFlushReply(b, f.ID)
	case typeHeartbeat:
		return appendHeartbeat(b)
	case typeGoodbye:
		return appendGoodbye(b)
	case typeError:
		return appendError(b, f.Code, string(f.Payload))
	default:
		panic(fmt.Sprintf("netmesh: AppendFrame of unknown type 0x%02x", f.Type))
	}
	return append(b, f.Payload...)
}

// ParseFrame decodes the frame at the start of b and returns it with the
// number of bytes it used. The payload aliases b. Truncated or malformed
// bytes return an error wrapping errs.Protocol; it never panics.
func ParseFrame(b []byte) (f Frame, n int, err error) {
	t, hl, err := parsePrefix(b)
	if err != nil {
		return f, 0, err
	}
	f.Type = t
	var plen int
	switch t {
	case typePut:
		h, err := parsePut(b)
		if err != nil {
			return f, 0, err
		}
		f.Off, f.Len, plen = h.off, h.n, int(h.n)
	case typeGet:
		h, err := parseGet(b)
		if err != nil {
			return f, 0, err
		}
		f.ID, f.Off, f.Len = h.id, h.off, h.n
	case typeGetResp:
		h, err := parseGetResp(b)
		if err != nil {
			return f, 0, err
		}
		f.ID, f.Status, f.Len, plen = h.id, h.status, h.n, int(h.n)
	case typeAtomic:
		h, err := parseAtomic(b)
		if err != nil {
			return f, 0, err
		}
		f.ID, f.Op, f.Width, f.Off, f.V, f.Cond = h.id, byte(h.op), h.width, h.off, h.v, h.cond
	case typeAtomicResp:
		h, err := parseAtomicResp(b)
		if err != nil {
			return f, 0, err
		}
		f.ID, f.Status, f.Old = h.id, h.status, h.old
	case typePutSignal:
		h, err := parsePutSignal(b)
		if err != nil {
			return f, 0, err
		}
		f.Off, f.Len, f.SigOff, f.Op, f.V, plen = h.off, h.n, h.sigOff, h.sigOp, h.sigV, int(h.n)
	case typeFlush:
		id, err := parseFlush(b)
		if err != nil {
			return f, 0, err
		}
		f.ID = id
	case typeFlushReply:
		id, err := parseFlushReply(b)
		if err != nil {
			return f, 0, err
		}
		f.ID = id
	case typeHeartbeat:
		if err := parseHeartbeat(b); err != nil {
			return f, 0, err
		}
	case typeGoodbye:
		if err := parseGoodbye(b); err != nil {
			return f, 0, err
		}
	case typeError:
		code, tl, err := parseError(b)
		if err != nil {
			return f, 0, err
		}
		f.Code, f.Len, plen = code, uint32(tl), tl
	}
	if len(b)-hl < plen {
		return f, 0, malformed(codeMalformed, "%s with a %d-byte payload cut short at %d bytes", typeName(t), plen, len(b)-hl)
	}
	if plen > 0 {
		f.Payload = b[hl : hl+plen : hl+plen]
	}
	return f, hl + plen, nil
}
