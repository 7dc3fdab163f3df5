package boot

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"

	"github.com/goshmem/goshmem/internal/auth"
	"github.com/goshmem/goshmem/internal/errs"
)

// Client-side bounds.
const (
	// statusWait bounds how long a timed-out Allgather waits for the
	// server to say how many ranks had arrived.
	statusWait = time.Second
	// exitWait bounds how long Exit waits for the server's ack.
	exitWait = 30 * time.Second
	// byeWait bounds how long Close waits for the server to close after
	// Bye.
	byeWait = 2 * time.Second
)

// Client is one PE's connection to the boot server. Allgather calls run
// one at a time (a second caller waits for the first); Exit and Close may
// be called from any goroutine.
type Client struct {
	nc   net.Conn
	h    *codec.MsgpackHandle
	rank int
	size int

	wmu sync.Mutex // serialises frame writes on nc

	gmu    sync.Mutex // held for a whole Allgather
	round  uint64     // the last round sent; guarded by gmu
	broken error      // set when a round timed out after its part was sent; guarded by gmu

	emu sync.Mutex // serialises Exit

	mu        sync.Mutex // protects waitRound, closed and lost
	waitRound uint64     // the round Allgather waits for; 0 when none
	closed    bool
	lost      error // the job lost a rank; set once, then lostC is closed

	results chan roundOutcome // cap 1: the outcome of waitRound
	statusC chan *statusReply // cap 1: the newest StatusReply
	acks    chan struct{}     // cap 1: an ExitAck arrived
	lostC   chan struct{}
	deadC   chan struct{} // closed when the reader has ended
	deadErr error         // why the reader ended; written before deadC is closed

	ended    *jobEnded     // another rank called GlobalExit; guarded by mu, set before troubleC closes
	lostRank int           // the rank in the server's PeerLost; guarded by mu
	troubleC chan struct{} // closed at the first of: a lost rank, a GlobalExit elsewhere, the reader's end
	trouble  sync.Once
}

// ErrOtherJob is wrapped by Dial's error when the server at the address
// serves another job (its Hello names another job id): the address was
// stale or taken, and a caller that only guessed it may try again.
var ErrOtherJob = errors.New("the address serves another job")

type roundOutcome struct {
	data [][]byte
	err  error
}

