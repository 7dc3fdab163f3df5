package boot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"

	"github.com/goshmem/goshmem/internal/auth"
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

// rankState is where a rank is in the current generation (see doc.go).
type rankState uint8

const (
	rankAbsent rankState = iota // not joined this generation yet
	rankJoined                  // joined and connected
	rankLeft                    // said Bye; its connection is closed
	rankLost                    // its connection dropped without Bye (in any generation; final)
)

// pendingConn is a rank's connection to the next generation: the rank
// said Bye in the current generation and joined again. It waits until
// every rank has left the current generation.
type pendingConn struct {
	c    *srvConn
	held *gather // its round-1 part, sent before the generation started
	bye  bool    // it said Bye before the generation started
}

// Server is the boot rendezvous of one job. Each PE connects and
// authenticates with the job key, and then uses the connection for
// Allgather rounds, Exit and Bye. A PE that said Bye may connect again
// (Init after Finalize); its new connection joins the next generation
// (see doc.go). A peer that fails the handshake or sends malformed bytes
// loses its own connection; the job goes on.
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
	owed       int        // guaranteed events not yet emitted; guarded by mu
	eventsOnce sync.Once

	done      chan struct{} // closed when the server starts closing
	serveDone chan struct{} // closed when Serve returns
	conns     sync.WaitGroup

	mu      sync.Mutex // protects everything below
	closing bool
	serving bool // Serve was called
	open    map[*srvConn]struct{}
	pending int             // connections in the handshake
	gen     uint64          // the current generation, 1 for the first connections
	peers   []*srvConn      // by rank: the rank's connection in the current generation, else nil
	state   []rankState     // by rank, in the current generation
	next    []*pendingConn  // by rank: its connection to the next generation, else nil
	joined  []bool          // by rank: it joined at least once (EventJoined owed until then)
	exited  []bool          // by rank: an EventExit was emitted
	failure *peerLost       // the first loss; once set, no round of any generation completes
	left    int             // ranks in rankLeft
	ended   *jobEnded       // the first GlobalExit request; told to every other rank
	endSent []chan struct{} // closed once the JobEnded frame to that connection is written (or it closed)
	gen1End chan struct{}   // closed when generation 1 ends (every rank said Bye to it)

	// The round being collected in the current generation; every earlier
	// round of it is complete. Only one round is ever open: a rank sends
	// round R+1 only after it got round R's result, which needed every
	// rank's part of round R. Parts for the next generation wait in next.
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
		gen:              1,
		round:            1,
		gen1End:          make(chan struct{}),
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
	// Each rank joins a first time once, is lost at most once and emits
	// at most one EventExit, so these 3*size events fit without ever
	// blocking. The EventJoined of a rejoin only uses room beyond what
	// they may still need (see emitSpare).
	s.events = make(chan Event, 3*size+8)
	s.owed = 3 * size
	s.peers = make([]*srvConn, size)
	s.state = make([]rankState, size)
	s.next = make([]*pendingConn, size)
	s.joined = make([]bool, size)
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

// emit reports a guaranteed event (a rank's first EventJoined, its
// EventLost, its EventExit: each at most once per rank); s.mu must be
// held. The channel's capacity covers all of them (see NewServer), so
// the default branch is never taken while the caller drains Events; it
// only keeps a server whose owner stopped listening from blocking.
func (s *Server) emit(e Event) {
	s.owed--
	if s.closing {
		return
	}
	select {
	case s.events <- e:
	default:
	}
}

