package boot

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"

	"github.com/goshmem/goshmem/internal/errs"
)

// Defaults for the Server's timeouts.
const (
	// HandshakeTimeout bounds the whole handshake on both sides, so that a
	// silent connection cannot hold a server slot or a PE forever.
	HandshakeTimeout = 10 * time.Second
	// writeTimeout bounds one frame write. A peer that does not read for
	// this long is dropped.
	writeTimeout = 30 * time.Second
	// outQueue is the number of frames queued for one client. A client
	// waits for each round's result before it sends the next, so a client
	// that lets this many pile up has stopped reading and is dropped.
	outQueue = 64
)

// rankState is where a rank is in the job's life.
type rankState uint8

const (
	rankAbsent rankState = iota // not joined yet
	rankJoined                  // joined and connected
	rankLeft                    // said Bye; its connection is closed
	rankLost                    // its connection dropped without Bye
)

// Server is the boot rendezvous of one job. Each PE connects once,
// authenticates with the job key, and then uses the connection for
// Allgather rounds, Exit and Bye. A peer that fails the handshake or
// sends malformed bytes loses its own connection; the job goes on.
//
// All methods are safe for concurrent use.
type Server struct {
	ln    net.Listener
	jobID string
	key   []byte
	size  int
	h     *codec.MsgpackHandle
	bad   error // an invalid NewServer argument; Serve returns it

	// Set before Serve, not changed after (tests shorten them).
	handshakeTimeout time.Duration
	writeTimeout     time.Duration
	maxPending       int // connections allowed in the handshake at once
	maxTotal         int // bound on the sum of a round's parts

	events     chan Event // capacity 3*size+8: see emit
	eventsOnce sync.Once

	done      chan struct{} // closed when the server starts closing
	serveDone chan struct{} // closed when Serve returns
	conns     sync.WaitGroup

	mu      sync.Mutex // protects everything below
	closing bool
	serving bool // Serve was called
	open    map[*srvConn]struct{}
	pending int         // connections in the handshake
	peers   []*srvConn  // by rank: the connection of a joined rank, else nil
	state   []rankState // by rank
	exited  []bool      // by rank: an EventExit was emitted
	failure *peerLost   // the first loss; once set, no round completes
	left    int         // ranks in rankLeft

	// The round being collected; every earlier round is complete. Only
	// one round is ever open: a rank sends round R+1 only after it got
	// round R's result, which needed every rank's part of round R.
	round   uint64
	parts   [][]byte // by rank
	have    []bool   // by rank
	arrived int
	total   int // bytes in parts
}

// NewServer returns a server for a job of size PEs that accepts on ln.
// It keeps a copy of key. Serve reports invalid arguments (an empty key
// or job id, a size outside [1, 2^31)).
func NewServer(ln net.Listener, jobID string, key []byte, size int) *Server {
	s := &Server{
		ln:               ln,
		jobID:            jobID,
		key:              append([]byte(nil), key...),
		size:             size,
		h:                newHandle(),
		handshakeTimeout: HandshakeTimeout,
		writeTimeout:     writeTimeout,
		maxTotal:         maxGatherTotal,
		done:             make(chan struct{}),
		serveDone:        make(chan struct{}),
		open:             make(map[*srvConn]struct{}),
		round:            1,
	}
	switch {
	case size < 1 || size > math.MaxInt32:
		s.bad = fmt.Errorf("boot: job size %d: %w", size, errs.Invalid)
		size = 0
	case len(key) == 0:
		s.bad = fmt.Errorf("boot: empty job key: %w", errs.Invalid)
	case jobID == "" || len(jobID) > maxText:
		s.bad = fmt.Errorf("boot: job id of %d bytes: %w", len(jobID), errs.Invalid)
	}
	s.maxPending = 64 + 2*size
	// Each rank joins at most once, is lost at most once and emits at
	// most one EventExit, so 3*size events fit without ever blocking.
	s.events = make(chan Event, 3*size+8)
	s.peers = make([]*srvConn, size)
	s.state = make([]rankState, size)
	s.exited = make([]bool, size)
	s.parts = make([][]byte, size)
	s.have = make([]bool, size)
	return s
}

// Events returns the server's reports. The channel is closed after Serve
// returns (or by Close if Serve never ran). It is buffered so that no
// event is lost while the caller is busy.
func (s *Server) Events() <-chan Event { return s.events }

