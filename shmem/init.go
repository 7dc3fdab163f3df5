package shmem

import (
	"bytes"
	"context"
	"crypto/hmac"
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

	"github.com/hashicorp/go-msgpack/v2/codec"

	"github.com/goshmem/goshmem/heap"
	"github.com/goshmem/goshmem/internal/boot"
)

// endpoint is what each PE tells the others at start, through the
// launcher's rendezvous (msgpack-encoded).
type endpoint struct {
	Rank      int    `codec:"rank"`
	Host      string `codec:"host"`
	Pid       int    `codec:"pid"`
	Sock      string `codec:"sock"`  // abstract Unix socket for the segment exchange
	Addr      string `codec:"addr"`  // unused: the TCP address travels in the second round
	SegSize   uint64 `codec:"seg"`   // segment bytes
	HeapSize  uint64 `codec:"heap"`  // SHMEM_SYMMETRIC_SIZE
	CacheLine int    `codec:"line"`  // cpuid's cache line
	Version   string `codec:"ver"`   // goshmem version
	Debug     bool   `codec:"debug"` // SHMEM_DEBUG
}

var mh codec.MsgpackHandle

func encodeMsgpack(v any) ([]byte, error) {
	var out []byte
	err := codec.NewEncoderBytes(&out, &mh).Encode(v)
	return out, err
}

func decodeMsgpack(b []byte, v any) error {
	return codec.NewDecoderBytes(b, &mh).Decode(v)
}

// Init joins the job the environment describes: a goshmem launcher's
// (goshrun) variables, or none at all, which starts a job of one PE so
// that `go run ./prog` works. Init after Finalize starts afresh.
func Init(opts ...Option) (*PE, error) {
	cfg, err := loadConfig(opts)
	if err != nil {
		return nil, err
	}
	env, launched, err := boot.ParseEnv(os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("shmem: %w", err)
	}
	host, err := hostIdentity()
	if err != nil {
		return nil, err
	}
	if !launched {
		seg, err := heap.Create(heap.HeapBase + cfg.HeapSize)
		if err != nil {
			return nil, err
		}
		seg.WriteHeader(0, os.Getpid())
		seg.CloseFD()
		pe, err := newPE(0, 1, cfg, host, seg, cacheLine())
		if err != nil {
			seg.Close()
			return nil, err
		}
		pe.makeTeams()
		pe.startInfo()
		return pe, nil
	}
	pe, err := joinJob(cfg, env, host)
	if err != nil {
		return nil, err
	}
	pe.startInfo()
	return pe, nil
}

func (pe *PE) startInfo() {
	if pe.rank != 0 {
		return
	}
	if pe.cfg.version {
		fmt.Fprintf(os.Stderr, "goshmem %s (OpenSHMEM %d.%d API)\n", Version, SpecVersionMajor, SpecVersionMinor)
	}
	if pe.cfg.Info {
		fmt.Fprintln(os.Stderr, pe.Info())
	}
}

