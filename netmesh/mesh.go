package netmesh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goshmem/goshmem/internal/errs"
	"github.com/goshmem/goshmem/internal/testhook"
)

// Mesh is one PE's set of links to the PEs on other hosts.
type Mesh struct {
	cfg       Config
	hs        hsParams
	ln        net.Listener
	lossAfter time.Duration // Heartbeat * Misses
	// hostAcks is stream.peerHostAcks; a test replaces it before the
	// watchdog's first tick to play a host that acknowledges nothing.
	hostAcks  func(st *stream, within time.Duration) bool
	hsTimeout time.Duration
	ctx       context.Context // cancelled when Close begins
	cancel    context.CancelFunc
	wg        sync.WaitGroup // every goroutine of the mesh
	closeOnce sync.Once

	mu       sync.Mutex            // protects the fields below
	links    map[int]*Link         // by rank: every link with at least one stream
	expected map[int]bool          // ranks Connect was given; nil before Connect
	addrs    map[int]string        // their addresses, as Connect was given them ("" for some lower ranks)
	hsConns  map[net.Conn]struct{} // connections in the handshake
	closing  bool
	changed  chan struct{} // closed (and replaced) when a link becomes ready or fails

	pollList atomic.Pointer[[]*stream] // the streams of ready links, for Poll (spin.go); set under mu
	oversub  atomic.Bool               // SetOversubscribed

	lingerT *time.Timer  // frees lingering read tokens (spin.go, freeLingering)
	noNap   bool         // GOSHMEM_TEST_NONAP (testhook.NoNap): lingerT frees nothing while a wait is parked
	parked  atomic.Int32 // waits parked (Park): no token lingers while > 0 (lingerLocked)

	// The watchdog goroutine's own (watchdog.go).
	wclock    watchClock
	watchList []*stream
}

// Listen checks cfg, listens on cfg.Listen and starts accepting peers.
// Nothing a connection sends is applied before it completed the
// handshake.
func Listen(cfg Config) (*Mesh, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	lc := net.ListenConfig{Control: sockBufControl(cfg.SockBuf)}
	ln, err := lc.Listen(context.Background(), "tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("netmesh: PE %d: listen on %s: %w", cfg.Rank, cfg.Listen, err)
	}
	m := &Mesh{
		cfg:       cfg,
		ln:        ln,
		lossAfter: cfg.Heartbeat * time.Duration(cfg.Misses),
		hostAcks:  (*stream).peerHostAcks,
		hsTimeout: min(handshakeTimeout, cfg.Timeout),
		links:     make(map[int]*Link),
		hsConns:   make(map[net.Conn]struct{}),
		changed:   make(chan struct{}),
		wclock:    watchClock{tick: watchInterval(&cfg)},
	}
	m.hs = hsParams{key: cfg.Key, jobID: cfg.JobID, rank: cfg.Rank, size: cfg.Size, streams: cfg.Streams, memSize: uint64(len(cfg.Mem))}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.noNap = testhook.NoNap()
	m.lingerT = time.AfterFunc(time.Hour, m.lingerExpired)
	m.lingerT.Stop()
	m.wg.Add(2)
	go m.acceptLoop()
	go m.watchdog()
	return m, nil
}

// Addr returns the address peers dial (host:port of the listener).
func (m *Mesh) Addr() string { return m.ln.Addr().String() }

func (m *Mesh) logf(format string, args ...any) {
	if m.cfg.Logf != nil {
		m.cfg.Logf(format, args...)
	}
}

// notifyChanged wakes Connect. m.mu is held.
func (m *Mesh) notifyChanged() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// Link returns the link to rank, or nil if rank is not a connected peer.
// A link that was lost or closed is still returned; its operations fail
// with its error.
func (m *Mesh) Link(rank int) *Link {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.links[rank]; l != nil && l.ready {
		return l
	}
	return nil
}

