package shmem

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/goshmem/goshmem/heap"
	"github.com/goshmem/goshmem/internal/auth"
	"github.com/goshmem/goshmem/internal/boot"
)

// The same-host segment exchange: one Unix stream connection per pair of
// same-host PEs, on which each side passes the other its memfd and its
// wake descriptor (the eventfd its waits sleep on, heap.Sleeper). The
// higher rank dials the lower rank's abstract socket, whose name the
// endpoint table (first Allgather) carries. docs/shared-memory.md holds
// the normative version of this table. Integers are big-endian.
//
//	hello, 16 bytes, each way (the dialer's first):
//	  offset 0   8   magic "GSHMSEG4" (segMagic)
//	  offset 8   1   protocol version (segVersion, 4), checked right after the magic
//	  offset 9   3   zero
//	  offset 12  4   the sender's rank
//	the runtime's one challenge-response exchange (internal/auth,
//	  docs/wire.md): the acceptor its initiator, label segLabel, bound
//	  fields the job id, the dialer's hello and the acceptor's hello
//	acceptor's segment, 1 byte segFD ('S') + two descriptors in one
//	  SCM_RIGHTS message: the memfd, then the wake eventfd; sent once
//	  the exchange has passed on the acceptor's side
//	dialer's segment, 1 byte segFD + the same two descriptors, sent once
//	  the exchange has passed on the dialer's side and the acceptor's
//	  segment mapped
//	afterwards, the liveness link: one byte segBye ('B') at Finalize once
//	  its barrier has completed, then the close. End of file without it
//	  means the peer died or left without completing that barrier.
//
// The exchange checks the dialer's proof before the acceptor proves,
// and each side sends its descriptor only once the other has proven it
// holds the job key: a local stranger that connects learns the
// acceptor's rank and a nonce, nothing else.
//
// The acceptor handles every connection in a goroutine of its own with
// a deadline of segHandshakeTimeout, so a stranger that connects and
// stays silent holds up nothing; it keeps accepting until every
// expected peer has completed. The dialer retries (connection refused,
// or a handshake the acceptor dropped) until the start-up deadline; a
// failed key exchange with the PE it dialed fails Init at once.
const (
	segMagic            = "GSHMSEG4"
	segVersion          = 4
	segHelloSize        = 16
	segFD               = 'S'
	segBye              = 'B'
	segHandshakeTimeout = 5 * time.Second
	segMaxHandshakes    = 16 // connections the acceptor handles at once
	segMaxRefusedLogs   = 3  // refused connections logged one by one; the rest are counted
	segLabel            = "goshmem-seg4"
)

// segSockName names a PE's exchange socket in the abstract namespace:
// "@goshmem-", 16 hex digits of the job id's SHA-256, the rank, and 16
// random hex digits. The job id (up to 4 KiB) goes in hashed, so the name
// stays within the 107 bytes a Unix socket address holds.
func segSockName(jobID string, rank int) string {
	var nonce [8]byte
	rand.Read(nonce[:])
	h := sha256.Sum256([]byte(jobID))
	return fmt.Sprintf("@goshmem-%s-%d-%s", hex.EncodeToString(h[:8]), rank, hex.EncodeToString(nonce[:]))
}

// segHello is one side's hello.
type segHello struct {
	version uint8
	rank    uint32
}

// appendSegHello appends h's bytes to b.
func appendSegHello(b []byte, h segHello) []byte {
	b = append(b, segMagic...)
	b = append(b, h.version, 0, 0, 0)
	return binary.BigEndian.AppendUint32(b, h.rank)
}

// parseSegHello parses a hello: the magic, then the version, before any
// other field.
func parseSegHello(b []byte) (segHello, error) {
	var h segHello
	if len(b) != segHelloSize {
		return h, fmt.Errorf("hello of %d bytes, want %d: %w", len(b), segHelloSize, ErrProtocol)
	}
	if !bytes.Equal(b[:8], []byte(segMagic)) {
		return h, fmt.Errorf("bad hello magic %q: %w", b[:8], ErrProtocol)
	}
	if h.version = b[8]; h.version != segVersion {
		return h, fmt.Errorf("segment exchange version %d, want %d: %w", h.version, segVersion, ErrProtocol)
	}
	if b[9]|b[10]|b[11] != 0 {
		return h, fmt.Errorf("hello with reserved bytes %x, want zeros: %w", b[9:12], ErrProtocol)
	}
	h.rank = binary.BigEndian.Uint32(b[12:])
	return h, nil
}

