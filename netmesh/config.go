package netmesh

import (
	"fmt"
	"math"
	"time"

	"github.com/goshmem/goshmem/internal/errs"
)

// Config describes one PE's end of the mesh.
type Config struct {
	Rank, Size int
	JobID      string // 1..255 bytes; both ends of a link must agree
	Key        []byte // the job key, at least 16 bytes (32 from the launcher); never sent

	// Mem is this PE's whole segment. Incoming PUTs, GETs and atomics are
	// applied to it, after every offset and length from the wire was
	// checked against len(Mem). It must start on an 8-byte boundary and
	// stay valid until Close returns.
	Mem []byte

	// Atomics applies ATOMIC and PUT_SIGNAL operations to Mem, with the
	// same hardware atomics that same-host PEs use on it. Required.
	Atomics Atomics

	// Notify, if not nil, is called after an incoming write (a PUT
	// payload, a modifying atomic, a put-with-signal's data and then its
	// signal word) was applied to Mem, with the range written, by the
	// goroutine reading that stream: its reader goroutine, or a caller
	// blocked in Get, Atomic or Flush on the link (lead.go). It must not
	// block for long (the stream waits for it) nor call a blocking Link
	// method.
	Notify func(off, n uint64)

	// Listen is the address to listen on, for example "127.0.0.1:0",
	// "[::1]:0" or "10.77.0.1:0". Use a concrete interface address: Addr
	// publishes what the listener is bound to.
	Listen string

	// Timeout is the default start-up deadline of Connect and the bound
	// on a blocking Get, Atomic or Flush (0: 2 minutes). The mesh's
	// watchdog checks the waits every Heartbeat/2 or Timeout/8, whichever
	// is shorter, so a wait ends up to that much after Timeout.
	Timeout time.Duration

	// Heartbeat is the interval after which a stream that has sent
	// nothing sends a HEARTBEAT (0: 1 s; else 10 ms to 24 h). A stream
	// from which nothing arrived for Misses intervals (0: 5; at most
	// 1000) is lost; so is one whose sent data stays unacknowledged that
	// long (TCP_USER_TIMEOUT).
	Heartbeat time.Duration
	Misses    int

	// Streams is the number of connections per pair (GOSHMEM_STREAMS):
	// PUT and GET payloads of 1 MiB (stripeMin) or more are striped across them.
	// Both ends must agree. 0 means defaultStreams (1); at most 64.
	Streams int

	// ChanStreams bounds the channel streams (chan.go) this side opens
	// per link: channels opened beyond it share the open channel stream
	// with the fewest channels. 0 means 64 (MaxChanStreams), the most.
	ChanStreams int

	// SockBuf sets SO_SNDBUF and SO_RCVBUF when positive. 0 keeps the
	// kernel's defaults and autotuning (net.ipv4.tcp_wmem/tcp_rmem),
	// which fill loopback and 1-10 GbE links; setting a value turns
	// autotuning off for the socket.
	SockBuf int

	// Spin chooses whether goroutines that wait on a stream poll its
	// socket with non-blocking reads before they sleep in the Go
	// netpoller (spin.go, docs/wire.md "Engine"). A round trip between
	// two polling PEs wakes no thread, which on loopback is most of its
	// cost, but each poller keeps a core busy while it polls. SpinAuto
	// (the zero value) polls within bounds, and on a machine the mesh was
	// told is oversubscribed (Mesh.SetOversubscribed) only in waits and
	// callers, giving the processor away after every look; it pauses
	// polling in the whole process while it keeps not paying;
	// SpinOn polls even when oversubscribed, and the reader goroutine
	// also polls for a while after the last bytes; SpinOff never polls.
	Spin SpinMode

	// InProcess says that other PEs of the job run as goroutines of this
	// process (shmem.Run): a Poll on an oversubscribed machine then yields
	// to them with runtime.Gosched, since giving the thread to the OS
	// would keep its Go processor from them.
	InProcess bool

	// Logf, if not nil, receives one line per refused connection, lost
	// link and protocol violation.
	Logf func(format string, args ...any)

	// OnLost, if not nil, is called once per lost peer, with an error
	// wrapping errs.PeerLost, by the goroutine that noticed the loss (a
	// reader, the watchdog, or one calling a Link method whose write
	// failed), before the operations pending on the link fail: none of
	// them returns the loss before OnLost has returned. It is not called
	// for a peer that said goodbye, nor after Close began. It must return
	// promptly, must not wait for Close, and must not wait for an
	// operation on the lost link.
	OnLost func(rank int, err error)

	// OnGoodbye, if not nil, is called once when a peer says goodbye (its
	// link is then down with an error wrapping errs.Finalized), by the
	// stream's reader, before the goodbye is answered; not after Close
	// began. It must return promptly. With it the mesh's owner learns of
	// a peer's departure when it happens rather than when it next looks.
	OnGoodbye func(rank int)
}

// Bounds of the liveness settings: a shorter heartbeat would have the
// watchdog (which ticks at half of it) spin, and a peer would be declared
// lost after one scheduling hiccup; a longer one, or many more misses,
// leaves a dead peer undetected for days.
const (
	minHeartbeat = 10 * time.Millisecond
	maxHeartbeat = 24 * time.Hour
	maxMisses    = 1000
)

// normalize checks c and fills in the defaults.
func (c *Config) normalize() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("netmesh: "+format+": %w", append(args, errs.Invalid)...)
	}
	switch {
	case c.Size < 1 || c.Size > math.MaxInt32:
		return bad("job size %d", c.Size)
	case c.Rank < 0 || c.Rank >= c.Size:
		return bad("rank %d in a job of %d PEs", c.Rank, c.Size)
	case len(c.JobID) == 0 || len(c.JobID) > maxJobID:
		return bad("job id of %d bytes, want 1..%d", len(c.JobID), maxJobID)
	case len(c.Key) < 16:
		return bad("job key of %d bytes, want at least 16", len(c.Key))
	case len(c.Mem) > 0 && !aligned(c.Mem, memAlign):
		return bad("segment not aligned to %d bytes", memAlign)
	case c.Atomics == nil:
		return bad("no Atomics for the segment")
	case c.Listen == "":
		return bad("empty listen address")
	case c.Timeout < 0 || c.Heartbeat < 0 || c.Misses < 0 || c.SockBuf < 0:
		return bad("negative timeout, heartbeat, misses or socket buffer")
	case c.Heartbeat != 0 && (c.Heartbeat < minHeartbeat || c.Heartbeat > maxHeartbeat):
		return bad("heartbeat %v, want %v..%v", c.Heartbeat, minHeartbeat, maxHeartbeat)
	case c.Misses > maxMisses:
		return bad("%d misses, want at most %d", c.Misses, maxMisses)
	case c.Streams < 0 || c.Streams > maxStreams:
		return bad("%d streams, want 1..%d", c.Streams, maxStreams)
	case c.ChanStreams < 0 || c.ChanStreams > maxChanStreams:
		return bad("%d channel streams, want 1..%d", c.ChanStreams, maxChanStreams)
	case c.Spin > SpinOff:
		return bad("spin mode %d", c.Spin)
	}
	if c.Timeout == 0 {
		c.Timeout = defaultTimeout
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = defaultHeartbeat
	}
	if c.Misses == 0 {
		c.Misses = defaultMisses
	}
	if c.Streams == 0 {
		c.Streams = defaultStreams
	}
	if c.ChanStreams == 0 {
		c.ChanStreams = defaultChanStreams
	}
	c.Key = append([]byte(nil), c.Key...)
	return nil
}
