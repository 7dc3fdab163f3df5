package shmem

import (
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"

	"github.com/goshmem/goshmem/heap"
	"github.com/goshmem/goshmem/internal/boot"
	"github.com/goshmem/goshmem/internal/engine"
	"github.com/goshmem/goshmem/netmesh"
)

// PE is one processing element of a job: this program's handle on its own
// symmetric heap and on every other PE. A *PE is safe for concurrent use
// by many goroutines.
type PE struct {
	rank, npes int
	cfg        Config
	host       string
	cacheLine  int  // agreed by all PEs: the allocator's minimum alignment
	oversub    bool // this host runs more PEs than it has CPUs: waits yield at once
	// asym: this PE's writes into mapped memory skip the store-load fence
	// of the wake handshake, which its sleepers' asymmetric fence makes up
	// for; asymSleep: its sleeps run that fence (chooseFence).
	asym, asymSleep bool
	noSpin          bool // testhook.NoSpin: waits sleep at once
	hasRemote       bool // some PE is on another host

	seg   *heap.Segment // this PE's own segment
	mem   []byte        // seg.Bytes()
	peers []peer        // indexed by rank; peers[rank] is this PE

	allocMu sync.Mutex // guards alloc
	alloc   *heap.Allocator
	allocs  uint64 // collective allocation calls so far (guarded by allocMu)

	th teamHeap // team blocks and the order of allocation calls (teamheap.go)

	world, shared *Team
	teamMu        sync.Mutex                 // guards teamUsed and teams
	teamUsed      [heap.MaxTeams / 64]uint64 // bit i set: team slot i is in use on this PE
	teams         map[int]*Team              // this PE's team on each slot in use

	locksMu sync.Mutex            // guards locks
	locks   map[uint64]*lockState // per lock word: orders this PE's goroutines

	lost   atomic.Pointer[error] // first reason the job is broken, if any
	leaked atomic.Bool           // Finalize left the memory mapped: calls were stuck inside
	met    atomic.Bool           // Finalize's barrier completed: this PE leaves with the others
	done   chan struct{}         // closed when the PE is closed and released
	_      [64]byte
	// gate is the lifecycle word (lifecycle.go): state and calls in
	// flight. fenceWord is the target of the full fence after plain
	// stores. A call writes both, so they share a cache line of their own.
	gate      atomic.Uint64
	fenceWord atomic.Uint64
	_         [48]byte

	// launcher names the engine that started the PE (Info().Launcher).
	launcher string

	// Process jobs only.
	boot   *boot.Client
	engine *engine.Job // under a foreign engine: the rendezvous (rank 0 serves it)
	// engineClient is the boot client under a foreign engine, for the
	// liveness watches (deferToEngine); nil otherwise.
	engineClient atomic.Pointer[boot.Client]
	unixLn       *net.UnixListener
	closers      []func()

	mesh *netmesh.Mesh // links to PEs on other hosts, if any
	// machinePEs is what the launcher says runs on this machine
	// (boot.EnvMachinePEs; 0 unknown): PEs in other network namespaces,
	// which neither the mapped heaps nor the addresses reveal.
	machinePEs int

	// Run jobs only.
	job *runJob
	// counted: the same-host fast paths count themselves in gate, since
	// this PE's Finalize unmaps (under Run); see tryEnter.
	counted bool

	ctxSeq  atomic.Uint64 // numbers contexts
	ctxOpen atomic.Int32  // contexts created and not closed, counted when hasRemote (context.go)

	// sleeper is this PE's wake descriptor, on which every wait sleeps
	// (wait.go); peers[rank].wake writes to it.
	sleeper *heap.Sleeper
}

// peer is this PE's route to one PE of the job.
type peer struct {
	rank int
	host string
	pid  int
	// mem is the peer's segment as mapped here: non-nil for same-host
	// peers and for this PE itself. A put is a copy into it.
	mem []byte
	// wake writes to the peer's wake descriptor (its eventfd): this PE's
	// own, a Run peer's own (shared), or a same-host peer's copy received
	// with its segment. Nil for a PE on another host.
	wake     *heap.Waker
	seg      *heap.Segment // the mapping this PE owns, if any
	link     remoteLink    // the TCP route to a PE on another host
	addr     string        // the remote peer's address
	conn     *net.UnixConn // same-host liveness link (process jobs)
	departed atomic.Bool   // the peer said goodbye
}