// segConn is one side of one exchange connection.
type segConn struct {
	c        *net.UnixConn
	env      boot.Env
	me, peer int
	mine     []byte // this side's hello, as sent
	theirs   []byte // the peer's hello, as received
}

func (sc *segConn) sendHello() error {
	sc.mine = appendSegHello(nil, segHello{version: segVersion, rank: uint32(sc.me)})
	_, err := sc.c.Write(sc.mine)
	return err
}

func (sc *segConn) readHello() (segHello, error) {
	b := make([]byte, segHelloSize)
	if _, err := io.ReadFull(sc.c, b); err != nil {
		return segHello{}, err
	}
	sc.theirs = b
	return parseSegHello(b)
}

// exchange runs auth.Exchange in role over both hellos. A failed
// exchange wraps ErrAuth (or ErrProtocol for malformed bytes); an I/O
// error is returned as it is.
func (sc *segConn) exchange(role auth.Role, dialerHello, acceptorHello []byte) error {
	err := auth.Exchange(sc.c, sc.env.Key, role, segLabel, []byte(sc.env.JobID), dialerHello, acceptorHello)
	if errors.Is(err, ErrAuth) {
		return fmt.Errorf("shmem: key exchange with same-host PE %d: %w", sc.peer, err)
	}
	return err
}

// segFDs are the descriptors a PE sends: its memfd, then its wake eventfd.
type segFDs struct{ mem, wake int }

// sendSeg sends this PE's memfd and wake eventfd, in one message.
func (sc *segConn) sendSeg(fds segFDs) error {
	return heap.SendFDs(sc.c, []byte{segFD}, fds.mem, fds.wake)
}

// recvSeg receives the peer's memfd and wake eventfd, checks the
// message, then maps the memfd and checks the header. The Waker owns
// the received eventfd.
func (sc *segConn) recvSeg(size uint64) (*heap.Segment, *heap.Waker, error) {
	var buf [1]byte
	fds, n, err := heap.RecvFDs(sc.c, buf[:], 2)
	if err != nil {
		return nil, nil, err
	}
	if n != 1 || buf[0] != segFD {
		heap.CloseFD(fds[0])
		heap.CloseFD(fds[1])
		return nil, nil, fmt.Errorf("shmem: segment message from PE %d of %d bytes (% x), want %q: %w", sc.peer, n, buf[:n], segFD, ErrProtocol)
	}
	seg, err := heap.Map(fds[0], size)
	if err != nil {
		heap.CloseFD(fds[1])
		return nil, nil, err
	}
	if !seg.CheckHeader(sc.peer) {
		seg.Close()
		heap.CloseFD(fds[1])
		return nil, nil, fmt.Errorf("shmem: segment from PE %d has a bad header: %w", sc.peer, ErrProtocol)
	}
	return seg, heap.NewWaker(fds[1], heap.Ptr32(seg.Bytes(), heap.WakeOff)), nil
}

// dial is the higher rank's side with PE sc.peer.
func (sc *segConn) dial(fds segFDs, size uint64) (*heap.Segment, *heap.Waker, error) {
	if err := sc.sendHello(); err != nil {
		return nil, nil, err
	}
	h, err := sc.readHello()
	if err != nil {
		return nil, nil, err
	}
	if int64(h.rank) != int64(sc.peer) {
		return nil, nil, fmt.Errorf("hello from rank %d on PE %d's socket: %w", h.rank, sc.peer, ErrProtocol)
	}
	if err := sc.exchange(auth.Responder, sc.mine, sc.theirs); err != nil {
		return nil, nil, err
	}
	seg, wake, err := sc.recvSeg(size)
	if err != nil {
		return nil, nil, err
	}
	if err := sc.sendSeg(fds); err != nil {
		seg.Close()
		wake.Close()
		return nil, nil, err
	}
	return seg, wake, nil
}

// accept is the lower rank's side: want says which ranks may connect.
func (sc *segConn) accept(fds segFDs, want func(int) bool, size func(int) uint64) (*heap.Segment, *heap.Waker, error) {
	h, err := sc.readHello()
	if err != nil {
		return nil, nil, err
	}
	r := int(h.rank)
	if r < 0 || !want(r) {
		return nil, nil, fmt.Errorf("hello from rank %d, which is not a same-host peer still expected: %w", h.rank, ErrProtocol)
	}
	sc.peer = r
	if err := sc.sendHello(); err != nil {
		return nil, nil, err
	}
	if err := sc.exchange(auth.Initiator, sc.theirs, sc.mine); err != nil {
		return nil, nil, err
	}
	if err := sc.sendSeg(fds); err != nil {
		return nil, nil, err
	}
	return sc.recvSeg(size(r))
}

