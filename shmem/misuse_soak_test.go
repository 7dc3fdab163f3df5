package shmem_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// The misuse soak: several goroutines per PE make random one-sided
// calls with random, often bad, arguments, and one of them finalizes the
// PE at a random point while the others go on. Nothing may panic, fault
// or hang, and every error must wrap a sentinel. The seed is printed;
// GOSHMEM_MISUSE_SEED replays it (each goroutine's calls are a function
// of the seed, its PE and its number) and GOSHMEM_MISUSE_TIME sets how
// long each route runs (default 1 s; the soak is 60s).

var sentinels = []error{shmem.ErrBadPE, shmem.ErrOutOfBounds, shmem.ErrHeapExhausted, shmem.ErrAsymmetric,
	shmem.ErrPeerLost, shmem.ErrTimeout, shmem.ErrFinalized, shmem.ErrAuth, shmem.ErrProtocol, shmem.ErrInvalid}

func wrapsSentinel(err error) bool {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

func misuseSoakSettings() (seed uint64, d time.Duration, err error) {
	seed = uint64(time.Now().UnixNano())
	if v := os.Getenv("GOSHMEM_MISUSE_SEED"); v != "" {
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			return 0, 0, err
		}
	}
	d = time.Second
	if v := os.Getenv("GOSHMEM_MISUSE_TIME"); v != "" {
		if d, err = time.ParseDuration(v); err != nil {
			return 0, 0, err
		}
	}
	return seed, d, nil
}

var _ = register("misuse-soak", func(pe *shmem.PE) error {
	seed, d, err := misuseSoakSettings()
	if err != nil {
		return err
	}
	me, np := pe.MyPE(), pe.NPEs()
	s, err := shmem.Malloc[int64](pe, 4)
	if err != nil {
		return err
	}
	lock, err := shmem.Malloc[int64](pe, 1)
	if err != nil {
		return err
	}
	sig, err := shmem.Malloc[uint64](pe, 1)
	if err != nil {
		return err
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	const goroutines = 3
	deadline := time.Now().Add(d)
	errc := make(chan error, goroutines+1)
	var calls atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(me*(goroutines+1)+g)))
			if err := soakCalls(pe, rng, s, lock, sig, np, &calls, deadline); err != nil {
				errc <- fmt.Errorf("seed %d, PE %d, goroutine %d: %w", seed, me, g, err)
			}
		}()
	}
	// The finalizer: once the others have made a random number of calls
	// between them (or at the deadline), it finalizes the PE under them.
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, uint64(me*(goroutines+1)+goroutines)))
		at := int64(rng.IntN(100000))
		for calls.Load() < at && time.Now().Before(deadline) {
			runtime.Gosched()
		}
		if err := pe.Finalize(); err != nil && !errors.Is(err, shmem.ErrFinalized) {
			errc <- fmt.Errorf("seed %d, PE %d: Finalize: %w", seed, me, err)
		}
	}()
	wg.Wait()
	close(errc)
	for err := range errc {
		return err
	}
	return nil
})

