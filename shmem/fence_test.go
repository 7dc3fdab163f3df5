package shmem_test

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/goshmem/goshmem/heap"
	"github.com/goshmem/goshmem/shmem"
)

// The fence mode (docs/memory-model.md, "Puts"): chosen in a job on one
// host where the build's stores are release stores and the kernel has
// the expedited global membarrier; off with pretend hosts (TCP links),
// and for the writers alone with GOSHMEM_WRITER_FENCE=1.
func TestFenceMode(t *testing.T) {
	registered, available := heap.RegisterAsymFence()
	mode := func(t *testing.T, opts ...shmem.Option) (asym, sleep [2]bool) {
		t.Helper()
		err := shmem.Run(2, func(pe *shmem.PE) error {
			asym[pe.MyPE()], sleep[pe.MyPE()] = shmem.FenceMode(pe)
			return nil
		}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return asym, sleep
	}
	on := heap.TSO && registered && available
	t.Run("one-host", func(t *testing.T) {
		asym, sleep := mode(t)
		want := [2]bool{on, on}
		if asym != want || sleep != [2]bool{heap.TSO && available, heap.TSO && available} {
			t.Fatalf("writers skip the fence %v, sleepers fence %v; want %v and %v (TSO %v, membarrier registered %v, available %v)",
				asym, sleep, want, heap.TSO && available, heap.TSO, registered, available)
		}
		t.Logf("fence mode %v (TSO %v, membarrier registered %v, available %v)", on, heap.TSO, registered, available)
	})
	t.Run("writer-fence", func(t *testing.T) {
		t.Setenv("GOSHMEM_WRITER_FENCE", "1")
		asym, sleep := mode(t)
		if asym != [2]bool{} || sleep != [2]bool{heap.TSO && available, heap.TSO && available} {
			t.Fatalf("GOSHMEM_WRITER_FENCE=1: writers skip the fence %v, sleepers fence %v", asym, sleep)
		}
	})
	t.Run("tcp", func(t *testing.T) {
		asym, sleep := mode(t, shmem.WithHosts([]string{"a", "b"}))
		if asym != [2]bool{} || sleep != [2]bool{} {
			t.Fatalf("pretend hosts: writers skip the fence %v, sleepers fence %v", asym, sleep)
		}
	})
	t.Run("bad-value", func(t *testing.T) {
		t.Setenv("GOSHMEM_WRITER_FENCE", "maybe")
		err := shmem.Run(1, func(*shmem.PE) error { return nil })
		if err == nil {
			t.Fatal("GOSHMEM_WRITER_FENCE=maybe: no error")
		}
	})
}

// Store buffering across Quiet: each of two PEs puts 1 into a word the
// other reads, runs Quiet, then reads the other's word. Quiet completes
// the put, so at least one of the two reads sees the other's 1. Without
// the fence in Quiet (in the fence mode a put is plain stores, and x86
// lets a later load pass them) both reads see 0 in some rounds. The
// rounds start together: each PE announces the round in its own word of
// a start object and spins until the other's announcement.
var quietStoreBuffering = register("quiet-store-buffering", func(pe *shmem.PE) error {
	const rounds = 20000
	if pe.NPEs() != 2 {
		return fmt.Errorf("want 2 PEs, have %d", pe.NPEs())
	}
	me, other := pe.MyPE(), 1-pe.MyPE()
	// x on PE 1 (PE 0 writes, PE 1 reads); y on PE 0 (PE 1 writes, PE 0
	// reads): each PE's store goes to the other's heap, its load reads
	// its own. Round i's word is word 8i, so nothing is reset.
	words, err := shmem.Malloc[uint64](pe, 8*(rounds+1)) // round i's word at 8i: a line of its own
	if err != nil {
		return err
	}
	start, err := shmem.Malloc[uint64](pe, 16) // word 8 on PE 0: PE 1's round; word 0 on PE 1: PE 0's
	if err != nil {
		return err
	}
	seen, err := shmem.Malloc[uint64](pe, rounds+1) // on PE 0: PE 1's reads
	if err != nil {
		return err
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	mine := words.Local()
	got := make([]uint64, rounds+1) // what this PE read in each round, plus 1
	peerStart := shmem.Ptr(start, other)
	ownStart := start.Local()
	if peerStart == nil {
		return pe.BarrierAll() // another host: nothing to race
	}
	for i := 1; i <= rounds; i++ {
		// Bring this round's own line into the cache, shared, so that
		// the load after Quiet is a hit unless the other's store has
		// taken the line away.
		_ = atomic.LoadUint64(&mine[8*i])
		atomic.StoreUint64(&peerStart[8*me], uint64(i))
		for atomic.LoadUint64(&ownStart[8*other]) < uint64(i) {
		}
		if err := shmem.P(words, 8*i, 1, other); err != nil {
			return err
		}
		if err := pe.Quiet(); err != nil {
			return err
		}
		got[i] = atomic.LoadUint64(&mine[8*i]) + 1
	}
	if me == 1 {
		if err := shmem.Put(seen, got, 0); err != nil {
			return err
		}
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	if me == 0 {
		seenBy1 := seen.Local()
		both := 0
		for i := 1; i <= rounds; i++ {
			if got[i] == 1 && seenBy1[i] == 1 { // each read 0, recorded as 0+1
				both++
			}
		}
		if both > 0 {
			return fmt.Errorf("in %d of %d rounds both PEs read 0 after their put and Quiet", both, rounds)
		}
	}
	return pe.BarrierAll()
})

func TestQuietStoreBuffering(t *testing.T) {
	if err := scenarios.Processes(2, "quiet-store-buffering", nil); err != nil {
		t.Fatal(err)
	}
	if err := shmem.Run(2, quietStoreBuffering); err != nil {
		t.Fatal(err)
	}
}

// Wake-ups in the fence mode, racing: PE 1 sleeps on a word (at the
// first look that finds it unset: GOSHMEM_TEST_NOSPIN) that PE 0 sets
// with P after a random spin, both starting each round together, so the
// writer's store, its look at the sleep word, the sleeper's announcement
// and its check fall in every order over the rounds. With every nap off
// (GOSHMEM_TEST_NONAP), a lost wake-up fails the job with ErrTimeout.
var wakeRace = register("wake-race", func(pe *shmem.PE) error {
	const rounds = 3000
	flag, err := shmem.Malloc[uint64](pe, 1) // on PE 1: the round PE 0 wrote
	if err != nil {
		return err
	}
	start, err := shmem.Malloc[uint64](pe, 1) // on PE 0: the round PE 1 has begun
	if err != nil {
		return err
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	me := pe.MyPE()
	rng := rand.New(rand.NewPCG(uint64(me), rounds))
	st := shmem.Ptr(start, 0)
	var sink uint64
	spin := func() {
		for n := rng.IntN(600); n > 0; n-- {
			sink += uint64(n)
		}
	}
	for i := uint64(1); i <= rounds; i++ {
		if me == 1 {
			atomic.StoreUint64(&st[0], i)
			spin()
			if err := shmem.WaitUntil(flag, 0, shmem.CmpGE, i); err != nil {
				return fmt.Errorf("round %d: %w", i, err)
			}
			continue
		}
		for atomic.LoadUint64(&st[0]) < i {
		}
		spin()
		if err := shmem.P(flag, 0, i, 1); err != nil {
			return err
		}
	}
	_ = sink
	return pe.BarrierAll()
})

func TestWakeRace(t *testing.T) {
	env := []string{"GOSHMEM_TEST_NONAP=1", "GOSHMEM_TEST_NOSPIN=1", "GOSHMEM_TIMEOUT=20s"}
	t.Run("processes", func(t *testing.T) {
		if err := scenarios.Processes(2, "wake-race", nil, env...); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("goroutines", func(t *testing.T) {
		t.Setenv("GOSHMEM_TEST_NONAP", "1")
		t.Setenv("GOSHMEM_TEST_NOSPIN", "1")
		if err := shmem.Run(2, wakeRace, shmem.WithTimeout(20e9)); err != nil {
			t.Fatal(err)
		}
	})
}
