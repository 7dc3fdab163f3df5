package shmem_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// The soak: 4 PEs on pretend hosts (every pair over TCP), each with
// soakWorkers goroutines doing random blocking and non-blocking puts,
// gets and atomics to random PEs, while each PE's first goroutine runs a
// ring of WaitUntil hand-offs and a barrier per round. It runs for 2 s
// per polling mode (GOSHMEM_SOAK=30s for the long run .ci/run does).
// Checked: every get
// reads back what its goroutine last put (nobody else writes there),
// every atomic add is counted exactly once, and the process's goroutines
// and RSS do not grow between the first and the last rounds.
const soakWorkers = 3

func soakDuration(t *testing.T) time.Duration {
	v := os.Getenv("GOSHMEM_SOAK")
	if v == "" {
		return 2 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("GOSHMEM_SOAK=%q: want a duration like 30s", v)
	}
	return d
}

func TestSoakTCP(t *testing.T) {
	// auto: the default policy (here oversubscribed: waits poll and
	// yield); spin: every wait and caller polls (GOSHMEM_BUSYPOLL=1).
	for _, mode := range []string{"auto", "1"} {
		t.Run("busypoll="+mode, func(t *testing.T) {
			t.Setenv("GOSHMEM_BUSYPOLL", mode)
			soak(t)
		})
	}
}

func soak(t *testing.T) {
	const n = 4
	d := soakDuration(t)
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("GOSHMEM_SOAK_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d (GOSHMEM_SOAK_SEED replays it), %v", seed, d)
	var (
		mu               sync.Mutex
		gFirst, gLast    int
		rssFirst, rssMax int64
		rounds           int
	)
	err := shmem.Run(n, func(pe *shmem.PE) error {
		me := pe.MyPE()
		// slots[w*n+src] on every PE belongs to worker w of PE src.
		slots, err := shmem.Malloc[int64](pe, soakWorkers*n*8)
		if err != nil {
			return err
		}
		counter, err := shmem.Malloc[int64](pe, 1) // atomic adds from everyone
		if err != nil {
			return err
		}
		issued, err := shmem.Malloc[int64](pe, 1) // on PE 0: adds issued by everyone
		if err != nil {
			return err
		}
		ring, err := shmem.Malloc[int64](pe, 1) // the WaitUntil hand-off
		if err != nil {
			return err
		}
		stop, err := shmem.Malloc[int64](pe, 1) // set by PE 0 before the last barrier
		if err != nil {
			return err
		}
		if err := pe.BarrierAll(); err != nil {
			return err
		}
		var done atomic.Bool
		var wg sync.WaitGroup
		errc := make(chan error, soakWorkers)
		for w := 1; w < soakWorkers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errc <- soakWorker(pe, rand.New(rand.NewPCG(seed, uint64(me*soakWorkers+w))), w, slots, counter, issued, &done)
			}()
		}
		// This goroutine: rounds of a ring hand-off and a barrier, until
		// PE 0 says stop (all PEs leave after the same barrier).
		start := time.Now()
		var werr error
		for round := int64(1); ; round++ {
			if me == 0 {
				if err := shmem.P(ring, 0, round, 1%n); err != nil {
					werr = err
					break
				}
				if err := shmem.WaitUntil(ring, 0, shmem.CmpGE, round); err != nil {
					werr = err
					break
				}
			} else {
				if err := shmem.WaitUntil(ring, 0, shmem.CmpGE, round); err != nil {
					werr = err
					break
				}
				if err := shmem.P(ring, 0, round, (me+1)%n); err != nil {
					werr = err
					break
				}
			}
			if me == 0 && time.Since(start) > d {
				for r := 0; r < n; r++ {
					if err := shmem.P(stop, 0, 1, r); err != nil {
						werr = err
						break
					}
				}
			}
			if err := pe.BarrierAll(); err != nil {
				werr = err
				break
			}
			if me == 0 {
				mu.Lock()
				rounds = int(round)
				if round == 20 {
					gFirst, rssFirst = runtime.NumGoroutine(), rss()
				}
				rssMax = max(rssMax, rss())
				mu.Unlock()
			}
			if v, err := shmem.AtomicFetch(stop, 0, me); err != nil || v != 0 {
				werr = err
				break
			}
		}
		done.Store(true)
		wg.Wait()
		close(errc)
		for err := range errc {
			werr = errors.Join(werr, err)
		}
		if werr != nil {
			return fmt.Errorf("PE %d: %w", me, werr)
		}
		if err := pe.BarrierAll(); err != nil {
			return err
		}
		if me == 0 {
			mu.Lock()
			gLast = runtime.NumGoroutine()
			mu.Unlock()
			var sum int64
			for r := 0; r < n; r++ {
				v, err := shmem.AtomicFetch(counter, 0, r)
				if err != nil {
					return err
				}
				sum += v
			}
			want, err := shmem.AtomicFetch(issued, 0, 0)
			if err != nil {
				return err
			}
			if sum != want {
				return fmt.Errorf("the counters add up to %d, %d adds were issued", sum, want)
			}
		}
		return pe.BarrierAll()
	}, shmem.WithTimeout(60*time.Second), shmem.WithHeapSize(16<<20), shmem.WithHosts(pretendHosts("remote", n)))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d rounds; goroutines %d -> %d; RSS %d MiB after 20 rounds, %d MiB at most", rounds, gFirst, gLast, rssFirst>>20, rssMax>>20)
	if rounds < 20 {
		t.Fatalf("only %d rounds in %v", rounds, d)
	}
	// After the workers ended, fewer goroutines than while they ran.
	if gLast > gFirst {
		t.Errorf("goroutines grew from %d to %d", gFirst, gLast)
	}
	if rssMax > rssFirst+64<<20 {
		t.Errorf("RSS grew from %d MiB to %d MiB", rssFirst>>20, rssMax>>20)
	}
}

