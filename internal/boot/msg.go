package boot

import (
	"fmt"
	"math"

	"github.com/hashicorp/go-msgpack/v2/codec"

	"github.com/goshmem/goshmem/internal/errs"
)

// Message kinds: the byte after a frame's length word. Explicit values;
// TestWireConstants pins them.
const (
	kindHello        = 0x01 // server -> client, first frame on a connection
	kindJoin         = 0x02 // client -> server, answer to Hello
	kindWelcome      = 0x03 // server -> client, the client has joined
	kindError        = 0x04 // either way; the sender closes after it
	kindGather       = 0x10 // client -> server, one rank's part of a round
	kindGatherResult = 0x11 // server -> client, every rank's part of a round
	kindRoundFailed  = 0x12 // server -> client, a round failed; later rounds may work
	kindPeerLost     = 0x13 // server -> client, the job lost a rank; no round can complete
	kindStatus       = 0x14 // client -> server, how many ranks reached a round?
	kindStatusReply  = 0x15 // server -> client, answer to Status
	kindExit         = 0x20 // client -> server, end the job with a code
	kindExitAck      = 0x21 // server -> client, answer to Exit
	kindBye          = 0x22 // client -> server, orderly close; the client sends nothing more
	kindJobEnded     = 0x23 // server -> client, another rank called GlobalExit: end this PE with the code
)

// Wire values of the handshake.
const (
	helloMagic   = "goshboot"
	helloVersion = 2
)

// Bounds on what a peer may send, checked before the bytes are used.
const (
	// MaxGatherData bounds one rank's contribution to an Allgather round.
	MaxGatherData = 1 << 20
	// maxGatherTotal bounds the sum of all contributions to a round, so
	// that the GatherResult frame fits in MaxFrame with room for msgpack
	// headers (at most 5 bytes per part plus a few dozen for the struct).
	maxGatherTotal = MaxFrame - 1<<20
	// maxClientFrame bounds frames from an authenticated client: a Gather
	// with MaxGatherData bytes and its small header.
	maxClientFrame = MaxGatherData + 1<<10
	maxText        = 4 << 10 // Error and failure messages, job ids
	maxMissing     = 32      // ranks listed in a StatusReply
)

// Error codes carried in an Error message.
const (
	errCodeAuth     = 1 // handshake refused: job id, rank or size (a bad proof is refused inside the key exchange)
	errCodeProtocol = 2 // malformed or unexpected frame
	errCodeInvalid  = 3 // a well-formed request the receiver cannot honour
)

// message is one decoded boot message.
type message interface {
	kind() byte
	// check judges the fields that need no context: lengths and ranges.
	// It returns an error wrapping errs.Protocol.
	check() error
}

// hello opens every connection (server -> client).
//
//	field    codec name  type    meaning
//	Magic    magic       string  "goshboot"
//	Version  version     uint    2
//	JobID    job         string  the server's job id, at most 4 KiB
type hello struct {
	Magic   string `codec:"magic"`
	Version uint   `codec:"version"`
	JobID   string `codec:"job"`
}

// join answers hello (client -> server). The key exchange (auth.go)
// follows it on the raw connection.
//
//	field  codec name  type    meaning
//	Rank   rank        int     the client's rank, 0 <= rank < size
//	Size   size        int     the job size the client was told
type join struct {
	Rank int `codec:"rank"`
	Size int `codec:"size"`
}

// welcome accepts a join (server -> client), after the key exchange.
// It has no fields (an empty map).
type welcome struct{}

// errorMsg reports why the sender is about to close (either way).
//
//	field  codec name  type    meaning
//	Code   code        uint    errCodeAuth, errCodeProtocol or errCodeInvalid
//	Msg    msg         string  human-readable reason, at most 4 KiB, no secrets
type errorMsg struct {
	Code uint   `codec:"code"`
	Msg  string `codec:"msg"`
}

// gather is one rank's contribution to a round (client -> server).
//
//	field  codec name  type    meaning
//	Round  round       uint    1 for the first Allgather on a connection, then +1 per call
//	Data   data        bin     at most MaxGatherData bytes
type gather struct {
	Round uint64 `codec:"round"`
	Data  []byte `codec:"data"`
}

// gatherResult completes a round (server -> client).
//
//	field  codec name  type          meaning
//	Round  round       uint          the round completed
//	Data   data        array of bin  Data[r] is rank r's contribution; len = job size
type gatherResult struct {
	Round uint64   `codec:"round"`
	Data  [][]byte `codec:"data"`
}