// emitSpare reports an event beyond the guaranteed ones (the EventJoined
// of a rejoin); s.mu must be held. It is dropped unless the channel has
// room for it and for every guaranteed event still owed, so that a slow
// reader never costs an EventLost or EventExit. Only emit and emitSpare
// send, under s.mu, so the room seen here cannot shrink meanwhile.
func (s *Server) emitSpare(e Event) {
	if s.closing || cap(s.events)-len(s.events) <= s.owed {
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
	if !s.writeNow(c, &hello{Magic: helloMagic, Version: helloVersion, JobID: s.jobID}) {
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
	// The key first: a peer that cannot prove it learns nothing about
	// the job's ranks. A failed exchange has told the peer (auth REFUSE).
	if err := auth.Exchange(c.nc, s.key, auth.Initiator, labelBoot, bootBound(s.jobID, j.Rank, j.Size)...); err != nil {
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
	if why := s.admitLocked(c, j.Rank); why != "" {
		s.mu.Unlock()
		s.refuse(c, errCodeAuth, "join refused: "+why)
		return false
	}
	if s.failure != nil {
		// Queued behind Welcome: the writer starts after the handshake.
		s.sendLocked(c, s.failure)
	}
	s.mu.Unlock()

	if !s.writeNow(c, &welcome{}) {
		s.lose(c, "failed to receive Welcome")
		return false
	}
	c.nc.SetDeadline(time.Time{})
	return true
}

// admitLocked registers c as rank's connection, in the current
// generation if the rank has not joined it, else in the next one if the
// rank said Bye in this one. It returns why it refuses, or "". s.mu must
// be held.
func (s *Server) admitLocked(c *srvConn, rank int) string {
	switch s.state[rank] {
	case rankAbsent:
		c.gen = s.gen
		s.peers[rank] = c
		s.state[rank] = rankJoined
	case rankJoined:
		return fmt.Sprintf("rank %d already joined (its connection is open)", rank)
	case rankLeft:
		if s.next[rank] != nil {
			return fmt.Sprintf("rank %d already joined generation %d", rank, s.gen+1)
		}
		c.gen = s.gen + 1
		s.next[rank] = &pendingConn{c: c}
	default:
		return fmt.Sprintf("rank %d was lost", rank)
	}
	c.rank = rank
	e := Event{Kind: EventJoined, Rank: rank, Gen: c.gen}
	if s.joined[rank] {
		s.emitSpare(e)
	} else {
		s.joined[rank] = true
		s.emit(e)
	}
	return ""
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
// and later round (of every generation), and reports EventLost.
// Connections the server closes itself while closing are not reported.
func (s *Server) lose(c *srvConn, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer c.closeLater()
	if s.closing || c.rank < 0 {
		return
	}
	switch p := s.next[c.rank]; {
	case s.peers[c.rank] == c:
		s.peers[c.rank] = nil
	case p != nil && p.c == c && !p.bye:
		// Lost while waiting for its generation: the rank had left the
		// current one, and is now lost for good.
		s.next[c.rank] = nil
		s.left--
	default:
		return
	}
	s.state[c.rank] = rankLost
	s.emit(Event{Kind: EventLost, Rank: c.rank, Gen: c.gen, Msg: why})
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
	for _, p := range s.next {
		if p != nil && !p.bye {
			s.sendLocked(p.c, s.failure)
		}
	}
}

// leave handles a Bye: the rank is gone in order. If a round is open
// that it has not contributed to, that round can never complete. When
// every rank has left the current generation, the next one starts.
func (s *Server) leave(c *srvConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer c.close()
	if s.closing {
		return
	}
	if p := s.next[c.rank]; p != nil && p.c == c {
		// Bye before its generation started: it counts when it starts.
		p.bye = true
		return
	}
	if s.peers[c.rank] != c {
		return
	}
	s.peers[c.rank] = nil
	s.state[c.rank] = rankLeft
	s.left++
	if s.arrived > 0 && !s.have[c.rank] {
		s.failLocked(c.rank, fmt.Sprintf("said Bye before taking part in round %d", s.round))
	}
	if s.left == s.size {
		s.advanceLocked()
	}
}

// advanceLocked starts the next generation once every rank has left the
// current one: round 1, fresh parts, with the ranks that joined it
// already, and their early parts counted. s.mu must be held.
func (s *Server) advanceLocked() {
	for s.left == s.size {
		if s.gen == 1 {
			close(s.gen1End)
		}
		s.gen++
		s.round = 1
		s.parts = make([][]byte, s.size)
		clear(s.have)
		s.arrived, s.total, s.left = 0, 0, 0
		for r, p := range s.next {
			s.next[r] = nil
			s.peers[r], s.state[r] = nil, rankAbsent
			if p == nil {
				continue
			}
			if p.bye {
				s.state[r] = rankLeft
				s.left++
			} else {
				s.peers[r], s.state[r] = p.c, rankJoined
			}
			if p.held != nil {
				s.have[r] = true
				s.parts[r] = p.held.Data
				s.arrived++
				s.total += len(p.held.Data)
			}
		}
		// Every rank said Bye to the new generation before it started
		// (possible only if all of them joined it): it is over too.
	}
	s.settleLocked()
}

// gather takes c's part of the open round and, when every rank has
// arrived, sends the result to all. A part for the next generation is
// held until it starts. An error means c broke the protocol.
func (s *Server) gather(c *srvConn, m *gather) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failure != nil {
		s.sendLocked(c, s.failure)
		return nil
	}
	if c.gen != s.gen {
		p := s.next[c.rank]
		if p == nil || p.c != c {
			return protoErr("rank %d sent a part on a connection of generation %d at generation %d", c.rank, c.gen, s.gen)
		}
		if m.Round != 1 {
			return protoErr("rank %d sent round %d of generation %d before it started", c.rank, m.Round, c.gen)
		}
		if p.held != nil {
			return protoErr("rank %d sent round 1 of generation %d twice", c.rank, c.gen)
		}
		p.held = m
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
	s.settleLocked()
	return nil
}

// settleLocked ends the open round if it can: with PeerLost if a rank
// that said Bye has no part in it while others have, with the result if
// every rank has its part. s.mu must be held.
func (s *Server) settleLocked() {
	if s.failure != nil || s.arrived == 0 {
		return
	}
	if s.left > 0 {
		for r, st := range s.state {
			if st == rankLeft && !s.have[r] {
				s.failLocked(r, fmt.Sprintf("said Bye before taking part in round %d", s.round))
				return
			}
		}
	}
	if s.arrived < s.size {
		return
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
}

// status answers how far a round has got. For a connection waiting for
// its generation, round 1 counts the parts held for it.
func (s *Server) status(c *srvConn, m *status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rep := &statusReply{Round: m.Round}
	switch {
	case c.gen != s.gen:
		for r, p := range s.next {
			if m.Round == 1 && p != nil && p.held != nil {
				rep.Arrived++
			} else if len(rep.Missing) < maxMissing {
				rep.Missing = append(rep.Missing, r)
			}
		}
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

// exit acknowledges an Exit request and reports it (once per rank). The
// job's first request is also told to every other connected rank
// (JobEnded); the requester's ack follows once those frames are written
// (or their connections ended, or writeTimeout passed).
func (s *Server) exit(c *srvConn, m *exitReq) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.exited[c.rank] {
		s.exited[c.rank] = true
		s.emit(Event{Kind: EventExit, Rank: c.rank, Gen: c.gen, Code: m.Code})
	}
	if s.ended == nil {
		s.ended = &jobEnded{Rank: c.rank, Code: m.Code}
		defer func() {
			// The ack waits until the others have been told: a caller
			// that exits on it does not beat the news of its exit.
			sent := append([]chan struct{}(nil), s.endSent...)
			go func() {
				t := time.NewTimer(s.writeTimeout)
				defer t.Stop()
				for _, ch := range sent {
					select {
					case <-ch:
					case <-t.C:
					case <-s.done:
					}
				}
				s.mu.Lock()
				s.sendLocked(c, &exitAck{Code: m.Code})
				s.mu.Unlock()
			}()
		}()
		if b, err := encodeMessage(s.h, s.ended); err == nil {
			tell := func(p *srvConn) {
				if p == nil || p == c {
					return
				}
				sent := make(chan struct{})
				s.endSent = append(s.endSent, sent)
				p.sendFrame(outFrame{b: b, sent: sent})
			}
			for _, p := range s.peers {
				tell(p)
			}
			for _, p := range s.next {
				if p != nil {
					tell(p.c)
				}
			}
		}
		return
	}
	s.sendLocked(c, &exitAck{Code: m.Code})
}

// WaitExitTold waits, at most d, until the JobEnded frames of the job's
// first GlobalExit request have been written to every rank connected
// when it came (or their connections ended). A server that lives inside
// a PE (under mpirun, mpiexec or srun, rank 0 serves the job) calls it
// before that PE exits, so that the others learn the code rather than
// see the server vanish. It returns at once when no rank asked.
func (s *Server) WaitExitTold(d time.Duration) bool {
	s.mu.Lock()
	sent := append([]chan struct{}(nil), s.endSent...)
	s.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	for _, c := range sent {
		select {
		case <-c:
		case <-t.C:
			return false
		}
	}
	return true
}

// FirstGenerationDone is closed when every rank has said Bye to the
// job's first generation. A server inside a PE waits for it at
// Finalize, so that it outlives every other rank's goodbye.
func (s *Server) FirstGenerationDone() <-chan struct{} { return s.gen1End }

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
	rank int    // -1 until joined; then fixed
	gen  uint64 // the generation it belongs to; set with rank, under s.mu
	// out feeds the writer goroutine. Frames are shared between
	// connections and never modified after they are queued.
	out       chan outFrame
	closeOnce sync.Once
	closed    chan struct{}
	lastOnce  sync.Once
}

type outFrame struct {
	b    []byte
	last bool          // close the connection after writing b
	sent chan struct{} // if set, closed once b is written or the connection ends
}

// send queues a frame without blocking. A client whose queue is full has
// stopped reading; it is closed, and its reader reports it lost.
func (c *srvConn) send(b []byte, last bool) {
	c.sendFrame(outFrame{b: b, last: last})
}

func (c *srvConn) sendFrame(f outFrame) {
	select {
	case c.out <- f:
	default:
		c.close()
		if f.sent != nil {
			close(f.sent)
		}
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

// writeLoop writes queued frames until the connection closes. Frames
// still queued when it ends have their sent channels closed: nobody waits
// on a connection that is gone.
func (c *srvConn) writeLoop() {
	defer c.s.conns.Done()
	defer c.s.forget(c)
	defer c.close()
	defer func() {
		for {
			select {
			case f := <-c.out:
				if f.sent != nil {
					close(f.sent)
				}
			default:
				return
			}
		}
	}()
	for {
		select {
		case f := <-c.out:
			if len(f.b) > 0 {
				c.nc.SetWriteDeadline(time.Now().Add(c.s.writeTimeout))
				_, err := c.nc.Write(f.b)
				if f.sent != nil {
					close(f.sent)
				}
				if err != nil {
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