// Dial connects to the boot server at addr and joins job jobID as rank
// of size PEs, proving knowledge of key. A refused or failed handshake
// returns an error wrapping errs.Auth (and errs.Protocol when the server
// sent malformed bytes, errs.Timeout when ctx expired). The handshake is
// bounded by ctx and by HandshakeTimeout.
//
// After Close the same rank may Dial again (Init after Finalize). The
// new Client's rounds start at 1 and belong to the job's next
// generation: its first Allgather completes once every rank has closed
// its previous connection and joined again (see the package doc). A Dial
// while the rank's previous Client is still open is refused (errs.Auth).
func Dial(ctx context.Context, addr, jobID string, key []byte, rank, size int) (*Client, error) {
	switch {
	case size < 1 || size > math.MaxInt32:
		return nil, fmt.Errorf("boot: job size %d: %w", size, errs.Invalid)
	case rank < 0 || rank >= size:
		return nil, fmt.Errorf("boot: rank %d outside a job of %d PEs: %w", rank, size, errs.Invalid)
	case len(key) == 0:
		return nil, fmt.Errorf("boot: empty job key: %w", errs.Invalid)
	case jobID == "" || len(jobID) > maxText:
		return nil, fmt.Errorf("boot: job id of %d bytes: %w", len(jobID), errs.Invalid)
	}
	var d net.Dialer
	network, daddr := "tcp", addr
	if name, ok := strings.CutPrefix(addr, UnixPrefix); ok {
		network, daddr = "unix", name
	}
	nc, err := d.DialContext(ctx, network, daddr)
	if err != nil {
		return nil, ctxWrap(ctx, fmt.Errorf("boot: rank %d dialing the boot server at %s: %w", rank, addr, err))
	}
	deadline := time.Now().Add(HandshakeTimeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(deadline) {
		deadline = cd
	}
	nc.SetDeadline(deadline)
	// Cancelling ctx interrupts the handshake's reads and writes.
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	c := &Client{
		nc:      nc,
		h:       newHandle(),
		rank:    rank,
		size:    size,
		results: make(chan roundOutcome, 1),
		statusC: make(chan *statusReply, 1),
		acks:    make(chan struct{}, 1),
		lostC:   make(chan struct{}),
		deadC:   make(chan struct{}),

		troubleC: make(chan struct{}),
	}
	err = c.handshake(addr, jobID, key)
	if !stop() && err == nil {
		err = fmt.Errorf("boot: rank %d handshake with %s: %w: %w", rank, addr, errs.Auth, context.Cause(ctx))
	}
	if err != nil {
		nc.Close()
		switch {
		case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
			err = fmt.Errorf("%w: %w", err, ctx.Err())
		case errors.Is(err, os.ErrDeadlineExceeded):
			// HandshakeTimeout passed, or ctx's deadline just before
			// ctx itself reports it.
			err = fmt.Errorf("%w: %w", err, errs.Timeout)
		}
		return nil, ctxWrap(ctx, err)
	}
	nc.SetDeadline(time.Time{})
	go c.readLoop()
	return c, nil
}

// ctxWrap adds errs.Timeout to err when ctx's deadline has passed.
func ctxWrap(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && !errors.Is(err, errs.Timeout) {
		return fmt.Errorf("%w: %w", err, errs.Timeout)
	}
	return err
}

// handshake runs the client side of the handshake (see auth.go). Every
// failure wraps errs.Auth.
func (c *Client) handshake(addr, jobID string, key []byte) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("boot: rank %d handshake with %s: "+format+": %w", append(append([]any{c.rank, addr}, args...), errs.Auth)...)
	}
	m, err := c.readHandshake()
	if err != nil {
		return fail("reading Hello: %w", err)
	}
	hm, ok := m.(*hello)
	if !ok {
		c.refuse(errCodeProtocol, "expected Hello")
		return fail("expected Hello, got message kind %#02x: %w", m.kind(), errs.Protocol)
	}
	if hm.Magic != helloMagic || hm.Version != helloVersion {
		c.refuse(errCodeProtocol, "unsupported protocol")
		return fail("not a goshmem boot server (magic %q version %d, want %q version %d): %w",
			hm.Magic, hm.Version, helloMagic, helloVersion, errs.Protocol)
	}
	if hm.JobID != jobID {
		c.refuse(errCodeAuth, "job id mismatch")
		return fail("the server runs job %q, this PE belongs to job %q: %w", hm.JobID, jobID, ErrOtherJob)
	}
	if err := c.writeNow(&join{Rank: c.rank, Size: c.size}); err != nil {
		return fail("sending Join: %w", err)
	}
	if err := auth.Exchange(c.nc, key, auth.Responder, labelBoot, bootBound(jobID, c.rank, c.size)...); err != nil {
		return fail("key exchange: %w", err)
	}
	m, err = c.readHandshake()
	if err != nil {
		return fail("reading Welcome: %w", err)
	}
	if _, ok := m.(*welcome); !ok {
		c.refuse(errCodeProtocol, "expected Welcome")
		return fail("expected Welcome, got message kind %#02x: %w", m.kind(), errs.Protocol)
	}
	return nil
}

// readHandshake reads one handshake frame. An Error from the server
// becomes an error carrying its message.
func (c *Client) readHandshake() (message, error) {
	kind, body, err := readFrame(c.nc, maxHandshakeFrame)
	if err != nil {
		return nil, err
	}
	m, err := decodeMessage(c.h, kind, body)
	if err != nil {
		return nil, err
	}
	if e, ok := m.(*errorMsg); ok {
		return nil, fmt.Errorf("server said %q", e.Msg)
	}
	return m, nil
}