// Serve accepts and serves connections until ctx is done or Close is
// called; both return nil. It returns an error if the listener fails for
// another reason, or errs.Invalid for a bad NewServer argument or a
// second call. When Serve returns, every connection is closed and every
// goroutine of the server has ended.
func (s *Server) Serve(ctx context.Context) error {
	if s.bad != nil {
		s.beginClose()
		s.closeEvents()
		return s.bad
	}
	s.mu.Lock()
	if s.serving {
		s.mu.Unlock()
		return fmt.Errorf("boot: Serve called twice: %w", errs.Invalid)
	}
	s.serving = true
	s.mu.Unlock()
	defer close(s.serveDone)
	defer s.closeEvents()

	stop := make(chan struct{})
	var watch sync.WaitGroup
	watch.Add(1)
	go func() {
		defer watch.Done()
		select {
		case <-ctx.Done():
			s.beginClose()
		case <-stop:
		case <-s.done:
		}
	}()
	err := s.acceptLoop()
	close(stop)
	watch.Wait()
	s.beginClose()
	s.conns.Wait()
	return err
}

// Close stops the server: it closes the listener and every connection,
// and waits for Serve (if running) to return. No EventLost is reported
// for connections it closes.
func (s *Server) Close() error {
	s.beginClose()
	s.mu.Lock()
	serving := s.serving
	s.mu.Unlock()
	if serving {
		<-s.serveDone
	} else {
		s.closeEvents()
	}
	return nil
}

func (s *Server) closeEvents() {
	s.eventsOnce.Do(func() {
		// Callers have set closing already (beginClose); emit checks it
		// under mu, so no send can follow this close.
		s.mu.Lock()
		defer s.mu.Unlock()
		close(s.events)
	})
}

// beginClose starts closing; it is idempotent and does not wait.
func (s *Server) beginClose() {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	s.closing = true
	close(s.done)
	open := make([]*srvConn, 0, len(s.open))
	for c := range s.open {
		open = append(open, c)
	}
	s.mu.Unlock()
	s.ln.Close()
	for _, c := range open {
		c.close()
	}
}

func (s *Server) acceptLoop() error {
	var delay time.Duration
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.done:
				return nil
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("boot: listener closed under the server: %w", err)
			}
			// Transient (out of file descriptors, aborted connection):
			// back off and retry, as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-s.done:
				t.Stop()
				return nil
			}
			continue
		}
		delay = 0
		s.mu.Lock()
		if s.closing || s.pending >= s.maxPending {
			s.mu.Unlock()
			nc.Close()
			continue
		}
		c := &srvConn{s: s, nc: nc, rank: -1, out: make(chan outFrame, outQueue), closed: make(chan struct{})}
		s.pending++
		s.open[c] = struct{}{}
		s.conns.Add(1)
		s.mu.Unlock()
		go s.handle(c)
	}
}

// emit reports an event; s.mu must be held. The channel's capacity
// covers every event a job can produce (see NewServer), so the default
// branch is never taken while the caller drains Events; it only keeps a
// server whose owner stopped listening from blocking.
func (s *Server) emit(e Event) {
	if s.closing {
		return
	}
	select {
	case s.events <- e:
	default:
	}
}

// handle runs one connection: handshake, then requests until it ends.
func (s *Server) handle(c *srvConn) {
	defer s.conns.Done()
	ok := s.handshake(c)
	s.mu.Lock()
	s.pending--
	s.mu.Unlock()
	if !ok {
		c.close()
		s.forget(c)
		return
	}
	// The writer owns the connection from here: it closes it after the
	// frames queued before closeLater, and then forgets it.
	s.conns.Add(1)
	go c.writeLoop()
	s.readLoop(c)
	c.closeLater()
}

// forget removes a closed connection from the set Close closes.
func (s *Server) forget(c *srvConn) {
	s.mu.Lock()
	delete(s.open, c)
	s.mu.Unlock()
}

// handshake authenticates c and registers its rank. On failure it tells
// the peer why (if it can) and reports false; the job is unaffected.
func (s *Server) handshake(c *srvConn) bool {
	c.nc.SetDeadline(time.Now().Add(s.handshakeTimeout))
	sn := newNonce()
	if !s.writeNow(c, &hello{Magic: helloMagic, Version: helloVersion, JobID: s.jobID, Nonce: sn}) {
		return false
	}
	kind, body, err := readFrame(c.nc, maxHandshakeFrame)
	if err != nil {
		if errors.Is(err, errs.Protocol) {
			s.refuse(c, errCodeProtocol, err.Error())
		}
		return false
	}
	if kind == kindError {
		return false // the client refused us (say, another job's server)
	}
	if kind != kindJoin {
		s.refuse(c, errCodeProtocol, fmt.Sprintf("expected Join (kind %#02x), got kind %#02x", kindJoin, kind))
		return false
	}
	m, err := decodeMessage(s.h, kind, body)
	if err != nil {
		s.refuse(c, errCodeProtocol, err.Error())
		return false
	}
	j := m.(*join)
	// The MAC first: a peer that cannot prove the key learns nothing
	// about the job's ranks.
	if !hmac.Equal(clientMAC(s.key, sn, j.Nonce, s.jobID, j.Rank), j.MAC) {
		s.refuse(c, errCodeAuth, "join refused: MAC does not verify (wrong job key or job id)")
		return false
	}
	if j.Size != s.size {
		s.refuse(c, errCodeAuth, fmt.Sprintf("join refused: client says the job has %d PEs, it has %d", j.Size, s.size))
		return false
	}
	if j.Rank >= s.size {
		s.refuse(c, errCodeAuth, fmt.Sprintf("join refused: rank %d outside a job of %d PEs", j.Rank, s.size))
		return false
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return false
	}
	if st := s.state[j.Rank]; st != rankAbsent {
		s.mu.Unlock()
		s.refuse(c, errCodeAuth, fmt.Sprintf("join refused: rank %d already joined", j.Rank))
		return false
	}
	c.rank = j.Rank
	s.state[j.Rank] = rankJoined
	s.peers[j.Rank] = c
	s.emit(Event{Kind: EventJoined, Rank: j.Rank})
	if s.failure != nil {
		// Queued behind Welcome: the writer starts after the handshake.
		s.sendLocked(c, s.failure)
	}
	s.mu.Unlock()

	if !s.writeNow(c, &welcome{MAC: serverMAC(s.key, j.Nonce, sn, s.jobID, j.Rank)}) {
		s.lose(c, "failed to receive Welcome")
		return false
	}
	c.nc.SetDeadline(time.Time{})
	return true
}

