package shmem

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/klauspost/cpuid/v2"

	"github.com/goshmem/goshmem/heap"
	"github.com/goshmem/goshmem/internal/testhook"
)

// MaxRunPEs bounds Run's job size.
const MaxRunPEs = 1024

// runJob is the state Run's PEs share: which PE failed first and why.
type runJob struct {
	pes  []*PE
	mu   sync.Mutex
	err  error // the first error of any PE, or an *ExitError
	exit []bool
}

// Run starts n PEs as goroutines of this process, calls fn on each, and
// returns the first error any of them returned (or an *ExitError after
// GlobalExit). A PE that returns nil without calling Finalize is
// finalized by Run. When one PE fails, the others' waits end with
// ErrPeerLost instead of hanging. PEs on the same pretend host (WithHosts;
// by default all) map each other's heaps.
func Run(n int, fn func(pe *PE) error, opts ...Option) error {
	cfg, err := loadConfig(opts)
	if err != nil {
		return err
	}
	if n < 1 || n > MaxRunPEs {
		return fmt.Errorf("shmem: Run of %d PEs (1..%d): %w", n, MaxRunPEs, ErrInvalid)
	}
	if fn == nil {
		return fmt.Errorf("shmem: Run with a nil function: %w", ErrInvalid)
	}
	hosts := cfg.Hosts
	if hosts == nil {
		hosts = make([]string, n)
		id, err := hostIdentity()
		if err != nil {
			return err
		}
		for i := range hosts {
			hosts[i] = id
		}
	}
	if len(hosts) != n {
		return fmt.Errorf("shmem: WithHosts gives %d hosts for %d PEs: %w", len(hosts), n, ErrInvalid)
	}
	job := &runJob{pes: make([]*PE, n), exit: make([]bool, n)}
	segs := make([]*heap.Segment, 0, n)
	defer func() {
		for _, pe := range job.pes {
			if pe != nil && pe.leaked.Load() {
				// Some call never left a PE (Finalize timed out waiting
				// for it): unmapping could fault it. Leave the memory.
				return
			}
		}
		for _, s := range segs {
			s.Close()
		}
		// The wake descriptors too, now that no PE can write to another's.
		for _, pe := range job.pes {
			if pe != nil {
				pe.peers[pe.rank].wake.Close()
				pe.sleeper.Close()
			}
		}
	}()
	line := cacheLine()
	for r := 0; r < n; r++ {
		seg, err := heap.Create(heap.HeapBase + cfg.HeapSize)
		if err != nil {
			return err
		}
		segs = append(segs, seg)
		seg.WriteHeader(r, os.Getpid())
		pe, err := newPE(r, n, cfg, hosts[r], seg, line)
		if err != nil {
			return err
		}
		pe.job = job
		pe.counted = true // Run unmaps the segments at its end
		job.pes[r] = pe
	}
	for _, pe := range job.pes {
		for r, other := range job.pes {
			if r == pe.rank {
				continue
			}
			pe.peers[r] = peer{rank: r, host: hosts[r], pid: os.Getpid()}
			if hosts[r] == hosts[pe.rank] {
				// The other PE's own Waker, shared: Run closes it at its end.
				pe.peers[r].mem, pe.peers[r].wake = other.mem, other.peers[r].wake
			}
		}
	}
	defer func() {
		for _, pe := range job.pes {
			if pe.mesh != nil {
				pe.mesh.Close()
			}
		}
	}()
	if err := job.connect(cfg); err != nil {
		return err
	}
	for _, pe := range job.pes {
		pe.makeTeams()
	}
	job.pes[0].startInfo()
	var wg sync.WaitGroup
	for _, pe := range job.pes {
		wg.Add(1)
		go job.runPE(&wg, pe, fn)
	}
	wg.Wait()
	return job.err
}

// connect gives the PEs on different pretend hosts their TCP links over
// loopback, exactly as launched PEs on different hosts get theirs.
func (j *runJob) connect(cfg Config) error {
	var remote []*PE
	for _, pe := range j.pes {
		for r := range pe.peers {
			if pe.peers[r].mem == nil && r != pe.rank {
				remote = append(remote, pe)
				break
			}
		}
	}
	if len(remote) == 0 {
		return nil
	}
	key := make([]byte, 32)
	rand.Read(key)
	jobID := fmt.Sprintf("run-%d-%x", os.Getpid(), key[:4])
	for _, pe := range remote {
		if err := pe.startMesh(jobID, key, "127.0.0.1:0"); err != nil {
			return err
		}
	}
	addrs := make([]string, len(j.pes))
	for _, pe := range remote {
		addrs[pe.rank] = pe.mesh.Addr()
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	errc := make(chan error, len(remote))
	for _, pe := range remote {
		go func() { errc <- pe.connectMesh(ctx, addrs) }()
	}
	var first error
	for range remote {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (j *runJob) runPE(wg *sync.WaitGroup, pe *PE, fn func(*PE) error) {
	defer wg.Done()
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("shmem: PE %d panicked: %v\n%s", pe.rank, r, debug.Stack())
			}
		}()
		return fn(pe)
	}()
	if err != nil {
		j.fail(pe.rank, err)
		pe.abandon()
	} else if err := pe.Finalize(); err != nil && !errors.Is(err, ErrFinalized) {
		j.fail(pe.rank, err)
	}
	// A Finalize begun by another goroutine of the PE may still run: the
	// segments stay mapped until it is done.
	<-pe.done
}