// exchangeSegments maps every same-host peer's segment: it dials the
// lower ranks and accepts the higher ones, all at once, within ctx.
func (pe *PE) exchangeSegments(ctx context.Context, env boot.Env, eps []endpoint) error {
	deadline, _ := ctx.Deadline()
	var lower, higher []int
	for r := range eps {
		if r == pe.rank || eps[r].Host != pe.host {
			continue
		}
		if r < pe.rank {
			lower = append(lower, r)
		} else {
			higher = append(higher, r)
		}
	}
	var wg sync.WaitGroup
	errc := make(chan error, len(lower)+1)
	var mu sync.Mutex // guards pe.peers[*].{mem,seg,conn,wake} while the exchanges run
	setPeer := func(r int, c *net.UnixConn, seg *heap.Segment, wake *heap.Waker) {
		mu.Lock()
		defer mu.Unlock()
		p := &pe.peers[r]
		p.conn, p.seg, p.mem, p.wake = c, seg, seg.Bytes(), wake
	}
	for _, r := range lower {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, seg, wake, err := pe.dialSeg(ctx, env, r, eps[r], deadline)
			if err != nil {
				errc <- err
				return
			}
			setPeer(r, c, seg, wake)
		}()
	}
	if len(higher) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := pe.acceptSegs(ctx, env, eps, higher, setPeer); err != nil {
				errc <- err
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		return err
	}
	return nil
}

// dialSeg connects to lower-ranked PE r and runs the dialer's side,
// retrying until the deadline unless PE r fails the key check.
func (pe *PE) dialSeg(ctx context.Context, env boot.Env, r int, ep endpoint, deadline time.Time) (*net.UnixConn, *heap.Segment, *heap.Waker, error) {
	var last error
	for ctx.Err() == nil {
		d := net.Dialer{Deadline: deadline}
		c, err := d.DialContext(ctx, "unix", ep.Sock)
		if err != nil {
			last = err
			time.Sleep(5 * time.Millisecond) // PE r is not listening yet
			continue
		}
		uc := c.(*net.UnixConn)
		uc.SetDeadline(deadline)
		sc := &segConn{c: uc, env: env, me: pe.rank, peer: r}
		seg, wake, err := sc.dial(pe.segFDs(), ep.SegSize)
		if err == nil {
			uc.SetDeadline(time.Time{})
			return uc, seg, wake, nil
		}
		uc.Close()
		if errors.Is(err, ErrAuth) || errors.Is(err, ErrProtocol) {
			return nil, nil, nil, fmt.Errorf("shmem: PE %d exchanging segments with same-host PE %d: %w", pe.rank, r, err)
		}
		last = err // dropped by the acceptor (its handshake deadline): again
	}
	return nil, nil, nil, fmt.Errorf("shmem: PE %d dialing same-host PE %d: %v: %w", pe.rank, r, last, ErrTimeout)
}

// segFDs are the descriptors this PE passes to its same-host peers.
func (pe *PE) segFDs() segFDs { return segFDs{mem: pe.seg.FD(), wake: pe.sleeper.FD()} }

