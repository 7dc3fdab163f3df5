package netmesh

import (
	"errors"
	"fmt"
	"io"

	"github.com/goshmem/goshmem/internal/auth"
	"github.com/goshmem/goshmem/internal/errs"
)

// The handshake opens every connection, before any frame. The dialing side
// (the lower rank of a link stream, "client") and the accepting side
// ("server") each say who they are in the clear, then the server runs
// the runtime's one challenge-response exchange (auth.Exchange, as its
// initiator) over both hellos, then the server accepts or refuses:
//
//	client -> server  HELLO      who I am, whom I want, my segment size
//	server -> client  REPLY      who I am, my segment size
//	server -> client  auth CHALLENGE   (internal/auth: 36 bytes)
//	client -> server  auth RESPONSE    (68 bytes, the client's proof)
//	server -> client  auth PROOF       (36 bytes, the server's proof)
//	server -> client  ACCEPT     frames may flow
//
// Either side may send REFUSE in place of its next netmesh message and
// close; a proof that does not verify is refused inside the exchange
// (auth REFUSE). The server proves last, so a stranger gets no proof
// from it.
//
// Every netmesh message starts with the same 8-byte prefix, stable
// across protocol versions:
//
//	offset  width  meaning
//	0       4      magic "GSNM"
//	4       1      Version (0x02): checked right after the magic, before any other field
//	5       1      kind: 0x01 HELLO, 0x02 REPLY, 0x04 ACCEPT, 0x05 REFUSE (0x03 unused)
//	6       2      kind-specific (below); reserved bytes are 0
//
// HELLO (32+J bytes):
//
//	offset  width  byte order  meaning
//	6       1      -           J: job id bytes, 1..255
//	7       1      -           reserved, 0
//	8       4      LE uint32   client rank
//	12      4      LE uint32   server rank: the rank the client means to reach
//	16      2      LE uint16   stream index: < stream count for a link stream, the opener's slot (< 64) for a channel stream
//	18      2      LE uint16   stream count (Config.Streams; both sides must agree)
//	20      1      -           stream kind: 0x00 a link stream, 0x01 a channel stream (below)
//	21      3      -           reserved, 0
//	24      8      LE uint64   client segment size (len(Config.Mem))
//	32      J      -           job id, UTF-8
//
// REPLY (24 bytes):
//
//	offset  width  byte order  meaning
//	6       2      -           reserved, 0
//	8       4      LE uint32   server rank
//	12      4      -           reserved, 0
//	16      8      LE uint64   server segment size
//
// The exchange runs with label labelMesh and bound fields HELLO and
// REPLY (their whole bytes), so both proofs cover every field of both
// (version, job id, ranks, stream, segment sizes).
//
// ACCEPT (8 bytes): bytes 6-7 reserved, 0. REFUSE (8 bytes): byte 6 is
// the refusal code (refuseVersion ... refuseMalformed), byte 7 reserved.
//
// A link stream is one of the Config.Streams connections that make up a
// link; the lower rank dials them at Connect. A channel stream (kind
// 0x01, chan.go) is opened later, on demand, by either side for one of
// its channels, once the link is ready: its dialler may be the higher
// rank, and its stream index is the dialler's slot, at most one stream
// per (dialler, slot) at a time. Any other kind is malformed.
//
// Both nonces of the exchange are fresh per connection, so a recorded
// handshake cannot be replayed; the key never crosses the wire.

type hello struct {
	jobID      string
	client     uint32
	server     uint32
	stream     uint16
	streams    uint16
	kind       byte // hsKindLink or hsKindChan
	memSize    uint64
	raw        []byte // the encoded message, bound into the exchange
	remoteAddr string
}

type reply struct {
	server  uint32
	memSize uint64
}

// hsParams is what one side knows before a handshake.
type hsParams struct {
	key     []byte
	jobID   string
	rank    int
	size    int
	streams int
	memSize uint64
}

func appendPrefix(b []byte, kind byte, x, y byte) []byte {
	b = append(b, hsMagic...)
	return append(b, Version, kind, x, y)
}

