package netmesh

import "time"

// Wire constants. Every value here travels on the wire or bounds what the
// wire may carry; const_test.go pins each one, and docs/wire.md is the
// normative description.
const (
	// Version is the protocol version: byte 0 of every frame and byte 4 of
	// every handshake message. A receiver checks it before anything else.
	Version = 0x02

	// MaxPayload bounds the payload of one PUT, PUT_SIGNAL or GET_RESP
	// frame and the length of one GET request. Longer transfers are split
	// into several frames. A frame that claims more is a protocol
	// violation, refused before anything is allocated or written.
	MaxPayload = 16 << 20

	// MaxErrorText bounds the message of an ERROR frame.
	MaxErrorText = 512

	// MaxOutstanding bounds the requests that expect a reply (GET,
	// fetching ATOMIC, FLUSH) one side keeps in flight on a stream. A
	// sender blocks before it would exceed it; a receiver that holds more
	// unanswered requests from one stream treats it as a violation.
	MaxOutstanding = 1 << 20

	// MaxChanStreams bounds the channel streams (chan.go) one side of a
	// link opens: HELLO's slot for a channel stream is below it, and an
	// acceptor refuses one that is not.
	MaxChanStreams = 64
)

// Frame types: byte 1 of every frame.
const (
	typePut        = 0x01
	typeGet        = 0x02
	typeGetResp    = 0x03
	typeAtomic     = 0x04
	typeAtomicResp = 0x05
	typePutSignal  = 0x06
	typeFlush      = 0x07
	typeFlushReply = 0x08
	typeHeartbeat  = 0x09
	typeGoodbye    = 0x0A
	typeError      = 0x0B
)

// prefixLen is the length of the prefix every frame starts with: the
// version and type bytes. Each frame type's field offsets and header
// length (putHdrLen ... errorHdrLen, and maxHdrLen, the longest) are
// derived from it in the frame_*.go files, next to the byte tables that
// define them. Payload bytes (PUT, PUT_SIGNAL, GET_RESP, ERROR text)
// follow the header.
const prefixLen = 2

// Header field values.
const (
	signalSet = 0x01 // PUT_SIGNAL: store the signal word
	signalAdd = 0x02 // PUT_SIGNAL: add to the signal word
	statusOK  = 0x00 // GET_RESP / ATOMIC_RESP: the request was applied
)

// Codes of an ERROR frame: why the sender is closing the link.
const (
	codeVersion     = 0x0001 // a frame with another protocol version
	codeType        = 0x0002 // an unknown frame type
	codeMalformed   = 0x0003 // a reserved byte set, a bad status or signal op
	codeBounds      = 0x0004 // an offset or length past the receiver's segment
	codeLength      = 0x0005 // a length past MaxPayload or MaxErrorText
	codeAtomic      = 0x0006 // an atomic with a bad op, width or alignment
	codeResponse    = 0x0007 // a response that does not match its request
	codeOutstanding = 0x0008 // more than MaxOutstanding unanswered requests
)

// Handshake constants.
const (
	// hsMagic opens every handshake message: "GSNM".
	hsMagic = "GSNM"

	hsHello  = 0x01 // client -> server
	hsReply  = 0x02 // server -> client; then the auth exchange
	hsAccept = 0x04 // server -> client
	hsRefuse = 0x05 // either way, then close

	hsKindLink = 0x00 // HELLO byte 20: one of the link's Config.Streams streams
	hsKindChan = 0x01 // HELLO byte 20: a channel stream, opened on demand (chan.go)

	// maxChanStreams bounds the channel streams one side of a link has
	// open at once (HELLO's slot is below it): Config.ChanStreams is at
	// most this, and by default this.
	maxChanStreams = MaxChanStreams

	hsPrefixLen   = 8  // magic, version, kind, two kind-specific bytes
	helloFixedLen = 32 // then the job id
	replyLen      = 24
	acceptLen     = 8
	refuseLen     = 8
	maxJobID      = 255

	// labelMesh is the handshake's auth.Exchange label.
	labelMesh = "goshmem-netmesh-v2"
)

// Refusal codes of a REFUSE handshake message.
const (
	refuseVersion   = 0x01 // another protocol version
	refuseJob       = 0x02 // another job id
	refuseRank      = 0x03 // a rank that may not connect here
	refuseStreams   = 0x04 // another stream count, or a stream index past it
	refuseAuth      = 0x05 // a proof of the job key that does not verify
	refuseDuplicate = 0x06 // that rank's stream is already connected (or lost)
	refuseClosing   = 0x07 // the mesh is closing
	refuseMalformed = 0x08 // bytes that are not a handshake message
)

// Tuning defaults (not on the wire).
const (
	defaultTimeout   = 2 * time.Minute
	defaultHeartbeat = time.Second
	defaultMisses    = 5
	maxStreams       = 64
	// defaultChanStreams is Config.ChanStreams' default: the wire's
	// bound, so that shmem's MaxRemoteContexts contexts each get streams
	// of their own. Streams open on demand: an unused bound costs nothing.
	defaultChanStreams = maxChanStreams
	// defaultStreams: one. Two streams carried a striped 1 MiB put or get
	// in about 0.6-0.75 of one stream's time on loopback, but 4 MiB ones
	// no faster (docs/performance.md, "Large transfers over TCP"); since
	// payloads up to 1 MiB are polled for (payloadSpinMax), one stream is
	// as fast at 1 MiB and faster at 4 MiB (docs/performance.md, "GET
	// replies by reference, and one stream against two").
	defaultStreams = 1
	// handshakeTimeout bounds one connection's whole handshake (the
	// smaller of this and Config.Timeout).
	handshakeTimeout = 10 * time.Second
	// stripeMin: with Streams > 1, PUT and GET payloads of at least this
	// many bytes are split across the pair's streams. On loopback a
	// striped 256 or 512 KiB put + quiet took about twice as long as one
	// on one stream, a 1 MiB one about 0.75 times (docs/performance.md,
	// "Large transfers over TCP").
	stripeMin = 1 << 20
	// stripeAlign: stripe boundaries fall on multiples of this.
	stripeAlign = 4 << 10
	// copyMax: payloads up to this size are copied into the send buffer
	// (coalesced with other small frames); larger ones are written from
	// the caller's slice.
	copyMax = 2 << 10
	// replyCopyMax bounds the GET reply payload bytes a stream's send
	// queue holds as copies; past it, small replies are sent from the
	// segment by reference like large ones, so what a peer's requests
	// make this side hold is bounded by MaxOutstanding entries, not by
	// their bytes.
	replyCopyMax = 16 << 20
	// queueHigh: a non-blocking caller that finds this many bytes queued
	// on a stream waits for the queue to be written (back-pressure).
	queueHigh = 8 << 20
	// goodbyeWait bounds how long Close waits for the peer's goodbye.
	goodbyeWait = 2 * time.Second
	// maxHandshakes bounds connections in the handshake at once, beyond
	// the peers' own streams.
	maxHandshakes = 64
	// memAlign: Config.Mem must start on this boundary, so that every
	// width-aligned offset is a width-aligned address for the atomics.
	memAlign = 8
)