func (c *Client) refuse(code uint, msg string) {
	c.writeNow(&errorMsg{Code: code, Msg: msg})
}

// writeNow encodes and writes m under the current deadline.
func (c *Client) writeNow(m message) error {
	b, err := encodeMessage(c.h, m)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err = c.nc.Write(b)
	return err
}

// write encodes and writes m with a write deadline. A failed write may
// have sent part of a frame, so it closes the connection.
func (c *Client) write(m message, deadline time.Time) error {
	b, err := encodeMessage(c.h, m)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.nc.SetWriteDeadline(deadline)
	if _, err := c.nc.Write(b); err != nil {
		c.nc.Close()
		return err
	}
	return nil
}

// Rank returns the client's rank.
func (c *Client) Rank() int { return c.rank }

// Size returns the job size.
func (c *Client) Size() int { return c.size }

// Allgather contributes data (at most MaxGatherData bytes) to the job's
// next round and returns every rank's contribution, indexed by rank. The
// result's slices are the caller's. Every rank must call Allgather the
// same number of times.
//
// Errors: errs.Invalid for oversized data or a round the server refused
// (the parts add up to more than a frame holds; the next round may
// work); errs.PeerLost, naming the rank, once any rank's connection has
// dropped without Bye or a rank said Bye before the round, and for every
// later call; errs.Timeout when ctx's deadline passes, saying how many
// ranks had arrived. After a timeout or cancellation the client is out of
// step with the job and every later call fails with the same error.
func (c *Client) Allgather(ctx context.Context, data []byte) ([][]byte, error) {
	if len(data) > MaxGatherData {
		return nil, fmt.Errorf("boot: allgather of %d bytes on rank %d, limit %d: %w", len(data), c.rank, MaxGatherData, errs.Invalid)
	}
	c.gmu.Lock()
	defer c.gmu.Unlock()
	if c.broken != nil {
		return nil, c.broken
	}
	if err := c.failed(true); err != nil {
		return nil, err
	}
	round := c.round + 1
	if err := ctx.Err(); err != nil {
		return nil, ctxWrap(ctx, fmt.Errorf("boot: allgather round %d on rank %d not started: %w", round, c.rank, err))
	}
	c.mu.Lock()
	c.waitRound = round
	select {
	case <-c.results:
	default:
	}
	c.mu.Unlock()

	deadline := time.Now().Add(writeTimeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(deadline) {
		deadline = cd
	}
	if err := c.write(&gather{Round: round, Data: data}, deadline); err != nil {
		c.broken = ctxWrap(ctx, fmt.Errorf("boot: rank %d sending allgather round %d: %w: %w", c.rank, round, errs.PeerLost, err))
		return nil, c.broken
	}
	c.round = round

	select {
	case out := <-c.results:
		return out.data, out.err
	case <-c.lostC:
	case <-c.deadC:
	case <-ctx.Done():
		return nil, c.timedOut(ctx, round)
	}
	// A result queued before the failure still completes the round.
	select {
	case out := <-c.results:
		return out.data, out.err
	default:
	}
	return nil, c.failed(true)
}

// failed returns why the client can no longer run rounds (lost rank,
// dead connection, closed), or nil. withLost includes a lost rank, which
// stops rounds but not Exit.
func (c *Client) failed(withLost bool) error {
	c.mu.Lock()
	closed, lost := c.closed, c.lost
	c.mu.Unlock()
	if closed {
		return fmt.Errorf("boot: rank %d: client closed: %w", c.rank, errs.Finalized)
	}
	if withLost && lost != nil {
		return lost
	}
	select {
	case <-c.deadC:
		return c.deadErr
	default:
	}
	return nil
}

// timedOut builds the error of a round whose ctx ended after its part
// was sent. It asks the server, briefly, how many ranks had arrived.
func (c *Client) timedOut(ctx context.Context, round uint64) error {
	select {
	case <-c.statusC:
	default:
	}
	var rep *statusReply
	completed := false
	if c.write(&status{Round: round}, time.Now().Add(statusWait)) == nil {
		t := time.NewTimer(statusWait)
	wait:
		for {
			select {
			case r := <-c.statusC:
				if r.Round == round {
					rep = r
					break wait
				}
			case <-c.results:
				completed = true
			case <-c.deadC:
				break wait
			case <-t.C:
				break wait
			}
		}
		t.Stop()
	}
	how := "the server did not say how many ranks had arrived"
	if rep != nil {
		how = fmt.Sprintf("%d of %d ranks had arrived", rep.Arrived, c.size)
		if len(rep.Missing) > 0 {
			how += fmt.Sprintf(" (missing ranks %v", rep.Missing)
			if c.size-rep.Arrived > len(rep.Missing) {
				how += " ..."
			}
			how += ")"
		}
	}
	cause := context.Cause(ctx)
	var err error
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("boot: allgather round %d on rank %d: %s: %w: %w", round, c.rank, how, errs.Timeout, cause)
	} else {
		err = fmt.Errorf("boot: allgather round %d on rank %d: %s: %w", round, c.rank, how, cause)
	}
	c.mu.Lock()
	if c.waitRound == round {
		c.waitRound = 0
	} else {
		completed = true // the reader delivered the result meanwhile
	}
	c.mu.Unlock()
	if !completed {
		c.broken = fmt.Errorf("boot: rank %d is out of step after allgather round %d was abandoned: %w", c.rank, round, err)
	}
	return err
}

