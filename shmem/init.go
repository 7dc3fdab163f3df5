package shmem

import (
	"context"
	"fmt"
	"net"
	"os"

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
	sock := segSockName(env.JobID, env.Rank)
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
			self.closeProcess(false)
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
		pe.machinePEs = env.MachinePEs
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

// closeProcess releases a launched PE's links and mappings. At Finalize
// (retire) the mappings are retired rather than unmapped: a call still
// stuck inside the PE, or a program (or ring, or collective) still
// reading through a Local or Ptr slice, then touches private memory
// instead of faulting. A failed Init, which handed out no slice, unmaps.
func (pe *PE) closeProcess(retire bool) error {
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
	end := (*heap.Segment).Close
	if retire {
		end = (*heap.Segment).Retire
	}
	for r := range pe.peers {
		p := &pe.peers[r]
		if p.seg != nil {
			if rerr := end(p.seg); rerr != nil && err == nil {
				err = rerr
			}
			p.seg = nil
		}
	}
	if rerr := end(pe.seg); rerr != nil && err == nil {
		err = rerr
	}
	return err
}