// Connect links this PE with every peer in peers (rank -> address). The
// lower rank of each pair dials, retrying with backoff; the higher one
// waits to be dialled. It returns when every listed peer is connected,
// or with an error naming the ranks still missing when ctx ends (if ctx
// has no deadline, after Config.Timeout), or at once when a peer refuses
// authentication.
func (m *Mesh) Connect(ctx context.Context, peers map[int]string) error {
	for r, addr := range peers {
		if r < 0 || r >= m.cfg.Size || r == m.cfg.Rank {
			return fmt.Errorf("netmesh: PE %d: connect to PE %d in a job of %d: %w", m.cfg.Rank, r, m.cfg.Size, errs.Invalid)
		}
		if r > m.cfg.Rank && addr == "" {
			return fmt.Errorf("netmesh: PE %d: no address for PE %d: %w", m.cfg.Rank, r, errs.Invalid)
		}
	}
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		return fmt.Errorf("netmesh: PE %d: connect after Close: %w", m.cfg.Rank, errs.Finalized)
	}
	if m.expected != nil {
		m.mu.Unlock()
		return fmt.Errorf("netmesh: PE %d: Connect called twice: %w", m.cfg.Rank, errs.Invalid)
	}
	m.expected = make(map[int]bool, len(peers))
	m.addrs = make(map[int]string, len(peers))
	for r, a := range peers {
		m.expected[r] = true
		m.addrs[r] = a
	}
	// Links from ranks that are not peers after all are closed.
	var strays []*Link
	for r, l := range m.links {
		if !m.expected[r] {
			strays = append(strays, l)
			delete(m.links, r)
		}
	}
	m.mu.Unlock()
	for _, l := range strays {
		l.fail(fmt.Errorf("netmesh: PE %d: PE %d is not a remote peer of this PE: %w", m.cfg.Rank, l.rank, errs.Protocol), false)
	}

	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.cfg.Timeout)
		defer cancel()
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(m.ctx, cancel) // Close ends Connect
	defer stop()

	var (
		dials   sync.WaitGroup
		fatalMu sync.Mutex
		fatal   []error
	)
	for r, addr := range peers {
		if r < m.cfg.Rank {
			continue
		}
		for s := 0; s < m.cfg.Streams; s++ {
			dials.Add(1)
			ok := m.spawn(func() {
				defer dials.Done()
				if err := m.dial(ctx, r, addr, s); err != nil {
					fatalMu.Lock()
					fatal = append(fatal, err)
					fatalMu.Unlock()
					cancel()
				}
			})
			if !ok {
				dials.Done()
			}
		}
	}
	defer func() { cancel(); dials.Wait() }()

	start := time.Now()
	for {
		m.mu.Lock()
		var missing []int
		var lost []error
		for r := range peers {
			l := m.links[r]
			if l == nil || !l.ready {
				missing = append(missing, r)
			} else if err := l.Err(); err != nil {
				lost = append(lost, err)
			}
		}
		changed := m.changed
		m.mu.Unlock()
		if len(lost) > 0 {
			return errors.Join(lost...)
		}
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-changed:
			continue
		case <-ctx.Done():
		}
		slices.Sort(missing)
		fatalMu.Lock()
		errList := slices.Clone(fatal)
		fatalMu.Unlock()
		if len(errList) > 0 {
			return fmt.Errorf("netmesh: PE %d: no link to PEs %v: %w", m.cfg.Rank, missing, errors.Join(errList...))
		}
		if m.ctx.Err() != nil {
			return fmt.Errorf("netmesh: PE %d: no link to PEs %v: mesh closed: %w", m.cfg.Rank, missing, errs.Finalized)
		}
		return fmt.Errorf("netmesh: PE %d: no link to PEs %v after %v: %w", m.cfg.Rank, missing, time.Since(start).Round(time.Millisecond), errs.Timeout)
	}
}

// spawn runs f on a goroutine the mesh waits for, unless Close has begun.
// The check and the count are under m.mu, so Close's wait never races
// with a new goroutine.
func (m *Mesh) spawn(f func()) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closing {
		return false
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f()
	}()
	return true
}