// Exit asks the launcher to end the job with code (GlobalExit) and
// returns once the server has acknowledged. It works after a rank was
// lost, not after Close.
func (c *Client) Exit(code int) error {
	if code < math.MinInt32 || code > math.MaxInt32 {
		return fmt.Errorf("boot: exit code %d: %w", code, errs.Invalid)
	}
	c.emu.Lock()
	defer c.emu.Unlock()
	if err := c.failed(false); err != nil {
		return err
	}
	select {
	case <-c.acks:
	default:
	}
	if err := c.write(&exitReq{Code: code}, time.Now().Add(exitWait)); err != nil {
		return fmt.Errorf("boot: rank %d sending Exit(%d): %w: %w", c.rank, code, errs.PeerLost, err)
	}
	t := time.NewTimer(exitWait)
	defer t.Stop()
	select {
	case <-c.acks:
		return nil
	case <-c.deadC:
		return c.deadErr
	case <-t.C:
		return fmt.Errorf("boot: rank %d: no ack for Exit(%d) after %v: %w", c.rank, code, exitWait, errs.Timeout)
	}
}

// Close says Bye, waits briefly for the server to close its side, and
// closes the connection. Pending and later calls fail with
// errs.Finalized. Close is idempotent. Once it has returned, the rank may
// Dial again.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		<-c.deadC
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	if c.write(&bye{}, time.Now().Add(byeWait)) == nil {
		// Half-close and let the server close first: its reader sees Bye
		// before any end of stream, and our unread bytes cannot turn our
		// close into a reset.
		if tc, ok := c.nc.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		t := time.NewTimer(byeWait)
		select {
		case <-c.deadC:
		case <-t.C:
		}
		t.Stop()
	}
	c.nc.Close()
	<-c.deadC
	return nil
}

// readLoop reads the server's frames until the connection ends.
func (c *Client) readLoop() {
	err := c.serveFrames()
	c.nc.Close()
	c.mu.Lock()
	if c.closed {
		c.deadErr = fmt.Errorf("boot: rank %d: client closed: %w", c.rank, errs.Finalized)
	} else {
		c.deadErr = err
	}
	c.mu.Unlock()
	close(c.deadC)
	c.trouble.Do(func() { close(c.troubleC) })
}