// parseHSPrefix checks the magic, then the version, then returns the
// kind and the two kind-specific bytes.
func parseHSPrefix(b []byte) (kind, x, y byte, err error) {
	switch {
	case len(b) < hsPrefixLen:
		return 0, 0, 0, hsErr("handshake message of %d bytes, shorter than its %d-byte prefix", len(b), hsPrefixLen)
	case string(b[:4]) != hsMagic:
		return 0, 0, 0, hsErr("not a netmesh handshake (magic %q)", b[:4])
	case b[4] != Version:
		return 0, 0, 0, &refusal{code: refuseVersion, msg: fmt.Sprintf("protocol version %d, want %d", b[4], Version)}
	}
	return b[5], b[6], b[7], nil
}

// appendHello appends a HELLO.
func appendHello(b []byte, h *hello) []byte {
	b = appendPrefix(b, hsHello, byte(len(h.jobID)), 0)
	b = le.AppendUint32(b, h.client)
	b = le.AppendUint32(b, h.server)
	b = le.AppendUint16(b, h.stream)
	b = le.AppendUint16(b, h.streams)
	b = append(b, h.kind, 0, 0, 0)
	b = le.AppendUint64(b, h.memSize)
	return append(b, h.jobID...)
}

// helloLen is the length of a HELLO for a job id of j bytes.
func helloLen(j int) int { return helloFixedLen + j }

// parseHello decodes a whole HELLO. It checks the form only; whether the
// job, ranks and streams are acceptable is judged by checkHello.
func parseHello(b []byte) (hello, error) {
	kind, j, r, err := parseHSPrefix(b)
	switch {
	case err != nil:
		return hello{}, err
	case kind != hsHello:
		return hello{}, hsErr("handshake message kind 0x%02x, want HELLO", kind)
	case j == 0:
		return hello{}, hsErr("HELLO with an empty job id")
	case len(b) != helloLen(int(j)):
		return hello{}, hsErr("HELLO of %d bytes, want %d", len(b), helloLen(int(j)))
	case r != 0 || b[21] != 0 || b[22] != 0 || b[23] != 0:
		return hello{}, hsErr("HELLO with reserved bytes set")
	case b[20] != hsKindLink && b[20] != hsKindChan:
		return hello{}, hsErr("HELLO of stream kind 0x%02x", b[20])
	}
	h := hello{
		client:  le.Uint32(b[8:12]),
		server:  le.Uint32(b[12:16]),
		stream:  le.Uint16(b[16:18]),
		streams: le.Uint16(b[18:20]),
		kind:    b[20],
		memSize: le.Uint64(b[24:32]),
		jobID:   string(b[helloFixedLen:]),
		raw:     b,
	}
	return h, nil
}

// checkHello judges a HELLO received by the server described by p.
func checkHello(h *hello, p *hsParams) error {
	switch {
	case h.jobID != p.jobID:
		return &refusal{code: refuseJob, msg: fmt.Sprintf("job %q, want %q", h.jobID, p.jobID)}
	case int64(h.server) != int64(p.rank):
		return &refusal{code: refuseRank, msg: fmt.Sprintf("meant for PE %d, this is PE %d", h.server, p.rank)}
	case h.kind == hsKindLink && int64(h.client) >= int64(p.rank):
		return &refusal{code: refuseRank, msg: fmt.Sprintf("PE %d may not dial PE %d (the lower rank dials)", h.client, p.rank)}
	case h.kind == hsKindChan && (int64(h.client) == int64(p.rank) || int64(h.client) >= int64(p.size)):
		return &refusal{code: refuseRank, msg: fmt.Sprintf("channel stream from PE %d to PE %d in a job of %d", h.client, p.rank, p.size)}
	case int(h.streams) != p.streams:
		return &refusal{code: refuseStreams, msg: fmt.Sprintf("%d streams, want %d", h.streams, p.streams)}
	case h.kind == hsKindLink && h.stream >= h.streams:
		return &refusal{code: refuseStreams, msg: fmt.Sprintf("stream %d of %d", h.stream, h.streams)}
	case h.kind == hsKindChan && h.stream >= maxChanStreams:
		return &refusal{code: refuseStreams, msg: fmt.Sprintf("channel stream slot %d, want < %d", h.stream, maxChanStreams)}
	}
	return nil
}

// appendReply appends a REPLY.
func appendReply(b []byte, r *reply) []byte {
	b = appendPrefix(b, hsReply, 0, 0)
	b = le.AppendUint32(b, r.server)
	b = append(b, 0, 0, 0, 0)
	return le.AppendUint64(b, r.memSize)
}