// roundFailed ends a round without a result (server -> client). Every
// rank gets it, so all stay in step and may run the next round.
//
//	field  codec name  type    meaning
//	Round  round       uint    the round that failed
//	Msg    msg         string  why (for example, the parts add up to too much)
type roundFailed struct {
	Round uint64 `codec:"round"`
	Msg   string `codec:"msg"`
}

// peerLost says that no further round can complete (server -> client):
// a rank's connection dropped without Bye, or a rank said Bye while
// others still gather.
//
//	field  codec name  type    meaning
//	Rank   rank        int     the rank the job lost (the first one)
//	Msg    msg         string  how it was lost
type peerLost struct {
	Rank int    `codec:"rank"`
	Msg  string `codec:"msg"`
}

// status asks how far a round has got (client -> server).
//
//	field  codec name  type  meaning
//	Round  round       uint  the round asked about
type status struct {
	Round uint64 `codec:"round"`
}

// statusReply answers status (server -> client).
//
//	field    codec name  type          meaning
//	Round    round       uint          the round asked about
//	Arrived  arrived     int           ranks whose part the server holds (size if complete);
//	                                   for a connection waiting for its generation, the parts held for it
//	Missing  missing     array of int  up to 32 ranks that have not arrived, ascending
type statusReply struct {
	Round   uint64 `codec:"round"`
	Arrived int    `codec:"arrived"`
	Missing []int  `codec:"missing"`
}

// exitReq asks the launcher to end the job (client -> server).
//
//	field  codec name  type  meaning
//	Code   code        int   the job's exit code
type exitReq struct {
	Code int `codec:"code"`
}

// exitAck answers exitReq (server -> client).
//
//	field  codec name  type  meaning
//	Code   code        int   the code acknowledged
type exitAck struct {
	Code int `codec:"code"`
}

// bye closes a connection in order (client -> server). Empty map.
type bye struct{}

// jobEnded tells every other connected rank that a rank asked for
// GlobalExit (server -> client). A PE with no launcher of its own to end
// it (under mpirun, mpiexec or srun) exits with Code; under goshrun the
// launcher ends the PEs anyway.
//
//	field  codec name  type  meaning
//	Rank   rank        int   the rank that called GlobalExit
//	Code   code        int   its exit code
type jobEnded struct {
	Rank int `codec:"rank"`
	Code int `codec:"code"`
}

func (*hello) kind() byte        { return kindHello }
func (*join) kind() byte         { return kindJoin }
func (*welcome) kind() byte      { return kindWelcome }
func (*errorMsg) kind() byte     { return kindError }
func (*gather) kind() byte       { return kindGather }
func (*gatherResult) kind() byte { return kindGatherResult }
func (*roundFailed) kind() byte  { return kindRoundFailed }
func (*peerLost) kind() byte     { return kindPeerLost }
func (*status) kind() byte       { return kindStatus }
func (*statusReply) kind() byte  { return kindStatusReply }
func (*exitReq) kind() byte      { return kindExit }
func (*exitAck) kind() byte      { return kindExitAck }
func (*bye) kind() byte          { return kindBye }
func (*jobEnded) kind() byte     { return kindJobEnded }

func protoErr(format string, args ...any) error {
	return fmt.Errorf("boot: "+format+": %w", append(args, errs.Protocol)...)
}

func checkText(what, s string) error {
	if len(s) > maxText {
		return protoErr("%s of %d bytes, limit %d", what, len(s), maxText)
	}
	return nil
}

func checkRank(what string, r int) error {
	if r < 0 || r > math.MaxInt32 {
		return protoErr("%s %d out of range", what, r)
	}
	return nil
}

func checkRound(r uint64) error {
	if r == 0 {
		return protoErr("round 0")
	}
	return nil
}

func (m *hello) check() error {
	if err := checkText("job id", m.JobID); err != nil {
		return err
	}
	return checkText("magic", m.Magic)
}

func (m *join) check() error {
	if err := checkRank("rank", m.Rank); err != nil {
		return err
	}
	if m.Size < 1 || m.Size > math.MaxInt32 {
		return protoErr("job size %d out of range", m.Size)
	}
	return nil
}

func (*welcome) check() error { return nil }

func (m *errorMsg) check() error { return checkText("error message", m.Msg) }

func (m *gather) check() error {
	if err := checkRound(m.Round); err != nil {
		return err
	}
	if len(m.Data) > MaxGatherData {
		return protoErr("gather of %d bytes, limit %d", len(m.Data), MaxGatherData)
	}
	return nil
}

func (m *gatherResult) check() error {
	if err := checkRound(m.Round); err != nil {
		return err
	}
	for r, d := range m.Data {
		if len(d) > MaxGatherData {
			return protoErr("round %d: part of rank %d has %d bytes, limit %d", m.Round, r, len(d), MaxGatherData)
		}
	}
	return nil
}