// serveFrames dispatches frames and returns why the connection ended.
func (c *Client) serveFrames() error {
	for {
		kind, body, err := readFrame(c.nc, MaxFrame)
		if err != nil {
			return fmt.Errorf("boot: rank %d lost its connection to the boot server: %w: %w", c.rank, errs.PeerLost, err)
		}
		m, err := decodeMessage(c.h, kind, body)
		if err != nil {
			return fmt.Errorf("boot: rank %d: bad frame from the boot server: %w (%w)", c.rank, err, errs.PeerLost)
		}
		switch m := m.(type) {
		case *gatherResult:
			if len(m.Data) != c.size {
				return fmt.Errorf("boot: rank %d: round %d result has %d parts, want %d: %w (%w)",
					c.rank, m.Round, len(m.Data), c.size, errs.Protocol, errs.PeerLost)
			}
			c.deliver(m.Round, roundOutcome{data: m.Data})
		case *roundFailed:
			c.deliver(m.Round, roundOutcome{err: fmt.Errorf("boot: allgather round %d failed: %s: %w", m.Round, m.Msg, errs.Invalid)})
		case *peerLost:
			c.setLost(fmt.Errorf("boot: the job lost rank %d (%s): %w", m.Rank, m.Msg, errs.PeerLost), m.Rank, nil)
		case *jobEnded:
			c.setLost(fmt.Errorf("boot: rank %d called GlobalExit(%d): %w", m.Rank, m.Code, errs.PeerLost), m.Rank, m)
		case *statusReply:
			select {
			case <-c.statusC:
			default:
			}
			c.statusC <- m // cap 1, and only this goroutine sends
		case *exitAck:
			select {
			case c.acks <- struct{}{}:
			default:
			}
		case *errorMsg:
			return fmt.Errorf("boot: rank %d: the boot server closed the connection: %q: %w", c.rank, m.Msg, codeErr(m.Code))
		default:
			return fmt.Errorf("boot: rank %d: unexpected message kind %#02x from the boot server: %w (%w)", c.rank, kind, errs.Protocol, errs.PeerLost)
		}
	}
}

// setLost records the job's first failure (a lost rank, or another
// rank's GlobalExit when ended is set): rounds fail from now on.
func (c *Client) setLost(err error, rank int, ended *jobEnded) {
	c.mu.Lock()
	if c.lost == nil {
		c.lost, c.ended, c.lostRank = err, ended, rank
		close(c.lostC)
	}
	c.mu.Unlock()
	c.trouble.Do(func() { close(c.troubleC) })
}

// Trouble is closed when the job can no longer go on for this client:
// the server reported a lost rank or another rank's GlobalExit, or the
// connection to the server ended (also by Close). See Troubled.
func (c *Client) Trouble() <-chan struct{} { return c.troubleC }

// Why says why Trouble closed.
type Why struct {
	Err        error // nil after Close
	Closed     bool  // Close was called: an orderly end, not a failure
	Exit       bool  // another rank called GlobalExit(Code)
	Lost       bool  // the server reported rank Rank lost
	ServerGone bool  // the connection to the server ended without Close
	Rank, Code int
}

// Troubled says why Trouble closed; before it has, the zero Why.
func (c *Client) Troubled() Why {
	select {
	case <-c.troubleC:
	default:
		return Why{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.ended != nil:
		return Why{Err: c.lost, Exit: true, Rank: c.ended.Rank, Code: c.ended.Code}
	case c.lost != nil:
		return Why{Err: c.lost, Lost: true, Rank: c.lostRank}
	case c.closed:
		return Why{Closed: true}
	}
	return Why{Err: c.deadErr, ServerGone: true}
}

// deliver hands a round's outcome to the Allgather waiting for it.
// Outcomes of abandoned rounds are dropped.
func (c *Client) deliver(round uint64, out roundOutcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if round != c.waitRound {
		return
	}
	c.waitRound = 0
	select {
	case c.results <- out:
	default:
	}
}

func codeErr(code uint) error {
	switch code {
	case errCodeAuth:
		return errs.Auth
	case errCodeInvalid:
		return errs.Invalid
	}
	return errs.Protocol
}
