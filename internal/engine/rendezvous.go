package engine

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/goshmem/goshmem/internal/boot"
	"github.com/goshmem/goshmem/internal/errs"
)

// Slurm rendezvous ports: rank 0 listens on the first free one of
// slurmPortTries ports derived from the job and step ids, in
// [slurmPortBase, slurmPortBase+slurmPortSpan), below Linux's ephemeral
// range (32768-60999) so that outgoing connections do not take them.
const (
	slurmPortBase  = 20000
	slurmPortSpan  = 10000
	slurmPortTries = 4
)

// pmiKeyPrefix names the KVS entry rank 0 puts its address under (with
// the generation appended: Init after Finalize publishes anew).
const pmiKeyPrefix = "goshmem-boot-g"

// Job is one Init's rendezvous under a foreign engine: the boot client
// every PE holds, and on rank 0 the boot server it runs for the job.
type Job struct {
	Rank, Size, LocalSize int
	JobID                 string
	Launcher              string
	Key                   []byte
	KeySource             string // "GOSHMEM_KEY" or the key file's path
	Addr                  string // the rendezvous address the PEs dial
	How                   string // how the address was found, for messages
	Client                *boot.Client

	srv      *boot.Server
	serveErr chan error
	pmi      bool // this Init used the PMI server
}

var generation sync.Mutex
var lastGen int

// NextGeneration numbers the process's Inits under a foreign engine: 1,
// then +1 per Init after Finalize (every PE counts alike, SPMD).
func NextGeneration() int {
	generation.Lock()
	defer generation.Unlock()
	lastGen++
	return lastGen
}

// pmiConn is the process's PMI connection. PMI-1 is initialized once per
// process: it is kept for a later Init after Finalize, and closed when
// the process exits.
var (
	pmiMu   sync.Mutex
	pmiConn *PMIClient
	pmiDone bool   // PMI was finalized: a later Init may not use it
	pmiAddr string // the address rank 0 published in generation 1
	pmiSize int
	pmiKVS  string
)

func pmiClient(ctx context.Context, e *Engine) (*PMIClient, error) {
	pmiMu.Lock()
	defer pmiMu.Unlock()
	if pmiConn != nil {
		return pmiConn, nil
	}
	c, err := DialPMI(ctx, e)
	if err != nil {
		return nil, err
	}
	pmiConn = c
	return c, nil
}

// BeforeExit ends the process's PMI session, if any, before the runtime
// exits the process itself (GlobalExit, or a failed job): Hydra then
// passes the exit code on instead of killing the job with SIGKILL for a
// PE that "died" without PMI finalize.
func BeforeExit() { finalizePMI() }

// finalizePMI ends the process's PMI session. Hydra and Slurm treat a
// PE whose PMI connection closes without finalize as failed (Hydra
// kills the job), and a Finalize may be the program's last call, so
// every Finalize does it; a later Init reuses generation 1's address.
func finalizePMI() {
	pmiMu.Lock()
	defer pmiMu.Unlock()
	if pmiConn != nil {
		pmiConn.Finalize()
		pmiConn, pmiDone = nil, true
	}
}

