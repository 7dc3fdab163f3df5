package shmem

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"

	"github.com/goshmem/goshmem/heap"
	"github.com/goshmem/goshmem/internal/boot"
	"github.com/goshmem/goshmem/internal/engine"
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

// engineFinishWait bounds how long rank 0, which serves a foreign
// engine's job, waits at Finalize for the other ranks' goodbyes, and at
// GlobalExit for the others to be told.
const engineFinishWait = 10 * time.Second

var mh codec.MsgpackHandle

func encodeMsgpack(v any) ([]byte, error) {
	var out []byte
	err := codec.NewEncoderBytes(&out, &mh).Encode(v)
	return out, err
}

func decodeMsgpack(b []byte, v any) error {
	return codec.NewDecoderBytes(b, &mh).Decode(v)
}

// Init joins the job the environment describes: goshrun's variables;
// else Open MPI's mpirun, MPICH's mpiexec.hydra (or another PMI-1
// server), or Slurm's srun (internal/engine detects them, in that
// order); or none at all, which starts a job of one PE so that
// `go run ./prog` works. An environment that names a job of several PEs
// that cannot be joined is an error, never a job of one PE. Init after
// Finalize starts afresh.
//
// Under a foreign engine rank 0 serves the job's rendezvous, and the
// runtime ends the job's PEs itself (see docs/launching.md): when a PE
// is lost, every other PE prints why and exits with status 1; when a PE
// calls GlobalExit(code), every PE exits with code.
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
	launcher := env.Launcher
	if launched && launcher == "" {
		launcher = boot.LauncherGoshrun
	}
	if !launched {
		eng, found, err := engine.Detect(os.LookupEnv)
		if err != nil {
			return nil, fmt.Errorf("shmem: %w", err)
		}
		launcher = "none"
		if found {
			launcher = eng.Launcher
		}
		if found && eng.Size != 1 {
			pe, err := joinEngine(cfg, eng, host)
			if err != nil || pe != nil {
				return pe, err
			}
			// The PMI server said the job has one PE.
		}
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
		pe.launcher = launcher
		pe.makeTeams()
		pe.startInfo()
		return pe, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	bc, err := boot.Dial(ctx, env.Rendezvous, env.JobID, env.Key, env.Rank, env.Size)
	if err != nil {
		return nil, fmt.Errorf("shmem: PE %d joining job %s at %s: %w", env.Rank, env.JobID, env.Rendezvous, err)
	}
	pe, err := joinJob(cfg, env, host, bc)
	if err != nil {
		return nil, err
	}
	pe.launcher = launcher
	pe.startInfo()
	return pe, nil
}

// joinEngine is Init under a foreign engine: the rendezvous (rank 0
// serves it), then the same join as under goshrun, then a watch that
// ends this PE when the job fails. It returns a nil PE and nil error
// when the engine's PMI server says the job has one PE.
func joinEngine(cfg Config, eng engine.Engine, host string) (*PE, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	ej, err := engine.Start(ctx, eng, engine.NextGeneration(), os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("shmem: %w", err)
	}
	if ej.Client == nil {
		return nil, nil
	}
	env := boot.Env{Rank: ej.Rank, Size: ej.Size, JobID: ej.JobID, Key: ej.Key, Rendezvous: ej.Addr,
		Launcher: ej.Launcher, MachinePEs: ej.LocalSize}
	if env.MachinePEs > env.Size {
		env.MachinePEs = 0
	}
	pe, err := joinJob(cfg, env, host, ej.Client)
	if err != nil {
		ej.Abandon()
		return nil, err
	}
	pe.launcher, pe.engine = ej.Launcher, ej
	pe.engineClient.Store(ej.Client)
	go pe.superviseEngine(ej)
	pe.startInfo()
	return pe, nil
}

// superviseEngine does under a foreign engine what goshrun does under
// goshrun: when the job fails it ends this PE. mpirun ends the other
// ranks itself when one exits non-zero, but mpiexec.hydra and srun (by
// default) do not, so the runtime does, within the time the boot server
// takes to notice a dropped connection (at once for a dead process).
// It exits at once rather than wake the program's waits first: the exit
// status is then the job's (GlobalExit's code, or 1), not whatever the
// program does with an ErrPeerLost.
func (pe *PE) superviseEngine(ej *engine.Job) {
	c := ej.Client
	<-c.Trouble()
	w := c.Troubled()
	switch {
	case w.Closed:
		return // Finalize
	case w.Exit:
		if srv := ej.Server(); srv != nil {
			srv.WaitExitTold(engineFinishWait) // rank 0 serves: the others hear it first
		}
		fmt.Fprintf(os.Stderr, "goshmem: PE %d: PE %d called GlobalExit(%d); exiting with %d\n", pe.rank, w.Rank, w.Code, w.Code)
		engine.BeforeExit()
		os.Exit(w.Code)
	case w.Lost:
		fmt.Fprintf(os.Stderr, "goshmem: PE %d: PE %d was lost (%v); exiting with status 1\n", pe.rank, w.Rank, w.Err)
	default:
		fmt.Fprintf(os.Stderr, "goshmem: PE %d: PE 0, which serves the job's rendezvous, is gone (%v); exiting with status 1\n", pe.rank, w.Err)
	}
	engine.BeforeExit()
	os.Exit(1)
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
// bc is the PE's boot client, already joined; joinJob owns it.
func joinJob(cfg Config, env boot.Env, host string, bc *boot.Client) (pe *PE, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
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

// engineDefer is how long a same-host peer's death waits for the
// engine supervisor under a foreign engine (see deferToEngine).
const engineDefer = time.Second

// deferToEngine is called by a same-host liveness watch that saw a peer
// die. Under a foreign engine the boot server sees the same death (or
// the dying peer's GlobalExit) and superviseEngine ends this process
// with the job's status; waking the program's waits first would let the
// program pick its own. So it waits, briefly, for the supervisor.
func (pe *PE) deferToEngine(c *boot.Client) {
	if c == nil {
		return
	}
	t := time.NewTimer(engineDefer)
	defer t.Stop()
	select {
	case <-c.Trouble():
		// The supervisor exits the process; if the trouble was this PE's
		// own Close, there is nothing to wait for.
		if !c.Troubled().Closed {
			<-t.C
		}
	case <-t.C:
	}
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
			if pe.met.Load() {
				p.conn.Write([]byte{segBye})
			}
			p.conn.Close()
			p.conn = nil
		}
	}
	if pe.unixLn != nil {
		pe.unixLn.Close()
		pe.unixLn = nil
	}
	// The mesh's readers write into this PE's segment: they stop first.
	// Without a completed Finalize barrier the links end without
	// goodbyes, so that remote peers still in theirs see this PE lost
	// (as same-host ones see a liveness link end without segBye).
	if pe.mesh != nil {
		if pe.met.Load() {
			pe.mesh.Close()
		} else {
			pe.mesh.Abort()
		}
		pe.mesh = nil
	}
	var err error
	if pe.boot != nil {
		err = pe.boot.Close()
		pe.boot = nil
	}
	if pe.engine != nil {
		// Rank 0 serves the job: it stays until every rank has said
		// goodbye (or the timeout), or they would see it vanish.
		pe.engine.Finish(min(pe.cfg.Timeout, engineFinishWait))
		pe.engine = nil
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
	// The wake descriptors last. A same-host put that raced Finalize
	// (not counted in the gate) may still be waking a peer: Close waits
	// for it, and a later Wake writes nothing.
	for r := range pe.peers {
		pe.peers[r].wake.Close()
	}
	pe.sleeper.Close()
	return err
}