// joinJob is Init under a launcher: rendezvous, then map every same-host
// peer's segment.
func joinJob(cfg Config, env boot.Env, host string) (pe *PE, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	bc, err := boot.Dial(ctx, env.Rendezvous, env.JobID, env.Key, env.Rank, env.Size)
	if err != nil {
		return nil, fmt.Errorf("shmem: PE %d joining job %s at %s: %w", env.Rank, env.JobID, env.Rendezvous, err)
	}
	seg, err := heap.Create(heap.HeapBase + cfg.HeapSize)
	if err != nil {
		bc.Close()
		return nil, err
	}
	seg.WriteHeader(env.Rank, os.Getpid())
	var nonce [8]byte
	rand.Read(nonce[:])
	sock := fmt.Sprintf("@goshmem-%s-%d-%s", env.JobID, env.Rank, hex.EncodeToString(nonce[:]))
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		bc.Close()
		seg.Close()
		return nil, fmt.Errorf("shmem: listening for same-host peers: %w", err)
	}
	pe, err = newPE(env.Rank, env.Size, cfg, host, seg, cacheLine())
	if err != nil {
		ln.Close()
		bc.Close()
		seg.Close()
		return nil, err
	}
	pe.boot, pe.unixLn = bc, ln
	self := pe
	defer func() {
		if err != nil {
			self.closeProcess(true)
		}
	}()
	me := endpoint{Rank: env.Rank, Host: host, Pid: os.Getpid(), Sock: sock, SegSize: seg.Size(),
		HeapSize: cfg.HeapSize, CacheLine: cacheLine(), Version: Version, Debug: cfg.Debug}
	mine, err := encodeMsgpack(&me)
	if err != nil {
		return nil, fmt.Errorf("shmem: encoding endpoint: %w", err)
	}
	all, err := bc.Allgather(ctx, mine)
	if err != nil {
		return nil, fmt.Errorf("shmem: PE %d exchanging endpoints: %w", env.Rank, err)
	}
	eps := make([]endpoint, env.Size)
	for r, b := range all {
		if err := decodeMsgpack(b, &eps[r]); err != nil || eps[r].Rank != r {
			return nil, fmt.Errorf("shmem: endpoint of PE %d is malformed: %w", r, ErrProtocol)
		}
	}
	// Every PE sees the same table, so every PE fails alike on a mismatch.
	for r, ep := range eps {
		if ep.HeapSize != cfg.HeapSize || ep.SegSize != seg.Size() {
			return nil, fmt.Errorf("shmem: PE %d has a %d-byte symmetric heap, PE %d a %d-byte one (set SHMEM_SYMMETRIC_SIZE alike everywhere): %w",
				r, ep.HeapSize, env.Rank, cfg.HeapSize, ErrAsymmetric)
		}
		if ep.Debug != cfg.Debug {
			return nil, fmt.Errorf("shmem: SHMEM_DEBUG is %v on PE %d but %v on PE %d (the checks add collective steps; set it alike everywhere): %w",
				ep.Debug, r, cfg.Debug, env.Rank, ErrAsymmetric)
		}
		if ep.Version != Version {
			return nil, fmt.Errorf("shmem: PE %d runs goshmem %s, PE %d runs %s: %w", r, ep.Version, env.Rank, Version, ErrAsymmetric)
		}
		pe.cacheLine = max(pe.cacheLine, ep.CacheLine)
		pe.peers[r].rank, pe.peers[r].host, pe.peers[r].pid = r, ep.Host, ep.Pid
	}
	if pe.alloc, err = heap.NewAllocator(heap.HeapBase, cfg.HeapSize, uint64(pe.cacheLine)); err != nil {
		return nil, err
	}
	remote := false
	for _, ep := range eps {
		remote = remote || ep.Host != host
	}
	if remote {
		la, err := listenAddr(env.Rendezvous)
		if err != nil {
			return nil, err
		}
		if err := pe.startMesh(env.JobID, env.Key, la); err != nil {
			return nil, err
		}
	}
	if err := pe.exchangeSegments(ctx, env, eps); err != nil {
		return nil, err
	}
	// Everyone has mapped everyone (the listener and our descriptor can
	// go), and everyone with remote peers listens: swap the addresses.
	var mine2 []byte
	if pe.mesh != nil {
		mine2 = []byte(pe.mesh.Addr())
	}
	addrs, err := bc.Allgather(ctx, mine2)
	if err != nil {
		return nil, fmt.Errorf("shmem: PE %d waiting for peers to map segments: %w", env.Rank, err)
	}
	if remote {
		as := make([]string, len(addrs))
		for r, a := range addrs {
			as[r] = string(a)
		}
		if err := pe.connectMesh(ctx, as); err != nil {
			return nil, err
		}
	}
	pe.unixLn.Close()
	pe.unixLn = nil
	seg.CloseFD()
	pe.makeTeams()
	for r := range pe.peers {
		if p := &pe.peers[r]; p.conn != nil {
			go pe.watch(p, p.conn)
		}
	}
	return pe, nil
}