// soakCalls makes random calls until the deadline, counting them in
// calls. Once the PE is finalized (ErrFinalized seen), every call must
// fail.
func soakCalls(pe *shmem.PE, rng *rand.Rand, s, lock shmem.Sym[int64], sig shmem.Sym[uint64], np int, calls *atomic.Int64, deadline time.Time) error {
	pick := func(xs ...int) int { return xs[rng.IntN(len(xs))] }
	target := func() int { return pick(-1, 0, 1, np-1, np, math.MaxInt, rng.IntN(np)) }
	index := func() int { return pick(-1, 0, 3, 4, math.MinInt, rng.IntN(4)) }
	stride := func() int { return pick(-1, 0, 1, 2, 3, math.MaxInt/2, math.MaxInt) }
	count := func() int { return pick(-1, 0, 1, 2, 5, math.MaxInt/8, math.MaxInt) }
	sym := func() shmem.Sym[int64] {
		switch rng.IntN(6) {
		case 0:
			return shmem.Sym[int64]{}
		case 1:
			return s.Slice(index(), index())
		}
		return s
	}
	buf := make([]int64, pick(0, 1, 4, 5))
	nbiSrc := make([]int64, pick(0, 1, 4, 5)) // read by NBI puts until a Quiet: never written
	vec := func() []int64 { return make([]int64, pick(0, 3, 4, 5)) }
	mask := func() []bool {
		if rng.IntN(2) == 0 {
			return nil
		}
		return make([]bool, pick(0, 3, 4, 5))
	}
	finalized := false
	for time.Now().Before(deadline) {
		calls.Add(1)
		var err error
		var what string
		switch rng.IntN(22) {
		case 0:
			what, err = "Put", shmem.Put(sym(), buf, target())
		case 1:
			what, err = "Get", shmem.Get(buf, sym(), target())
		case 2:
			what, err = "P", shmem.P(sym(), index(), 1, target())
		case 3:
			what = "G"
			_, err = shmem.G(sym(), index(), target())
		case 4:
			what, err = "IPut", shmem.IPut(sym(), stride(), buf, stride(), count(), target())
		case 5:
			what, err = "IGet", shmem.IGet(buf, stride(), sym(), stride(), count(), target())
		case 6:
			what = "AtomicFetchAdd"
			_, err = shmem.AtomicFetchAdd(sym(), index(), 1, target())
		case 7:
			what, err = "AtomicAdd", shmem.AtomicAdd(sym(), index(), 1, target())
		case 8:
			var v int64
			what, err = "AtomicFetchAddNBI", shmem.AtomicFetchAddNBI(&v, sym(), index(), 1, target())
		case 9:
			what = "Test"
			_, err = shmem.Test(sym(), index(), shmem.Cmp(pick(0, 1, 2, 7)), 0)
		case 10:
			// A wait that only Finalize (or a peer's add) ends, or one
			// that holds at once.
			what, err = "WaitUntil", shmem.WaitUntil(sym(), index(), shmem.CmpLT, []int64{math.MinInt64, 1 << 40}[rng.IntN(2)])
		case 11:
			what = "SetLock/ClearLock"
			if err = shmem.SetLock(lock); err == nil {
				err = shmem.ClearLock(lock)
			}
		case 12:
			what, err = "ClearLock", shmem.ClearLock(lock)
		case 13:
			what, err = "Quiet", pe.Quiet()
		case 14:
			what, err = "PEQuiet", pe.PEQuiet(target(), target())
		case 16:
			what, err = "IBPut", shmem.IBPut(sym(), stride(), buf, stride(), count(), count(), target())
		case 17:
			what, err = "IBGet", shmem.IBGet(buf, stride(), sym(), stride(), count(), count(), target())
		case 18:
			what = "TestSomeVector"
			_, err = shmem.TestSomeVector(sym(), mask(), shmem.Cmp(pick(0, 1, 5, 7)), vec())
		case 19:
			// Holds at once (every element is below 1<<40) or never.
			what = "WaitUntilAnyVector"
			v := vec()
			for i := range v {
				v[i] = []int64{math.MinInt64, 1 << 40}[rng.IntN(2)]
			}
			_, err = shmem.WaitUntilAnyVector(sym(), mask(), shmem.CmpLT, v)
		case 20:
			what, err = "PutSignalNBI", shmem.PutSignalNBI(sym(), nbiSrc, sig.Slice(0, pick(0, 1)), 1, shmem.SignalOp(pick(0, 1, 2, 3)), target())
		case 21:
			what, err = "SignalUpdate", shmem.SignalUpdate(sig.Slice(0, pick(0, 1)), 1, shmem.SignalOp(pick(0, 1, 2, 3)), target())
		case 15:
			what = "Local/Ptr/SameHost"
			l, p := s.Local(), shmem.Ptr(s, target())
			if finalized && (l != nil || p != nil || pe.SameHost(pe.MyPE())) {
				return fmt.Errorf("Local, Ptr or SameHost after Finalize")
			}
		}
		if err != nil && !wrapsSentinel(err) {
			return fmt.Errorf("%s: an error that wraps no sentinel: %v", what, err)
		}
		if finalized && err == nil && what != "Local/Ptr/SameHost" {
			return fmt.Errorf("%s succeeded after Finalize", what)
		}
		if errors.Is(err, shmem.ErrFinalized) && !errors.Is(err, shmem.ErrPeerLost) && what != "ClearLock" {
			// From now on the PE is finalizing or finalized (a closed
			// remote link also says ErrFinalized: check the PE itself).
			finalized = !pe.Accessible(pe.MyPE())
		}
	}
	return nil
}

func TestMisuseSoak(t *testing.T) {
	seed, d, err := misuseSoakSettings()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seed %d (GOSHMEM_MISUSE_SEED=%d replays it), %v per route", seed, seed, d)
	env := []string{"GOSHMEM_MISUSE_SEED=" + strconv.FormatUint(seed, 10), "GOSHMEM_MISUSE_TIME=" + d.String()}
	t.Setenv(env[0][:len("GOSHMEM_MISUSE_SEED")], strconv.FormatUint(seed, 10))
	t.Setenv("GOSHMEM_MISUSE_TIME", d.String())
	eachWith(t, "misuse-soak", 3, nil, env...)
}