// MyPE is this PE's number, 0..NPEs()-1.
// It is -1 for a nil PE.
func (pe *PE) MyPE() int {
	if pe == nil {
		return -1
	}
	return pe.rank
}

// NPEs is the number of PEs in the job.
// It is 0 for a nil PE.
func (pe *PE) NPEs() int {
	if pe == nil {
		return 0
	}
	return pe.npes
}

// errNilPE is the error of a call on a nil *PE (an Init that failed).
func errNilPE(what string) error {
	return fmt.Errorf("shmem: %s on a nil PE: %w", what, ErrInvalid)
}

// Accessible reports whether target is a PE of the job that this PE can
// reach (shmem_pe_accessible).
func (pe *PE) Accessible(target int) bool {
	if pe == nil || target < 0 || target >= pe.npes || !pe.running() {
		return false
	}
	p := &pe.peers[target]
	return p.mem != nil || (p.link != nil && p.link.Err() == nil)
}

// Departed reports whether PE target has begun Finalize, as far as this
// PE has seen: target has set its bit in this PE's finalizing bitmap,
// after every store it made before its Finalize began (Finalize quiets
// first), so once Departed is true those stores are all here, and no
// later one comes. False for this PE itself, for a PE outside the job,
// once this PE's own Finalize has begun, and under SHMEM_DEBUG, whose
// Finalize sets no bits (docs/memory-model.md, "Barriers").
func (pe *PE) Departed(target int) bool {
	if pe == nil || target < 0 || target >= pe.npes || target == pe.rank || !pe.tryEnter() {
		return false
	}
	d := pe.finalizing(target)
	pe.leaveFast()
	return d
}

// SameHost reports whether target's heap is mapped here, so that Ptr
// gives direct loads and stores (true for MyPE). It is false once
// Finalize has begun.
func (pe *PE) SameHost(target int) bool {
	return pe != nil && target >= 0 && target < pe.npes && pe.running() && pe.peers[target].mem != nil
}