// fail records err as PE rank's and breaks every other PE's waits.
func (j *runJob) fail(rank int, err error) {
	j.mu.Lock()
	if j.err == nil {
		j.err = err
	}
	j.mu.Unlock()
	lost := fmt.Errorf("shmem: PE %d failed (%v): %w", rank, err, ErrPeerLost)
	for _, pe := range j.pes {
		if pe.rank != rank {
			pe.markLost(lost)
		}
	}
}

// departed is called when PE rank has finalized; met says whether its
// final barrier completed. A PE that still runs (has not begun its own
// Finalize) had its barrier pair with rank's final one, a mismatched
// collective: no collective with rank can complete now, so its waits end
// with ErrPeerLost. (A PE's Finalize completes only once every PE has
// entered the final barrier, so in a correct program no PE still runs.)
// A rank whose final barrier failed breaks the waits of every PE still
// open, Finalize's own barrier included: rank will not take part in it.
// Launched PEs notice the same through the liveness link (watch).
func (j *runJob) departed(rank int, met bool) {
	for _, pe := range j.pes {
		if pe.rank == rank {
			continue
		}
		switch {
		case !met:
			pe.markLost(fmt.Errorf("shmem: PE %d left without completing its Finalize: %w", rank, ErrPeerLost))
		case pe.running():
			pe.markLost(fmt.Errorf("shmem: PE %d finalized while PE %d had not (mismatched collective calls): %w", rank, pe.rank, ErrPeerLost))
		}
	}
}

// globalExit ends the job with code and the calling goroutine.
func (j *runJob) globalExit(rank, code int) {
	j.mu.Lock()
	if j.err == nil {
		j.err = &ExitError{PE: rank, Code: code}
	}
	j.exit[rank] = true
	j.mu.Unlock()
	lost := fmt.Errorf("shmem: PE %d called GlobalExit(%d): %w", rank, code, ErrPeerLost)
	for _, pe := range j.pes {
		if pe.rank != rank {
			pe.markLost(lost)
		}
	}
	j.pes[rank].abandon()
	runtime.Goexit()
}

// cacheLine is the allocator's minimum alignment: the cache line cpuid
// reports, at least 64 bytes.
func cacheLine() int {
	return max(cpuid.CPU.CacheLine, 64)
}

// newPE builds a PE around its own segment; peers other than itself are
// filled in by the caller.
func newPE(rank, npes int, cfg Config, host string, seg *heap.Segment, line int) (*PE, error) {
	a, err := heap.NewAllocator(heap.HeapBase, cfg.HeapSize, uint64(line))
	if err != nil {
		return nil, err
	}
	pe := &PE{rank: rank, npes: npes, cfg: cfg, host: host, cacheLine: line, seg: seg, mem: seg.Bytes(), alloc: a}
	if pe.sleeper, err = heap.NewSleeper(); err != nil {
		return nil, err
	}
	w, err := pe.sleeper.Waker(heap.Ptr32(pe.mem, heap.WakeOff))
	if err != nil {
		pe.sleeper.Close()
		return nil, err
	}
	pe.noSpin = testhook.NoSpin()
	pe.done = make(chan struct{})
	pe.peers = make([]peer, npes)
	pe.peers[rank] = peer{rank: rank, host: host, pid: os.Getpid(), mem: pe.mem, wake: w}
	return pe, nil
}

// makeTeams creates the world team (slot 0) and the shared team (slot 1:
// the shared teams of different hosts are disjoint, so they share the
// slot number).
func (pe *PE) makeTeams() {
	all := make([]int, pe.npes)
	var local []int
	for r := range all {
		all[r] = r
		if pe.peers[r].mem != nil {
			local = append(local, r)
		}
	}
	pe.world = newTeam(pe, 0, all)
	pe.world.predefined = true
	pe.oversub = len(local) > pe.machineCPUs()
	pe.chooseFence()
	pe.shared = newTeam(pe, 1, local)
	pe.shared.predefined = true
	pe.useSlot(pe.world)
	pe.useSlot(pe.shared)
}