func (m *roundFailed) check() error {
	if err := checkRound(m.Round); err != nil {
		return err
	}
	return checkText("failure message", m.Msg)
}

func (m *peerLost) check() error {
	if err := checkRank("lost rank", m.Rank); err != nil {
		return err
	}
	return checkText("failure message", m.Msg)
}

func (m *status) check() error { return checkRound(m.Round) }

func (m *statusReply) check() error {
	if err := checkRound(m.Round); err != nil {
		return err
	}
	if err := checkRank("arrived count", m.Arrived); err != nil {
		return err
	}
	if len(m.Missing) > maxMissing {
		return protoErr("%d missing ranks listed, limit %d", len(m.Missing), maxMissing)
	}
	for _, r := range m.Missing {
		if err := checkRank("missing rank", r); err != nil {
			return err
		}
	}
	return nil
}

func (m *exitReq) check() error {
	if m.Code < math.MinInt32 || m.Code > math.MaxInt32 {
		return protoErr("exit code %d out of range", m.Code)
	}
	return nil
}

func (m *exitAck) check() error {
	if m.Code < math.MinInt32 || m.Code > math.MaxInt32 {
		return protoErr("exit code %d out of range", m.Code)
	}
	return nil
}

func (*bye) check() error { return nil }

func (m *jobEnded) check() error {
	if err := checkRank("exiting rank", m.Rank); err != nil {
		return err
	}
	if m.Code < math.MinInt32 || m.Code > math.MaxInt32 {
		return protoErr("exit code %d out of range", m.Code)
	}
	return nil
}

// newHandle returns the msgpack configuration of the boot protocol: bin
// types for []byte (the current msgpack spec), unknown map keys ignored.
// A handle is safe for concurrent use once configured; each Server and
// Client owns one.
func newHandle() *codec.MsgpackHandle {
	return &codec.MsgpackHandle{WriteExt: true}
}

// appendMessage appends m's frame (see frame.go) to dst.
func appendMessage(dst []byte, h *codec.MsgpackHandle, m message) ([]byte, error) {
	var body []byte
	if err := codec.NewEncoderBytes(&body, h).Encode(m); err != nil {
		return dst, fmt.Errorf("boot: encoding message kind %#02x: %w", m.kind(), err)
	}
	if frameLen(len(body)) > frameHeaderLen+MaxFrame {
		return dst, fmt.Errorf("boot: message kind %#02x of %d bytes, limit %d: %w", m.kind(), len(body)+1, MaxFrame, errs.Invalid)
	}
	return appendFrame(dst, m.kind(), body), nil
}

// encodeMessage returns m's frame.
func encodeMessage(h *codec.MsgpackHandle, m message) ([]byte, error) {
	return appendMessage(nil, h, m)
}

// newMessage returns an empty message of the given kind, or nil.
func newMessage(kind byte) message {
	switch kind {
	case kindHello:
		return new(hello)
	case kindJoin:
		return new(join)
	case kindWelcome:
		return new(welcome)
	case kindError:
		return new(errorMsg)
	case kindGather:
		return new(gather)
	case kindGatherResult:
		return new(gatherResult)
	case kindRoundFailed:
		return new(roundFailed)
	case kindPeerLost:
		return new(peerLost)
	case kindStatus:
		return new(status)
	case kindStatusReply:
		return new(statusReply)
	case kindExit:
		return new(exitReq)
	case kindExitAck:
		return new(exitAck)
	case kindBye:
		return new(bye)
	case kindJobEnded:
		return new(jobEnded)
	}
	return nil
}

// parseMessage decodes a frame's body. It only parses: the caller then
// judges the message with check and with what it knows of the job. Any
// failure, including bytes left over after the message, wraps
// errs.Protocol.
func parseMessage(h *codec.MsgpackHandle, kind byte, body []byte) (message, error) {
	m := newMessage(kind)
	if m == nil {
		return nil, protoErr("unknown message kind %#02x", kind)
	}
	d := codec.NewDecoderBytes(body, h)
	if err := d.Decode(m); err != nil {
		return nil, fmt.Errorf("boot: decoding message kind %#02x (%d bytes): %w: %v", kind, len(body), errs.Protocol, err)
	}
	if n := d.NumBytesRead(); n != len(body) {
		return nil, protoErr("message kind %#02x: %d trailing bytes", kind, len(body)-n)
	}
	return m, nil
}

// decodeMessage parses and checks one frame's body.
func decodeMessage(h *codec.MsgpackHandle, kind byte, body []byte) (message, error) {
	m, err := parseMessage(h, kind, body)
	if err != nil {
		return nil, err
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	return m, nil
}