// writeNow writes m at once on a connection in the handshake (whose
// deadline is set) and reports success.
func (s *Server) writeNow(c *srvConn, m message) bool {
	b, err := encodeMessage(s.h, m)
	if err != nil {
		return false
	}
	_, err = c.nc.Write(b)
	return err == nil
}

// refuse sends an Error in the handshake; the caller then closes.
func (s *Server) refuse(c *srvConn, code uint, msg string) {
	s.writeNow(c, &errorMsg{Code: code, Msg: truncate(msg)})
}

// readLoop serves a joined client's requests until its connection ends.
func (s *Server) readLoop(c *srvConn) {
	for {
		kind, body, err := readFrame(c.nc, maxClientFrame)
		if err != nil {
			switch {
			case errors.Is(err, errs.Protocol):
				s.violation(c, err)
			case errors.Is(err, io.EOF):
				s.lose(c, "closed its connection without Bye")
			default:
				s.lose(c, fmt.Sprintf("connection failed: %v", err))
			}
			return
		}
		m, err := decodeMessage(s.h, kind, body)
		if err != nil {
			s.violation(c, err)
			return
		}
		switch m := m.(type) {
		case *gather:
			if err := s.gather(c, m); err != nil {
				s.violation(c, err)
				return
			}
		case *status:
			s.status(c, m)
		case *exitReq:
			s.exit(c, m)
		case *bye:
			s.leave(c)
			return
		case *errorMsg:
			s.lose(c, fmt.Sprintf("sent an error: %q", m.Msg))
			return
		default:
			s.violation(c, protoErr("unexpected message kind %#02x from a client", kind))
			return
		}
	}
}

// violation drops a joined client that broke the protocol: it is told
// why, then lost like any dropped rank.
func (s *Server) violation(c *srvConn, err error) {
	s.mu.Lock()
	s.sendLastLocked(c, &errorMsg{Code: errCodeProtocol, Msg: truncate(err.Error())})
	s.mu.Unlock()
	s.lose(c, fmt.Sprintf("protocol violation: %v", err))
}

// lose records that c's rank dropped without Bye, fails every pending
// and later round, and reports EventLost. Connections the server closes
// itself while closing are not reported.
func (s *Server) lose(c *srvConn, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer c.closeLater()
	if s.closing || c.rank < 0 || s.peers[c.rank] != c {
		return
	}
	s.peers[c.rank] = nil
	s.state[c.rank] = rankLost
	s.emit(Event{Kind: EventLost, Rank: c.rank, Msg: why})
	s.failLocked(c.rank, why)
}

// failLocked records the job's first loss and tells every connected
// rank; s.mu must be held.
func (s *Server) failLocked(rank int, why string) {
	if s.failure != nil {
		return
	}
	s.failure = &peerLost{Rank: rank, Msg: truncate(why)}
	for _, p := range s.peers {
		if p != nil {
			s.sendLocked(p, s.failure)
		}
	}
}

// leave handles a Bye: the rank is gone in order. If a round is open
// that it has not contributed to, that round can never complete.
func (s *Server) leave(c *srvConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer c.close()
	if s.closing || s.peers[c.rank] != c {
		return
	}
	s.peers[c.rank] = nil
	s.state[c.rank] = rankLeft
	s.left++
	if s.arrived > 0 && !s.have[c.rank] {
		s.failLocked(c.rank, fmt.Sprintf("said Bye before taking part in round %d", s.round))
	}
}