// The same-host segment exchange, over one Unix connection per pair
// (the higher rank dials the lower). Each side sends a hello, then its
// memfd with a MAC proving it holds the job key for this pair and these
// nonces; each side checks the other's MAC before mapping anything.
//
//	hello:  offset 0, 8 bytes  magic "GSHMSEG1"
//	        offset 8, 4 bytes  sender's rank, big-endian
//	        offset 12, 32 bytes sender's fresh nonce
//	fd msg: 32 bytes HMAC-SHA256(key, "goshmem-seg" | peer's nonce | own nonce | job id | own rank as 4 BE bytes),
//	        with the memfd attached (SCM_RIGHTS)
//
// Afterwards the connection carries one byte: 'B' (goodbye) at Finalize.
// EOF without it means the peer died.
const (
	segMagic   = "GSHMSEG1"
	segHelloSz = 8 + 4 + 32
	segBye     = 'B'
)

func segMAC(key, theirNonce, myNonce []byte, jobID string, rank int) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("goshmem-seg"))
	m.Write(theirNonce)
	m.Write(myNonce)
	m.Write([]byte(jobID))
	var r [4]byte
	binary.BigEndian.PutUint32(r[:], uint32(rank))
	m.Write(r[:])
	return m.Sum(nil)
}

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
	errc := make(chan error, len(lower)+len(higher)+1)
	var mu sync.Mutex // guards pe.peers[*].{mem,seg,conn,...} while the exchanges run
	setPeer := func(r int, c *net.UnixConn, seg *heap.Segment) {
		mu.Lock()
		defer mu.Unlock()
		p := &pe.peers[r]
		p.conn, p.seg, p.mem = c, seg, seg.Bytes()
		p.wake = heap.Ptr32(p.mem, heap.WakeOff)
	}
	for _, r := range lower {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			d := net.Dialer{Deadline: deadline}
			var c net.Conn
			var err error
			for {
				c, err = d.DialContext(ctx, "unix", eps[r].Sock)
				if err == nil || ctx.Err() != nil {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			if err != nil {
				errc <- fmt.Errorf("shmem: PE %d dialing same-host PE %d: %w", pe.rank, r, err)
				return
			}
			seg, err := pe.segHandshake(c.(*net.UnixConn), env, r, eps[r].SegSize, deadline)
			if err != nil {
				c.Close()
				errc <- err
				return
			}
			setPeer(r, c.(*net.UnixConn), seg)
		}(r)
	}
	if len(higher) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := make(map[int]bool, len(higher))
			for _, r := range higher {
				want[r] = true
			}
			pe.unixLn.SetDeadline(deadline)
			for len(want) > 0 {
				c, err := pe.unixLn.AcceptUnix()
				if err != nil {
					errc <- fmt.Errorf("shmem: PE %d waiting for same-host PEs %v: %w", pe.rank, keys(want), err)
					return
				}
				r, seg, err := pe.segAccept(c, env, eps, want, deadline)
				if err != nil {
					// A stranger or a bad peer: drop it, keep waiting for the real ones.
					fmt.Fprintf(os.Stderr, "goshmem: PE %d: refused a same-host connection: %v\n", pe.rank, err)
					c.Close()
					continue
				}
				delete(want, r)
				setPeer(r, c, seg)
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

func keys(m map[int]bool) []int {
	var k []int
	for r := range m {
		k = append(k, r)
	}
	return k
}

func (pe *PE) sendHello(c *net.UnixConn) ([]byte, error) {
	var h [segHelloSz]byte
	copy(h[:], segMagic)
	binary.BigEndian.PutUint32(h[8:], uint32(pe.rank))
	rand.Read(h[12:])
	if _, err := c.Write(h[:]); err != nil {
		return nil, err
	}
	return h[12:], nil
}

func readHello(c *net.UnixConn) (int, []byte, error) {
	var h [segHelloSz]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return 0, nil, err
	}
	if !bytes.Equal(h[:8], []byte(segMagic)) {
		return 0, nil, fmt.Errorf("bad magic: %w", ErrProtocol)
	}
	return int(binary.BigEndian.Uint32(h[8:])), h[12:], nil
}

// segSwap sends our descriptor and receives and checks the peer's.
func (pe *PE) segSwap(c *net.UnixConn, env boot.Env, r int, myNonce, theirNonce []byte, size uint64) (*heap.Segment, error) {
	if err := heap.SendFD(c, pe.seg.FD(), segMAC(env.Key, theirNonce, myNonce, env.JobID, pe.rank)); err != nil {
		return nil, err
	}
	buf := make([]byte, 64)
	fd, n, err := heap.RecvFD(c, buf)
	if err != nil {
		return nil, err
	}
	want := segMAC(env.Key, myNonce, theirNonce, env.JobID, r)
	if n != len(want) || !hmac.Equal(buf[:n], want) {
		heap.CloseFD(fd)
		return nil, fmt.Errorf("shmem: same-host PE %d failed the job-key check: %w", r, ErrAuth)
	}
	seg, err := heap.Map(fd, size)
	if err != nil {
		return nil, err
	}
	if !seg.CheckHeader(r) {
		seg.Close()
		return nil, fmt.Errorf("shmem: segment from PE %d has a bad header: %w", r, ErrProtocol)
	}
	return seg, nil
}

func (pe *PE) segHandshake(c *net.UnixConn, env boot.Env, r int, size uint64, deadline time.Time) (*heap.Segment, error) {
	c.SetDeadline(deadline)
	defer c.SetDeadline(time.Time{})
	myNonce, err := pe.sendHello(c)
	if err != nil {
		return nil, fmt.Errorf("shmem: PE %d hello to PE %d: %w", pe.rank, r, err)
	}
	got, theirNonce, err := readHello(c)
	if err != nil || got != r {
		return nil, fmt.Errorf("shmem: PE %d: bad hello from PE %d (says %d): %v: %w", pe.rank, r, got, err, ErrProtocol)
	}
	return pe.segSwap(c, env, r, myNonce, theirNonce, size)
}

func (pe *PE) segAccept(c *net.UnixConn, env boot.Env, eps []endpoint, want map[int]bool, deadline time.Time) (int, *heap.Segment, error) {
	c.SetDeadline(deadline)
	defer c.SetDeadline(time.Time{})
	r, theirNonce, err := readHello(c)
	if err != nil {
		return 0, nil, err
	}
	if !want[r] {
		return 0, nil, fmt.Errorf("unexpected hello from rank %d: %w", r, ErrProtocol)
	}
	myNonce, err := pe.sendHello(c)
	if err != nil {
		return 0, nil, err
	}
	seg, err := pe.segSwap(c, env, r, myNonce, theirNonce, eps[r].SegSize)
	return r, seg, err
}

// watch reads a same-host peer's liveness link: a goodbye byte marks a
// clean departure; EOF or an error without one means the peer died.
func (pe *PE) watch(p *peer, c *net.UnixConn) {
	var b [1]byte
	for {
		n, err := c.Read(b[:])
		if n == 1 && b[0] == segBye {
			p.departed.Store(true)
			continue
		}
		if err != nil {
			if !p.departed.Load() && pe.running() && !errors.Is(err, net.ErrClosed) {
				pe.markLost(fmt.Errorf("shmem: PE %d (pid %d, same host) died: %w", p.rank, p.pid, ErrPeerLost))
			}
			return
		}
	}
}

// closeProcess releases a launched PE's links and mappings. With unmap
// false (calls may still be inside the PE) the mappings stay.
func (pe *PE) closeProcess(unmap bool) error {
	for r := range pe.peers {
		p := &pe.peers[r]
		if p.conn != nil {
			p.conn.Write([]byte{segBye})
			p.conn.Close()
			p.conn = nil
		}
	}
	if pe.unixLn != nil {
		pe.unixLn.Close()
		pe.unixLn = nil
	}
	// The mesh's readers write into this PE's segment: they stop first.
	if pe.mesh != nil {
		pe.mesh.Close()
		pe.mesh = nil
	}
	var err error
	if pe.boot != nil {
		err = pe.boot.Close()
		pe.boot = nil
	}
	if !unmap {
		return err
	}
	for r := range pe.peers {
		p := &pe.peers[r]
		if p.seg != nil {
			p.seg.Close()
			p.seg = nil
		}
	}
	pe.seg.Close()
	return err
}