// dial connects stream s to rank at addr, retrying with backoff until ctx
// ends. It returns an error only for a failure that retrying cannot fix
// (authentication, a refusal, a mesh closing); a ctx that ends first
// returns nil and Connect reports the missing rank.
func (m *Mesh) dial(ctx context.Context, rank int, addr string, s int) error {
	backoff := 5 * time.Millisecond
	d := net.Dialer{Control: sockBufControl(m.cfg.SockBuf)}
	for {
		_, err := m.dialOnce(ctx, &d, rank, addr, s, hsKindLink)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errs.Auth) || errors.Is(err, errs.Protocol) || errors.Is(err, errs.Finalized) {
			m.logf("netmesh: PE %d: stream %d to PE %d at %s: %v", m.cfg.Rank, s, rank, addr, err)
			return fmt.Errorf("PE %d at %s: %w", rank, addr, err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// dialOnce dials addr once and, after the handshake, registers and
// starts the connection as stream s of kind (hsKindLink, or hsKindChan
// with s the slot) of the link to rank.
func (m *Mesh) dialOnce(ctx context.Context, d *net.Dialer, rank int, addr string, s int, kind byte) (*stream, error) {
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	conn := c.(*net.TCPConn)
	if !m.track(conn) {
		conn.Close()
		return nil, fmt.Errorf("netmesh: mesh closing: %w", errs.Finalized)
	}
	defer m.untrack(conn)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	conn.SetDeadline(time.Now().Add(m.hsTimeout))
	peerMem, err := clientHandshake(conn, &m.hs, rank, s, kind)
	stopped := stop()
	if err == nil && !stopped {
		err = ctx.Err()
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	st, err := m.register(rank, s, kind, true, conn, peerMem)
	if err != nil {
		conn.Close()
		return nil, err
	}
	m.start(st)
	return st, nil
}

// track records a connection in the handshake, so Close can end it.
func (m *Mesh) track(c net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closing {
		return false
	}
	m.hsConns[c] = struct{}{}
	return true
}

func (m *Mesh) untrack(c net.Conn) {
	m.mu.Lock()
	delete(m.hsConns, c)
	m.mu.Unlock()
}

func (m *Mesh) acceptLoop() {
	defer m.wg.Done()
	for {
		c, err := m.ln.Accept()
		if err != nil {
			if m.ctx.Err() != nil {
				return
			}
			m.logf("netmesh: PE %d: accept: %v", m.cfg.Rank, err)
			select {
			case <-m.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		m.mu.Lock()
		full := len(m.hsConns) >= maxHandshakes+m.cfg.Size*(m.cfg.Streams+1)
		m.mu.Unlock()
		if full || !m.track(c) {
			m.logf("netmesh: PE %d: refused connection from %s: too many handshakes in progress", m.cfg.Rank, c.RemoteAddr())
			c.Close()
			continue
		}
		m.wg.Add(1)
		go m.serveConn(c.(*net.TCPConn))
	}
}

// serveConn runs the server handshake on a new connection and, if the
// peer proves the key, attaches it to its link.
func (m *Mesh) serveConn(c *net.TCPConn) {
	defer m.wg.Done()
	defer m.untrack(c)
	addr := c.RemoteAddr().String()
	c.SetDeadline(time.Now().Add(m.hsTimeout))
	var (
		admitErr error
		st       *stream
	)
	_, err := serverHandshake(c, &m.hs, func(h *hello) byte {
		var code byte
		st, code, admitErr = m.admit(h, c)
		return code
	})
	if err != nil {
		m.logf("netmesh: PE %d: refused connection from %s: %v", m.cfg.Rank, addr, err)
		if admitErr != nil {
			m.logf("netmesh: PE %d: %v", m.cfg.Rank, admitErr)
		}
		c.Close()
		if st != nil {
			// Registered, but ACCEPT did not go out: start the stream on
			// the closed connection so that the link fails the usual way.
			m.start(st)
		}
		return
	}
	c.SetDeadline(time.Time{})
	m.start(st)
}

// admit registers an authenticated connection as stream h.stream of the
// link to h.client, before ACCEPT is sent. It returns a refusal code.
func (m *Mesh) admit(h *hello, c *net.TCPConn) (*stream, byte, error) {
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		return nil, refuseClosing, nil
	}
	if m.expected != nil && !m.expected[int(h.client)] {
		m.mu.Unlock()
		return nil, refuseRank, fmt.Errorf("netmesh: PE %d at %s is not a remote peer of this PE", h.client, c.RemoteAddr())
	}
	m.mu.Unlock()
	st, err := m.register(int(h.client), int(h.stream), h.kind, false, c, h.memSize)
	if err != nil {
		return nil, refuseDuplicate, err
	}
	return st, 0, nil
}

// register makes c stream s of the link to rank, creating the link with
// its first stream; for kind hsKindChan, a channel stream of the ready
// link in slot s of the dialler (this side when dialled is set).
func (m *Mesh) register(rank, s int, kind byte, dialled bool, c *net.TCPConn, peerMem uint64) (*stream, error) {
	if err := tuneConn(c, m.cfg.SockBuf, m.lossAfter); err != nil {
		return nil, fmt.Errorf("netmesh: PE %d: socket options for PE %d: %w", m.cfg.Rank, rank, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closing {
		return nil, fmt.Errorf("netmesh: PE %d: mesh closing: %w", m.cfg.Rank, errs.Finalized)
	}
	l := m.links[rank]
	if kind == hsKindChan {
		return m.registerChanLocked(l, rank, s, dialled, c, peerMem)
	}
	if l == nil {
		l = newLink(m, rank, peerMem)
		m.links[rank] = l
	}
	switch {
	case l.Err() != nil:
		return nil, fmt.Errorf("netmesh: PE %d: stream %d from PE %d: the link is down: %w", m.cfg.Rank, s, rank, errs.Protocol)
	case l.streams[s] != nil:
		return nil, fmt.Errorf("netmesh: PE %d: stream %d from PE %d is already connected: %w", m.cfg.Rank, s, rank, errs.Protocol)
	case l.peerMem != peerMem:
		return nil, fmt.Errorf("netmesh: PE %d: PE %d's streams disagree on its segment size (%d, %d): %w", m.cfg.Rank, rank, l.peerMem, peerMem, errs.Protocol)
	}
	st, err := newStream(l, s, c)
	if err != nil {
		return nil, err
	}
	l.streams[s] = st
	return st, nil
}

// registerChanLocked is register for a channel stream. m.mu is held.
func (m *Mesh) registerChanLocked(l *Link, rank, slot int, dialled bool, c *net.TCPConn, peerMem uint64) (*stream, error) {
	switch {
	case l == nil || !l.ready:
		return nil, fmt.Errorf("netmesh: PE %d: channel stream %d with PE %d before the link is up: %w", m.cfg.Rank, slot, rank, errs.Protocol)
	case l.Err() != nil:
		return nil, fmt.Errorf("netmesh: PE %d: channel stream %d with PE %d: the link is down: %w", m.cfg.Rank, slot, rank, errs.Protocol)
	case l.peerMem != peerMem:
		return nil, fmt.Errorf("netmesh: PE %d: PE %d's streams disagree on its segment size (%d, %d): %w", m.cfg.Rank, rank, l.peerMem, peerMem, errs.Protocol)
	case !dialled && l.peerCtx[slot] != nil:
		return nil, fmt.Errorf("netmesh: PE %d: channel stream %d from PE %d is already connected: %w", m.cfg.Rank, slot, rank, errs.Protocol)
	}
	st, err := newStream(l, l.nextIdx, c)
	if err != nil {
		return nil, err
	}
	l.nextIdx++
	st.chanSlot, st.dialled = slot, dialled
	if !dialled {
		l.peerCtx[slot] = st
	}
	l.setAllLocked(append(l.allLocked(), st))
	return st, nil
}

// start runs a registered stream; its link becomes ready when every
// stream runs.
func (m *Mesh) start(st *stream) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := st.l
	st.started.Store(true)
	m.wg.Add(2)
	go st.readLoop()
	go func() {
		defer m.wg.Done()
		st.q.run(st.stop)
	}()
	if st.chanSlot >= 0 {
		m.updatePollList()
		return
	}
	l.up++
	if l.up == len(l.streams) {
		l.ready = true
		l.setAllLocked(append([]*stream(nil), l.streams...))
		m.updatePollList()
		m.notifyChanged()
	}
}

// Close says goodbye on every link, closes every connection and the
// listener, and returns once every goroutine of the mesh has ended.
// Operations still pending fail with errs.Finalized. Close is idempotent.
func (m *Mesh) Close() error { return m.close(true) }

// Abort is Close without the goodbyes: every connection is closed at
// once, so the peers see their links lost (OnLost), not finalized. A
// PE whose Finalize did not complete its barrier leaves this way: the
// peers still in theirs must not take its departure for one that
// followed a completed barrier. After Close, Abort does nothing (and
// Close after Abort).
func (m *Mesh) Abort() error { return m.close(false) }

func (m *Mesh) close(goodbye bool) error {
	m.closeOnce.Do(func() {
		m.mu.Lock()
		m.closing = true
		links := make([]*Link, 0, len(m.links))
		for _, l := range m.links {
			links = append(links, l)
		}
		for c := range m.hsConns {
			c.Close()
		}
		m.mu.Unlock()
		m.cancel()
		m.ln.Close()
		var wg sync.WaitGroup
		for _, l := range links {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l.shutdown(goodbye)
			}()
		}
		wg.Wait()
		m.wg.Wait()
		m.lingerT.Stop() // every stream has ended: nothing lingers
	})
	return nil
}