// soakWorker does random operations until done: each put goes to the
// worker's own slots on the target, so a get of them must read back
// exactly what was put last.
func soakWorker(pe *shmem.PE, rng *rand.Rand, w int, slots, counter, issued shmem.Sym[int64], done *atomic.Bool) error {
	n, me := pe.NPEs(), pe.MyPE()
	own := slots.Slice((w*n+me)*8, (w*n+me)*8+8)
	last := make([][]int64, n) // what this worker last put at each PE
	for r := range last {
		last[r] = make([]int64, 8)
	}
	buf := make([]int64, 8)
	nbi := make([]int64, 8)
	var adds int64
	for seq := int64(1); !done.Load(); seq++ {
		target := rng.IntN(n)
		switch rng.IntN(6) {
		case 0, 1: // blocking put, then get back
			for i := range buf {
				buf[i] = seq*8 + int64(i)
			}
			if err := shmem.Put(own, buf, target); err != nil {
				return err
			}
			copy(last[target], buf)
			if err := shmem.Get(nbi, own, target); err != nil {
				return err
			}
			if !equal(nbi, last[target]) {
				return fmt.Errorf("worker %d: get from PE %d read %v after putting %v", w, target, nbi, last[target])
			}
		case 2: // non-blocking put and get, then Quiet
			for i := range buf {
				buf[i] = -(seq*8 + int64(i))
			}
			if err := shmem.PutNBI(own, buf, target); err != nil {
				return err
			}
			if err := pe.Quiet(); err != nil {
				return err
			}
			copy(last[target], buf)
			clear(nbi)
			if err := shmem.GetNBI(nbi, own, target); err != nil {
				return err
			}
			if err := pe.Quiet(); err != nil {
				return err
			}
			if !equal(nbi, last[target]) {
				return fmt.Errorf("worker %d: GetNBI from PE %d read %v after putting %v", w, target, nbi, last[target])
			}
		case 3: // atomic adds, blocking and fetching
			if _, err := shmem.AtomicFetchAdd(counter, 0, 2, target); err != nil {
				return err
			}
			if err := shmem.AtomicAdd(counter, 0, 1, target); err != nil {
				return err
			}
			adds += 3
		case 4: // a fetching NBI add
			var old int64
			if err := shmem.AtomicFetchAddNBI(&old, counter, 0, 5, target); err != nil {
				return err
			}
			if err := pe.Quiet(); err != nil {
				return err
			}
			adds += 5
		case 5: // a single element with P and G
			if err := shmem.P(own, 7, seq, target); err != nil {
				return err
			}
			last[target][7] = seq
			v, err := shmem.G(own, 7, target)
			if err != nil {
				return err
			}
			if v != seq {
				return fmt.Errorf("worker %d: G from PE %d read %d after P of %d", w, target, v, seq)
			}
		}
	}
	if err := pe.Quiet(); err != nil {
		return err
	}
	return shmem.AtomicAdd(issued, 0, adds, 0)
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// rss reads this process's resident set size from /proc/self/statm.
func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}