// Start joins the rendezvous of generation gen (1 for the first Init of
// the process, then +1 per Init after Finalize): rank 0 starts the boot
// server and publishes its address, and every PE, rank 0 included,
// dials it. The address comes from, in order: GOSHMEM_RENDEZVOUS; the
// PMI server's KVS; under plain srun, a port derived from the Slurm job
// and step ids on the step's first node (on one node too, so that the
// path a multi-node step needs is the one tested); an abstract Unix
// socket named by the user and the job when every PE is on this node. A job that fits none (Open MPI
// across nodes) is an error saying to set GOSHMEM_RENDEZVOUS.
func Start(ctx context.Context, e Engine, gen int, lookup func(string) (string, bool)) (*Job, error) {
	j := &Job{Rank: e.Rank, Size: e.Size, LocalSize: e.LocalSize, JobID: e.JobID, Launcher: e.Launcher}
	var err error
	if j.Key, j.KeySource, err = LoadKey(lookup); err != nil {
		return nil, err
	}
	var pmi *PMIClient
	reuse := "" // after PMI was finalized: generation 1's address
	if e.PMIFD >= 0 || e.PMIPort != "" {
		pmiMu.Lock()
		done, addr, size, kvs := pmiDone, pmiAddr, pmiSize, pmiKVS
		pmiMu.Unlock()
		if done {
			reuse, j.Size = addr, size
			if j.JobID == "" {
				j.JobID = "pmi-" + kvs
			}
		} else {
			if pmi, err = pmiClient(ctx, &e); err != nil {
				return nil, err
			}
			j.Rank, j.Size = pmi.Rank, pmi.Size
			if j.JobID == "" {
				j.JobID = "pmi-" + pmi.KVSName
			}
			pmiMu.Lock()
			pmiSize, pmiKVS = pmi.Size, pmi.KVSName
			pmiMu.Unlock()
		}
		if j.Size == 1 {
			j.LocalSize = 1
		}
	}
	j.JobID += ".g" + strconv.Itoa(gen)
	if j.Size == 1 {
		return j, nil // a job of one PE: no rendezvous, Client stays nil
	}
	single := j.LocalSize == j.Size

	// Where to listen (rank 0) and what to dial (everyone).
	var listen []string // candidates for rank 0, "unix:"-prefixed or host:port
	var dial []string   // what the others dial, tried in turn
	switch {
	case reuse != "":
		j.How = "the address generation 1 had (PMI is finalized after Finalize)"
		listen, dial = []string{reuse}, []string{reuse}
		if _, ok := cutUnix(reuse); !ok {
			if _, port, err := net.SplitHostPort(reuse); err == nil {
				listen = []string{":" + port}
			}
		}
	case e.Rendezvous != "":
		j.How = "GOSHMEM_RENDEZVOUS"
		if _, _, err := net.SplitHostPort(e.Rendezvous); err != nil {
			return nil, fmt.Errorf("engine: GOSHMEM_RENDEZVOUS=%q is not host:port: %w", e.Rendezvous, errs.Invalid)
		}
		listen, dial = []string{e.Rendezvous}, []string{e.Rendezvous}
	case pmi != nil:
		j.How = "the PMI server (" + e.Launcher + ")"
		if single {
			listen = []string{"127.0.0.1:0"}
		} else {
			listen = []string{":0"}
		}
	case e.Launcher == Slurm:
		j.How = "a port derived from the Slurm job and step on node " + e.FirstNode
		for _, p := range slurmPorts(j.JobID) {
			listen = append(listen, ":"+strconv.Itoa(p))
			dial = append(dial, net.JoinHostPort(e.FirstNode, strconv.Itoa(p)))
		}
		if j.Rank == 0 && e.NodeID != 0 {
			return nil, fmt.Errorf("engine: Slurm put rank 0 on node %d, not on the step's first node %s where the others look for it (set GOSHMEM_RENDEZVOUS): %w",
				e.NodeID, e.FirstNode, errs.Invalid)
		}
	case single:
		j.How = "an abstract Unix socket (every PE is on this node)"
		name := boot.UnixPrefix + unixName(j.JobID)
		listen, dial = []string{name}, []string{name}
	default:
		return nil, fmt.Errorf("engine: %s started %d PEs over more than one node (%d here) and serves no PMI-1 to exchange addresses: set GOSHMEM_RENDEZVOUS=host:port to an address of rank 0's node: %w",
			e.Launcher, j.Size, j.LocalSize, errs.Invalid)
	}

	if j.Rank == 0 {
		addr, err := j.serve(listen, pmi != nil && !single)
		if err != nil {
			return nil, err
		}
		if pmi != nil && e.Rendezvous == "" {
			dial = []string{addr}
			if err := pmi.Put(ctx, pmiKeyPrefix+strconv.Itoa(gen), addr); err != nil {
				j.stopServer()
				return nil, err
			}
		}
	}
	if pmi != nil && e.Rendezvous == "" {
		if err := pmi.Barrier(ctx); err != nil {
			j.stopServer()
			return nil, err
		}
		if j.Rank != 0 {
			addr, err := pmi.Get(ctx, pmiKeyPrefix+strconv.Itoa(gen))
			if err != nil {
				return nil, err
			}
			dial = []string{addr}
		}
	}
	j.Addr = dial[0]
	if pmi != nil {
		pmiMu.Lock()
		pmiAddr = j.Addr
		pmiMu.Unlock()
		j.pmi = true
	}
	c, at, err := dialRetry(ctx, dial, j.JobID, j.Key, j.Rank, j.Size)
	if err != nil {
		j.stopServer()
		return nil, fmt.Errorf("engine: PE %d of job %s joining the rendezvous at %s (found through %s; key from %s): %w",
			j.Rank, j.JobID, j.Addr, j.How, j.KeySource, err)
	}
	j.Client, j.Addr = c, at
	return j, nil
}

// unixName is the abstract socket name of a single-node job: the user
// and the job, hashed when long. Abstract sockets vanish with their
// process, so a crash leaves nothing behind.
func unixName(jobID string) string {
	id := jobID
	if len(id) > 64 {
		h := sha256.Sum256([]byte(jobID))
		id = hex.EncodeToString(h[:16])
	}
	return "@goshmem-rdv-" + strconv.Itoa(os.Geteuid()) + "-" + id
}