// replyLength is the length of a REPLY.
func replyLength() int { return replyLen }

// parseReply decodes a REPLY.
func parseReply(b []byte) (reply, error) {
	kind, x, y, err := parseHSPrefix(b)
	switch {
	case err != nil:
		return reply{}, err
	case kind != hsReply:
		return reply{}, hsErr("handshake message kind 0x%02x, want REPLY", kind)
	case len(b) != replyLen:
		return reply{}, hsErr("REPLY of %d bytes, want %d", len(b), replyLen)
	case x != 0 || y != 0 || le.Uint32(b[12:16]) != 0:
		return reply{}, hsErr("REPLY with reserved bytes set")
	}
	return reply{server: le.Uint32(b[8:12]), memSize: le.Uint64(b[16:24])}, nil
}

// appendAccept appends an ACCEPT.
func appendAccept(b []byte) []byte { return appendPrefix(b, hsAccept, 0, 0) }

// appendRefuse appends a REFUSE with code.
func appendRefuse(b []byte, code byte) []byte { return appendPrefix(b, hsRefuse, code, 0) }

// parseAnswer decodes an 8-byte ACCEPT or REFUSE. A REFUSE returns a
// *refusal.
func parseAnswer(b []byte) error {
	kind, x, y, err := parseHSPrefix(b)
	switch {
	case err != nil:
		return err
	case len(b) != acceptLen:
		return hsErr("answer of %d bytes, want %d", len(b), acceptLen)
	case y != 0:
		return hsErr("answer with reserved bytes set")
	case kind == hsRefuse:
		return &refusal{code: x, msg: "refused by the peer: " + refuseName(x), remote: true}
	case kind != hsAccept || x != 0:
		return hsErr("handshake message kind 0x%02x, want ACCEPT", kind)
	}
	return nil
}

func refuseName(code byte) string {
	switch code {
	case refuseVersion:
		return "protocol version mismatch"
	case refuseJob:
		return "another job"
	case refuseRank:
		return "rank not accepted"
	case refuseStreams:
		return "stream count mismatch"
	case refuseAuth:
		return "authentication failed"
	case refuseDuplicate:
		return "stream already connected"
	case refuseClosing:
		return "mesh closing"
	case refuseMalformed:
		return "malformed handshake"
	}
	return fmt.Sprintf("refusal code 0x%02x", code)
}

// refusal is a handshake step that failed with a code to tell the peer
// (or, with remote set, one the peer told us).
type refusal struct {
	code   byte
	msg    string
	remote bool
}

func (r *refusal) Error() string { return "netmesh: handshake: " + r.msg }
func (r *refusal) Unwrap() error { return errs.Auth }

// hsErr is a malformed handshake message.
func hsErr(format string, args ...any) error {
	return &refusal{code: refuseMalformed, msg: fmt.Sprintf(format, args...)}
}

// refuse tells the peer why, best effort, and returns err.
func refuse(w io.Writer, err error) error {
	var r *refusal
	if errors.As(err, &r) && !r.remote {
		w.Write(appendRefuse(nil, r.code))
	}
	return err
}

// serverHandshake runs the accepting side on rw (the caller has set a
// deadline). admit is called once the client has proved the key; it
// returns a refusal code, or 0 to accept, and it must reserve the slot so
// that the stream is registered before ACCEPT is sent. Every failure
// wraps errs.Auth. The client's frames are never read here.
func serverHandshake(rw io.ReadWriter, p *hsParams, admit func(*hello) byte) (hello, error) {
	var pre [hsPrefixLen]byte
	if _, err := io.ReadFull(rw, pre[:]); err != nil {
		return hello{}, authIO("reading HELLO", err)
	}
	kind, j, _, err := parseHSPrefix(pre[:])
	if err != nil {
		return hello{}, refuse(rw, err)
	}
	if kind != hsHello {
		return hello{}, refuse(rw, hsErr("handshake message kind 0x%02x, want HELLO", kind))
	}
	raw := make([]byte, helloLen(int(j))) // j <= 255: bounded before any allocation
	copy(raw, pre[:])
	if _, err := io.ReadFull(rw, raw[hsPrefixLen:]); err != nil {
		return hello{}, authIO("reading HELLO", err)
	}
	h, err := parseHello(raw)
	if err != nil {
		return hello{}, refuse(rw, err)
	}
	if err := checkHello(&h, p); err != nil {
		return h, refuse(rw, err)
	}
	rb := appendReply(make([]byte, 0, replyLen), &reply{server: uint32(p.rank), memSize: p.memSize})
	if _, err := rw.Write(rb); err != nil {
		return h, authIO("writing REPLY", err)
	}
	if err := auth.Exchange(rw, p.key, auth.Initiator, labelMesh, raw, rb); err != nil {
		return h, exchangeErr(err, h.client)
	}
	if code := admit(&h); code != 0 {
		return h, refuse(rw, &refusal{code: code, msg: fmt.Sprintf("PE %d stream %d: %s", h.client, h.stream, refuseName(code))})
	}
	if _, err := rw.Write(appendAccept(nil)); err != nil {
		return h, authIO("writing ACCEPT", err)
	}
	return h, nil
}