// peer returns the route to target, or ErrBadPE / ErrPeerLost. The
// caller has entered the PE (or is Finalize itself).
func (pe *PE) peer(target int) (*peer, error) {
	if uint(target) >= uint(pe.npes) {
		return nil, fmt.Errorf("shmem: PE %d: the job has PEs 0..%d: %w", target, pe.npes-1, ErrBadPE)
	}
	p := &pe.peers[target]
	if p.mem == nil && p.link == nil {
		if err := pe.brokenErr(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("shmem: PE %d on host %q has no route from PE %d on %q (no TCP link to it): %w",
			target, p.host, pe.rank, pe.host, ErrPeerLost)
	}
	return p, nil
}

// fullFence orders this PE's earlier plain stores before its later loads
// (a store-load barrier; sync/atomic read-modify-writes are sequentially
// consistent).
func (pe *PE) fullFence() { pe.fenceWord.Add(1) }

// chooseFence decides, once the PE knows its job's shape, which side of
// the wake handshake (docs/memory-model.md, "Sleeping and waking a
// sleeper") pays for
// the store-load fence. In a job on one host, on a CPU whose plain stores
// are release stores (heap.TSO), and where the kernel has the expedited
// global membarrier, the sleepers do (heap.AsymFence, once per sleep,
// after they announce themselves), and the writers, on every put, do
// not: a put into a same-host peer's memory is then its plain stores
// alone, and a put-with-signal's signal a release store, without the
// fence that stalls the writer until its stores have reached the other
// CPU. Otherwise, and for a process that could not register for the
// barrier or that sets GOSHMEM_WRITER_FENCE, every writer fences, as
// every writer with a TCP link does (netmesh's readers apply remote
// writes in this process, and sleeps there are frequent and short).
func (pe *PE) chooseFence() {
	if pe.hasRemote || !heap.TSO {
		return
	}
	registered, available := heap.RegisterAsymFence()
	pe.asymSleep = available
	pe.asym = registered && available && !pe.cfg.writerFence
}

// storeLoadFence is the fence a put skips in asym mode, for Quiet: after
// it every put of this PE's goroutine is visible to every PE, and its
// later loads come after that.
func (pe *PE) storeLoadFence() {
	if pe.asym {
		pe.fullFence()
	}
}

// notify wakes the PE behind p if any of its goroutines sleeps, after a
// plain store of n bytes at off into its memory. The fence makes the
// store visible before the sleep word is read; a sleeper sets its bit in
// the sleep word before its last check of the condition, so one of the
// two sees the other. In asym mode the sleeper's asymmetric fence does
// the fence's work (chooseFence).
func (pe *PE) notify(p *peer, off, n uint64) {
	if !pe.asym {
		pe.fullFence()
	}
	notifyAtomic(p, off, n)
}

// notifyAtomic is notify after an atomic read-modify-write or store,
// which is itself a full fence. Only a sleeper watching a range the
// write touches is woken, so writes to a PE whose goroutines sleep on
// other words cost no system call. The wake is one write to the PE's
// eventfd, whatever the sleeper's job shape (wait.go, sleep).
func notifyAtomic(p *peer, off, n uint64) {
	if heap.Watched(p.mem, off, n) {
		p.wake.Wake()
	}
}

// inFinalizing reports whether a write of n bytes at off touches the
// finalizing bitmap, whose bits wake every wait of their PE: a barrier
// or a floor exchange checks its writer's bit (announceFinalize) without
// watching the bitmap.
func inFinalizing(off, n uint64) bool {
	return off < heap.FinalizingOff+heap.FinalizingLen && off+n > heap.FinalizingOff
}

// wakeSelf wakes every sleeping wait of this PE, whatever it watches:
// after a change of the state or of the job's health, which every wait
// checks (alive) each time it is woken.
func (pe *PE) wakeSelf() { pe.peers[pe.rank].wake.Wake() }

// markLost records that the job is broken (a peer died, the job was
// ended) and wakes this PE's sleepers so that every wait sees it. Once
// the PE is closed its memory may be gone, and nobody sleeps on it.
func (pe *PE) markLost(err error) {
	pe.lost.CompareAndSwap(nil, &err)
	if !pe.hold() {
		return
	}
	pe.wakeSelf()
	pe.leave()
}

// checkRemoteGone marks the job broken when a remote peer's link is down
// while this PE still runs. netmesh reports a lost link (OnLost) but not
// a peer that said goodbye: a peer that finalized while this PE had not
// begun its own Finalize paired its final barrier with some other
// collective of this PE (in a correct program every PE is in Finalize
// by then), and no collective with it can complete. The mesh calls it
// when a peer says goodbye (OnGoodbye), and a wait when its nap ends;
// it costs one atomic load per remote peer.
func (pe *PE) checkRemoteGone() {
	if !pe.running() || pe.lost.Load() != nil {
		return
	}
	for r := range pe.peers {
		if l := pe.peers[r].link; l != nil {
			if err := l.Err(); err != nil {
				pe.markLost(fmt.Errorf("shmem: PE %d (remote) left while PE %d had not finalized: %v: %w", r, pe.rank, err, ErrPeerLost))
				return
			}
		}
	}
}

// brokenErr is the reason the job is broken, or nil.
func (pe *PE) brokenErr() error {
	if e := pe.lost.Load(); e != nil {
		return *e
	}
	return nil
}

// alive is nil while waits may go on: the job is not broken, and the PE
// is running or is Finalize's own barrier (leaving).
func (pe *PE) alive() error {
	if err := pe.brokenErr(); err != nil {
		return err
	}
	if st := pe.state(); st == stDraining || st == stClosed {
		return pe.finalizedErr()
	}
	return nil
}

// GlobalExit ends every PE of the job. Under a launcher the launcher exits
// with code; in a one-PE job the process exits with code; under Run, Run
// returns an *ExitError carrying code and this goroutine ends.
func (pe *PE) GlobalExit(code int) {
	if pe == nil {
		os.Exit(code)
	}
	if pe.job != nil {
		pe.job.globalExit(pe.rank, code) // does not return
	}
	if pe.boot != nil {
		pe.boot.Exit(code)
		if pe.engine != nil && pe.engine.Server() != nil {
			// Rank 0 serves the job: let the others hear the code
			// before this process, and its server, are gone.
			pe.engine.Server().WaitExitTold(engineFinishWait)
		}
		engine.BeforeExit()
	}
	os.Exit(code)
}