// slurmPorts derives the candidate ports of a Slurm step.
func slurmPorts(jobID string) []int {
	h := sha256.Sum256([]byte(jobID))
	p := int(binary.BigEndian.Uint32(h[:4]) % slurmPortSpan)
	out := make([]int, slurmPortTries)
	for i := range out {
		out[i] = slurmPortBase + (p+i)%slurmPortSpan
	}
	return out
}

// serve starts rank 0's boot server on the first candidate it can listen
// on and returns the address to publish. wildcard: the listener is on
// every interface and the published address is this node's own.
func (j *Job) serve(listen []string, wildcard bool) (string, error) {
	var ln net.Listener
	var err error
	for _, a := range listen {
		if name, ok := cutUnix(a); ok {
			ln, err = net.Listen("unix", name)
		} else {
			ln, err = net.Listen("tcp", a)
		}
		if err == nil {
			break
		}
	}
	if err != nil {
		return "", fmt.Errorf("engine: rank 0 cannot serve the rendezvous (tried %v): %w", listen, err)
	}
	addr := ln.Addr().String()
	if _, ok := cutUnix(listen[0]); ok {
		addr = listen[0]
	} else if wildcard {
		ip, err := NodeIP()
		if err != nil {
			ln.Close()
			return "", err
		}
		_, port, _ := net.SplitHostPort(addr)
		addr = net.JoinHostPort(ip, port)
	}
	j.srv = boot.NewServer(ln, j.JobID, j.Key, j.Size)
	j.serveErr = make(chan error, 1)
	go func() { j.serveErr <- j.srv.Serve(context.Background()) }()
	return addr, nil
}

func cutUnix(a string) (string, bool) {
	if len(a) > len(boot.UnixPrefix) && a[:len(boot.UnixPrefix)] == boot.UnixPrefix {
		return a[len(boot.UnixPrefix):], true
	}
	return "", false
}

// NodeIP is an address of this node that others can reach: the first
// non-loopback address the host name resolves to, else the first
// global unicast address of an interface that is up.
func NodeIP() (string, error) {
	if name, err := os.Hostname(); err == nil {
		if ips, err := net.LookupIP(name); err == nil {
			for _, ip := range ips {
				if !ip.IsLoopback() && ip.To4() != nil {
					return ip.String(), nil
				}
			}
		}
	}
	ifs, _ := net.Interfaces()
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagUp == 0 || ifi.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifi.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.IsGlobalUnicast() {
				return ipn.IP.String(), nil
			}
		}
	}
	return "", fmt.Errorf("engine: this node has no address other nodes could reach (set GOSHMEM_RENDEZVOUS): %w", errs.Invalid)
}

// dialRetry dials the candidates in turn until one serves this job or
// ctx ends. A refused connection or another job's server (the port was
// taken, or rank 0 is not listening yet) is retried; a refused key is
// not.
func dialRetry(ctx context.Context, addrs []string, jobID string, key []byte, rank, size int) (*boot.Client, string, error) {
	delay := 5 * time.Millisecond
	var last error
	for {
		for _, a := range addrs {
			c, err := boot.Dial(ctx, a, jobID, key, rank, size)
			if err == nil {
				return c, a, nil
			}
			if !retryable(err) || ctx.Err() != nil {
				if last != nil && ctx.Err() != nil {
					return nil, "", fmt.Errorf("%w (earlier: %v)", err, last)
				}
				return nil, "", err
			}
			last = err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, "", fmt.Errorf("engine: no server of this job answered before the timeout: %w: %w", last, errs.Timeout)
		case <-t.C:
		}
		delay = min(2*delay, 200*time.Millisecond)
	}
}

func retryable(err error) bool {
	return errors.Is(err, boot.ErrOtherJob) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EHOSTUNREACH)
}

// Server is rank 0's boot server (nil on other ranks).
func (j *Job) Server() *boot.Server { return j.srv }

// Finish ends this Init's rendezvous on rank 0 after its own client said
// goodbye: it waits, at most wait, until every other rank has said
// goodbye too (they still need the server until then), and stops the
// server. Other ranks have nothing to do.
//
// Every rank then finalizes its PMI session, if it has one.
func (j *Job) Finish(wait time.Duration) {
	defer finalizePMI()
	if j.srv == nil {
		return
	}
	t := time.NewTimer(wait)
	select {
	case <-j.srv.FirstGenerationDone():
	case <-t.C:
	}
	t.Stop()
	j.stopServer()
}

// Abandon stops rank 0's server at once (a failed Init).
func (j *Job) Abandon() { j.stopServer() }

func (j *Job) stopServer() {
	if j.srv != nil {
		j.srv.Close()
		<-j.serveErr
		j.srv = nil
	}
}