// gather takes c's part of the open round and, when every rank has
// arrived, sends the result to all. An error means c broke the protocol.
func (s *Server) gather(c *srvConn, m *gather) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failure != nil {
		s.sendLocked(c, s.failure)
		return nil
	}
	if m.Round != s.round {
		return protoErr("rank %d sent round %d while the job is at round %d", c.rank, m.Round, s.round)
	}
	if s.have[c.rank] {
		return protoErr("rank %d sent round %d twice", c.rank, m.Round)
	}
	s.have[c.rank] = true
	s.parts[c.rank] = m.Data
	s.arrived++
	s.total += len(m.Data)
	if s.left > 0 {
		for r, st := range s.state {
			if st == rankLeft && !s.have[r] {
				s.failLocked(r, fmt.Sprintf("said Bye before taking part in round %d", s.round))
				break
			}
		}
		return nil
	}
	if s.arrived < s.size {
		return nil
	}

	round, parts, total := s.round, s.parts, s.total
	s.round++
	s.parts = make([][]byte, s.size)
	clear(s.have)
	s.arrived, s.total = 0, 0

	var res message = &gatherResult{Round: round, Data: parts}
	if total > s.maxTotal {
		res = &roundFailed{Round: round, Msg: fmt.Sprintf("the %d parts add up to %d bytes, limit %d", s.size, total, s.maxTotal)}
	}
	b, err := encodeMessage(s.h, res)
	if err != nil {
		b, _ = encodeMessage(s.h, &roundFailed{Round: round, Msg: truncate(err.Error())})
	}
	for _, p := range s.peers {
		if p != nil {
			p.send(b, false)
		}
	}
	return nil
}

// status answers how far a round has got.
func (s *Server) status(c *srvConn, m *status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rep := &statusReply{Round: m.Round}
	switch {
	case m.Round < s.round:
		rep.Arrived = s.size
	case m.Round == s.round:
		rep.Arrived = s.arrived
		for r, ok := range s.have {
			if !ok && len(rep.Missing) < maxMissing {
				rep.Missing = append(rep.Missing, r)
			}
		}
	default:
		for r := 0; r < s.size && r < maxMissing; r++ {
			rep.Missing = append(rep.Missing, r)
		}
	}
	s.sendLocked(c, rep)
}

// exit acknowledges an Exit request and reports it (once per rank).
func (s *Server) exit(c *srvConn, m *exitReq) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.exited[c.rank] {
		s.exited[c.rank] = true
		s.emit(Event{Kind: EventExit, Rank: c.rank, Code: m.Code})
	}
	s.sendLocked(c, &exitAck{Code: m.Code})
}

// sendLocked queues m for c. Queuing under s.mu keeps every client's
// frames in the order the server decided them (a result before a later
// loss notice).
func (s *Server) sendLocked(c *srvConn, m message) {
	if b, err := encodeMessage(s.h, m); err == nil {
		c.send(b, false)
	}
}

// sendLastLocked queues m for c and closes c once it is written.
func (s *Server) sendLastLocked(c *srvConn, m message) {
	if b, err := encodeMessage(s.h, m); err == nil {
		c.send(b, true)
	}
}

func truncate(msg string) string {
	if len(msg) > maxText {
		return msg[:maxText]
	}
	return msg
}

// srvConn is one client connection on the server.
type srvConn struct {
	s    *Server
	nc   net.Conn
	rank int // -1 until joined; then fixed
	// out feeds the writer goroutine. Frames are shared between
	// connections and never modified after they are queued.
	out       chan outFrame
	closeOnce sync.Once
	closed    chan struct{}
	lastOnce  sync.Once
}

type outFrame struct {
	b    []byte
	last bool // close the connection after writing b
}

// send queues a frame without blocking. A client whose queue is full has
// stopped reading; it is closed, and its reader reports it lost.
func (c *srvConn) send(b []byte, last bool) {
	select {
	case c.out <- outFrame{b, last}:
	default:
		c.close()
	}
}

// closeLater closes c after the frames already queued, or at once if the
// writer is not running. It never blocks.
func (c *srvConn) closeLater() {
	if c.rank < 0 {
		c.close()
		return
	}
	c.lastOnce.Do(func() {
		select {
		case c.out <- outFrame{last: true}:
		default:
			c.close()
		}
	})
}

func (c *srvConn) close() {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.nc.Close()
	})
}

// writeLoop writes queued frames until the connection closes.
func (c *srvConn) writeLoop() {
	defer c.s.conns.Done()
	defer c.s.forget(c)
	defer c.close()
	for {
		select {
		case f := <-c.out:
			if len(f.b) > 0 {
				c.nc.SetWriteDeadline(time.Now().Add(c.s.writeTimeout))
				if _, err := c.nc.Write(f.b); err != nil {
					return
				}
			}
			if f.last {
				return
			}
		case <-c.closed:
			return
		}
	}
}