// clientHandshake runs the dialing side on rw (the caller has set a
// deadline) to reach rank server as stream index stream of kind
// (hsKindLink, or hsKindChan with stream the slot). It returns the
// server's segment size. A refusal or a failed exchange wraps errs.Auth;
// an I/O error is returned as it is, so the dialer may retry.
func clientHandshake(rw io.ReadWriter, p *hsParams, server, stream int, kind byte) (uint64, error) {
	h := hello{
		jobID:   p.jobID,
		client:  uint32(p.rank),
		server:  uint32(server),
		stream:  uint16(stream),
		streams: uint16(p.streams),
		kind:    kind,
		memSize: p.memSize,
	}
	raw := appendHello(make([]byte, 0, helloLen(len(h.jobID))), &h)
	if _, err := rw.Write(raw); err != nil {
		return 0, err
	}
	var rb [replyLen]byte
	if _, err := io.ReadFull(rw, rb[:hsPrefixLen]); err != nil {
		return 0, err
	}
	kind, _, _, err := parseHSPrefix(rb[:hsPrefixLen])
	if err != nil {
		return 0, refuse(rw, err)
	}
	if kind == hsRefuse {
		return 0, parseAnswer(rb[:hsPrefixLen])
	}
	if _, err := io.ReadFull(rw, rb[hsPrefixLen:]); err != nil {
		return 0, err
	}
	r, err := parseReply(rb[:])
	if err != nil {
		return 0, refuse(rw, err)
	}
	if int64(r.server) != int64(server) {
		return 0, refuse(rw, &refusal{code: refuseRank, msg: fmt.Sprintf("dialled PE %d, reached PE %d", server, r.server)})
	}
	if err := auth.Exchange(rw, p.key, auth.Responder, labelMesh, raw, rb[:]); err != nil {
		if !errors.Is(err, auth.ErrKey) && !errors.Is(err, auth.ErrRefused) && !errors.Is(err, auth.ErrMalformed) {
			return 0, err // I/O: the dialer may retry
		}
		return 0, exchangeErr(err, uint32(server))
	}
	var ab [acceptLen]byte
	if _, err := io.ReadFull(rw, ab[:]); err != nil {
		return 0, err
	}
	if err := parseAnswer(ab[:]); err != nil {
		return 0, err
	}
	return r.memSize, nil
}

// exchangeErr is the refusal for a failed auth.Exchange with PE peer.
// The exchange has told the peer already (auth REFUSE), so the refusal is
// marked remote and refuse sends nothing more.
func exchangeErr(err error, peer uint32) error {
	switch {
	case errors.Is(err, auth.ErrKey):
		return &refusal{code: refuseAuth, msg: fmt.Sprintf("PE %d's proof does not verify with the job key: %v", peer, err), remote: true}
	case errors.Is(err, auth.ErrRefused):
		return &refusal{code: refuseAuth, msg: fmt.Sprintf("PE %d refused this PE's proof of the job key: %v", peer, err), remote: true}
	case errors.Is(err, auth.ErrMalformed):
		return &refusal{code: refuseMalformed, msg: fmt.Sprintf("PE %d: %v", peer, err), remote: true}
	}
	return authIO("in the key exchange", err)
}

func authIO(step string, err error) error {
	return fmt.Errorf("netmesh: handshake: %s: %v: %w", step, err, errs.Auth)
}