// acceptSegs accepts the higher-ranked same-host PEs in ranks. Each
// connection gets its own goroutine and a segHandshakeTimeout deadline;
// refused ones are logged (the first few) and dropped.
func (pe *PE) acceptSegs(ctx context.Context, env boot.Env, eps []endpoint, ranks []int,
	setPeer func(int, *net.UnixConn, *heap.Segment, *heap.Waker)) error {
	deadline, _ := ctx.Deadline()
	var mu sync.Mutex // guards want, refused, active
	want := make(map[int]bool, len(ranks))
	active := map[*net.UnixConn]bool{} // handshakes in flight
	stopped := false                   // the exchange is over: cut every handshake
	for _, r := range ranks {
		want[r] = true
	}
	refused := 0
	done := make(chan struct{}) // closed when every expected PE is in, or on failure
	var doneOnce sync.Once
	finish := func() { doneOnce.Do(func() { close(done) }) }
	slots := make(chan struct{}, segMaxHandshakes)
	var hs sync.WaitGroup
	handle := func(c *net.UnixConn) {
		defer hs.Done()
		defer func() { <-slots }()
		mu.Lock()
		if stopped {
			mu.Unlock()
			c.Close()
			return
		}
		active[c] = true
		hd := time.Now().Add(segHandshakeTimeout)
		if deadline.Before(hd) {
			hd = deadline
		}
		c.SetDeadline(hd)
		mu.Unlock()
		sc := &segConn{c: c, env: env, me: pe.rank, peer: -1}
		seg, wake, err := sc.accept(pe.segFDs(), func(r int) bool {
			mu.Lock()
			defer mu.Unlock()
			return r < len(eps) && want[r]
		}, func(r int) uint64 { return eps[r].SegSize })
		mu.Lock()
		delete(active, c)
		if err == nil && !want[sc.peer] {
			err = fmt.Errorf("PE %d completed twice: %w", sc.peer, ErrProtocol)
		}
		if err != nil {
			refused++
			if refused <= segMaxRefusedLogs {
				fmt.Fprintf(os.Stderr, "goshmem: PE %d: refused a same-host connection: %v\n", pe.rank, err)
			}
			mu.Unlock()
			if seg != nil {
				seg.Close()
				wake.Close()
			}
			c.Close()
			return
		}
		delete(want, sc.peer)
		left := len(want)
		mu.Unlock()
		c.SetDeadline(time.Time{})
		setPeer(sc.peer, c, seg, wake)
		if left == 0 {
			finish()
		}
	}
	acceptErr := make(chan error, 1)
	var loop sync.WaitGroup
	loop.Add(1)
	go func() {
		defer loop.Done()
		for {
			select {
			case slots <- struct{}{}:
			case <-done:
				return
			}
			c, err := pe.unixLn.AcceptUnix()
			if err != nil {
				<-slots
				acceptErr <- err
				return
			}
			hs.Add(1)
			go handle(c)
		}
	}()
	var err error
	select {
	case <-done:
	case err = <-acceptErr:
	case <-ctx.Done():
		err = ctx.Err()
	}
	finish()
	// Stop the accept loop, cut the handshakes still in flight (none is
	// an expected peer's now), and let their goroutines end.
	pe.unixLn.SetDeadline(time.Now())
	loop.Wait()
	pe.unixLn.SetDeadline(time.Time{})
	mu.Lock()
	stopped = true
	for c := range active {
		c.SetDeadline(time.Now())
	}
	mu.Unlock()
	hs.Wait()
	mu.Lock()
	defer mu.Unlock()
	if refused > segMaxRefusedLogs {
		fmt.Fprintf(os.Stderr, "goshmem: PE %d: refused %d same-host connections in all\n", pe.rank, refused)
	}
	if len(want) > 0 {
		return fmt.Errorf("shmem: PE %d waiting for same-host PEs %v: %v: %w", pe.rank, keys(want), err, ErrTimeout)
	}
	return nil
}

func keys(m map[int]bool) []int {
	var k []int
	for r := range m {
		k = append(k, r)
	}
	return k
}

// watch reads a same-host peer's liveness link. A goodbye byte marks a
// clean departure: the peer's Finalize barrier completed (closeProcess
// sends it only then). A peer that says goodbye while this PE still runs
// (has not begun its own Finalize) finalized against some other
// collective call of this PE: no collective with it can complete, so the
// job is broken. End of file or an error without a goodbye means the
// peer died, or left without completing its Finalize: the job is broken
// whatever this PE is doing, Finalize's own barrier included, since the
// peer will not take part in it (markLost does nothing once this PE is
// closed).
func (pe *PE) watch(p *peer, c *net.UnixConn) {
	var b [1]byte
	for {
		n, err := c.Read(b[:])
		if n == 1 && b[0] == segBye {
			p.departed.Store(true)
			if pe.running() {
				pe.markLost(fmt.Errorf("shmem: PE %d (same host) finalized while PE %d had not (mismatched collective calls): %w",
					p.rank, pe.rank, ErrPeerLost))
			}
			continue
		}
		if err != nil {
			if !p.departed.Load() && !errors.Is(err, net.ErrClosed) {
				pe.deferToEngine(pe.engineClient.Load())
				pe.markLost(fmt.Errorf("shmem: PE %d (pid %d, same host) died or left without completing its Finalize: %w", p.rank, p.pid, ErrPeerLost))
			}
			return
		}
	}
}
