package shmem_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// The soak: 4 PEs on pretend hosts, in rounds. In each round every PE's
// soakWorkers goroutines each make soakOps random calls to random PEs:
// blocking and non-blocking puts and gets, atomics (blocking, fetching,
// NBI), and through a context of the worker's own, NBI puts, atomics and
// put-with-signal completed by the context's Quiet. Meanwhile the PE's
// main goroutine passes a WaitUntil token round a ring of the PEs and
// swaps put-with-signal messages with every other PE (SignalWaitUntil).
// A worker ends its round with a WaitUntil hand-off to the same worker of
// the next PE, then parks; the main goroutine then enters a barrier,
// samples the process's goroutines, live heap and RSS while every
// worker of every PE is parked, and enters a second barrier before the
// next round. Every few rounds each worker closes its context and opens
// a new one.
//
// Checked, exactly: every get reads back what its worker last put there
// (nobody else writes there); every atomic add is counted once (after
// each round, the counters on all PEs add up to the adds issued); every
// signal and WaitUntil word holds exactly the value its round implies,
// and each signal's data is the message it guards. Checked for leaks,
// in each process: after a warm-up, the fewest goroutines at that
// sampling point in any window of soakCtxEvery rounds is no more than in
// the warm-up's last window (soakCheck says why the floor); the second
// half's peak live heap and RSS are not above the first half's by more
// than a small margin (soakHeapSlack, soakRSSSlack); after the job the
// process is back to its goroutine count from before it (a PE process
// at once after Finalize; the test process within 10 s of shmem.Run
// returning, see soakSettle).
//
// It runs in goroutine PEs (one process) and as separate processes of
// this test binary on pretend hosts, every PE on a host of its own and
// 2 hosts × 2 PEs. Each process measures itself; a child writes its
// samples to a file in GOSHMEM_SOAK_REPORT and the test checks them.
// GOSHMEM_SOAK sets how long the all-remote processes case runs (default
// 2s; .ci/run sets 30s); the other cases run a third of it. A case runs
// at least soakMinRounds rounds however long that takes.
// GOSHMEM_SOAK_SEED replays a run's random choices.
const (
	soakPEs       = 4
	soakWorkers   = 3
	soakOps       = 32 // calls per worker per round
	soakCtxEvery  = 4  // rounds between a worker's context replacements
	soakMinRounds = 32
	// Rounds dropped before the leak checks: the first rounds open
	// connections and context channels and grow the heap to its working
	// size. The warm-up is the larger of these and a tenth of the rounds.
	soakWarmup = 3 * soakCtxEvery
)

// Margins of the trend checks. The live heap is read after a GC cycle
// run at the sampling point (soakMeasure). Read from the last cycle the
// runtime happened to run, it moved with where in a round that cycle
// ended (the frames, buffers and closures of the calls in flight then:
// up to a quarter of the working heap in goroutine PEs, 3.3 to 4.4 MiB
// seen, and a short NONAP run failed at 4530 -> 6119 KiB); the margin,
// the larger of 1 MiB and a quarter of the first half's peak, is kept
// for what a PE in another goroutine still has in flight in goroutine
// PEs, where all PEs share the process. RSS also moves with the scavenger returning pages and
// the GC pacer's target (twice the live heap), so a heap that swings
// by some MiB between GC cycles moves RSS by up to twice as much: its
// margin is the largest of 4 MiB, an eighth of the first half's peak,
// and twice the first half's peak live heap (with the first two only, a
// goroutine-PE job at load failed: RSS 26868 -> 31044 KiB, 4.1 MiB
// against 4 MiB, where those jobs' live heaps peak at 3 to 6 MiB). A
// leak of a few bytes per call passes neither over a CI-length run; one
// of a few bytes per round can.
const (
	soakHeapSlack = 1 << 20
	soakRSSSlack  = 4 << 20
)

// soakSample is one process's state at the sampling point of a round.
type soakSample struct {
	Goroutines int
	HeapLive   uint64 // /gc/heap/live:bytes
	RSS        int64  // /proc/self/statm resident pages × page size
}

// soakReport is what one PE measured. Before and After are the process's
// goroutine counts before Init and after Finalize (separate processes
// only: in goroutine PEs the test measures around shmem.Run).
type soakReport struct {
	PE       int
	Rounds   int
	Samples  []soakSample
	Before   int
	After    int
	Finished bool // After was measured
}

type soakConfig struct {
	d    time.Duration
	seed uint64
}

func soakSettings() (soakConfig, error) {
	c := soakConfig{d: 2 * time.Second, seed: uint64(time.Now().UnixNano())}
	if v := os.Getenv("GOSHMEM_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return c, fmt.Errorf("GOSHMEM_SOAK=%q: want a duration like 30s", v)
		}
		c.d = d
	}
	if v := os.Getenv("GOSHMEM_SOAK_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return c, fmt.Errorf("GOSHMEM_SOAK_SEED=%q: %v", v, err)
		}
		c.seed = s
	}
	return c, nil
}

// soakStartGoroutines is the process's goroutine count before any test
// or scenario ran: in a child, before Init.
var soakStartGoroutines = runtime.NumGoroutine()

// The soak as a scenario, for the process cases: the case's duration
// comes in GOSHMEM_SOAK_CASE, and the report goes to a file.
var _ = register("soak", func(pe *shmem.PE) error {
	c, err := soakSettings()
	if err != nil {
		return err
	}
	if v := os.Getenv("GOSHMEM_SOAK_CASE"); v != "" {
		if c.d, err = time.ParseDuration(v); err != nil {
			return err
		}
	}
	rep, err := soakPE(pe, c)
	if err != nil {
		return err
	}
	if err := pe.Finalize(); err != nil {
		return err
	}
	rep.Before, rep.After, rep.Finished = soakStartGoroutines, runtime.NumGoroutine(), true
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(os.Getenv("GOSHMEM_SOAK_REPORT"), fmt.Sprintf("pe%d.json", rep.PE)), b, 0o644)
})

func TestSoak(t *testing.T) {
	c, err := soakSettings()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seed %d (GOSHMEM_SOAK_SEED replays it)", c.seed)
	third := max(c.d/3, time.Millisecond)
	// A goroutine case's subtest runs in a goroutine of its own, beside
	// this one waiting in t.Run: that one more is the count before its job.
	base := runtime.NumGoroutine() + 1
	for _, k := range []struct {
		name      string
		processes bool
		hosts     string
		busypoll  string
		d         time.Duration
	}{
		// auto: the default policy (here oversubscribed: waits poll and
		// yield); 1: every wait and caller polls.
		{"goroutines-tcp", false, "remote", "auto", third},
		{"goroutines-tcp-busypoll", false, "remote", "1", third},
		// The shape of the lost wake-up of issue 10: each PE a process on
		// a host of its own, sharing no scheduler with its peers.
		{"processes-tcp", true, "remote", "auto", c.d},
		{"processes-mixed", true, "mixed", "auto", third},
	} {
		t.Run(k.name, func(t *testing.T) {
			t.Setenv("GOSHMEM_BUSYPOLL", k.busypoll)
			c := soakConfig{d: k.d, seed: c.seed}
			var reps []soakReport
			if k.processes {
				reps = soakProcesses(t, c, k.hosts)
			} else {
				reps = soakGoroutines(t, c, k.hosts, base)
			}
			for _, r := range reps {
				soakCheck(t, r)
			}
		})
	}
}

// soakGoroutines runs the soak in goroutine PEs of this process and
// returns PE 0's report (the samples are the process's, the same for
// every PE), with the process's goroutines before the job (given: an
// earlier case's goroutines may still be ending) and after it.
func soakGoroutines(t *testing.T, c soakConfig, hosts string, before int) []soakReport {
	var rep soakReport
	err := shmem.Run(soakPEs, func(pe *shmem.PE) error {
		r, err := soakPE(pe, c)
		if pe.MyPE() == 0 {
			rep = r
		}
		return err
	}, shmem.WithTimeout(60*time.Second), shmem.WithHeapSize(16<<20), shmem.WithHosts(pretendHosts(hosts, soakPEs)))
	if err != nil {
		t.Fatal(err)
	}
	rep.Before, rep.After, rep.Finished = before, soakSettle(t, before), true
	return []soakReport{rep}
}

// soakSettle waits up to 10 s for this process's goroutines to fall to
// want and returns their count. shmem.Run returns once its PEs returned
// and their meshes are closed; the connections' reader and writer
// goroutines see the closed sockets and end on their own, soon after.
// One that has not ended after 10 s is a leak.
func soakSettle(t *testing.T, want int) int {
	start := time.Now()
	g := runtime.NumGoroutine()
	first := g
	for g > want && time.Since(start) < 10*time.Second {
		time.Sleep(time.Millisecond)
		g = runtime.NumGoroutine()
	}
	t.Logf("goroutines: %d when shmem.Run returned, %d after %v", first, g, time.Since(start).Round(time.Millisecond))
	return g
}

// soakProcesses runs the soak as a job of separate processes and returns
// every PE's report.
func soakProcesses(t *testing.T, c soakConfig, hosts string) []soakReport {
	dir := t.TempDir()
	err := scenarios.Processes(soakPEs, "soak", pretendHosts(hosts, soakPEs),
		"GOSHMEM_BUSYPOLL="+os.Getenv("GOSHMEM_BUSYPOLL"),
		"GOSHMEM_SOAK_SEED="+strconv.FormatUint(c.seed, 10),
		"GOSHMEM_SOAK_CASE="+c.d.String(),
		"GOSHMEM_SOAK_REPORT="+dir)
	if err != nil {
		t.Fatal(err)
	}
	reps := make([]soakReport, soakPEs)
	for i := range reps {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("pe%d.json", i)))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &reps[i]); err != nil {
			t.Fatalf("PE %d's report: %v", i, err)
		}
	}
	return reps
}

// soakCheck applies the leak checks to one process's report and logs
// its series.
func soakCheck(t *testing.T, r soakReport) {
	t.Helper()
	s := r.Samples
	warm := max(soakWarmup, len(s)/10)
	t.Logf("PE %d: %d rounds, warm-up %d; goroutines before the job %d, after %d", r.PE, r.Rounds, warm, r.Before, r.After)
	t.Logf("PE %d: goroutines %s", r.PE, soakSeries(s, func(x soakSample) int64 { return int64(x.Goroutines) }, 1))
	t.Logf("PE %d: live heap KiB %s", r.PE, soakSeries(s, func(x soakSample) int64 { return int64(x.HeapLive) }, 1<<10))
	t.Logf("PE %d: RSS KiB %s", r.PE, soakSeries(s, func(x soakSample) int64 { return x.RSS }, 1<<10))
	if r.Rounds < soakMinRounds || len(s) != r.Rounds {
		t.Fatalf("PE %d: %d rounds, %d samples; want at least %d of each", r.PE, r.Rounds, len(s), soakMinRounds)
	}
	// Goroutines: at the sampling point every worker is parked and every
	// connection and context channel of the job is open (context
	// replacements reuse the count: a channel closes before its
	// replacement opens), so the goroutines that stay are the same every
	// round. Transient ones are not: a library goroutine just started or
	// about to end (a timer's, or in goroutine PEs another PE still
	// inside barrier B) adds one now and then. So the check is on the
	// floor: the fewest in each window of soakCtxEvery rounds after the
	// warm-up may not exceed the fewest in the warm-up's last window. A
	// goroutine that stays raises every later window's floor.
	win := soakCtxEvery
	floor := func(a []soakSample) int {
		m := a[0].Goroutines
		for _, x := range a {
			m = min(m, x.Goroutines)
		}
		return m
	}
	g0 := floor(s[warm-win : warm])
	for i := warm; i < len(s); i += win {
		lo := min(i, len(s)-win) // the last window ends at the last round
		if g := floor(s[lo : lo+win]); g > g0 {
			t.Errorf("PE %d: at least %d goroutines in rounds %d-%d, %d at the end of the warm-up (rounds %d-%d)",
				r.PE, g, lo+1, lo+win, g0, warm-win+1, warm)
			break
		}
	}
	if !r.Finished {
		t.Errorf("PE %d: no goroutine count after the job", r.PE)
	} else if r.After > r.Before {
		t.Errorf("PE %d: %d goroutines after the job, %d before it", r.PE, r.After, r.Before)
	}
	// Heap and RSS: no upward trend after the warm-up.
	mid := warm + (len(s)-warm)/2
	peak := func(a []soakSample, f func(soakSample) int64) int64 {
		var m int64
		for _, x := range a {
			m = max(m, f(x))
		}
		return m
	}
	liveHeap := func(x soakSample) int64 { return int64(x.HeapLive) }
	resident := func(x soakSample) int64 { return x.RSS }
	h1, h2 := peak(s[warm:mid], liveHeap), peak(s[mid:], liveHeap)
	if h2 > h1+max(soakHeapSlack, h1/4) {
		t.Errorf("PE %d: live heap peaked at %d KiB in the second half, %d KiB in the first", r.PE, h2>>10, h1>>10)
	}
	if r1, r2 := peak(s[warm:mid], resident), peak(s[mid:], resident); r2 > r1+max(soakRSSSlack, r1/8, 2*h1) && !soakRace {
		t.Errorf("PE %d: RSS peaked at %d KiB in the second half, %d KiB in the first", r.PE, r2>>10, r1>>10)
	}
}

// soakSeries prints about 12 evenly spaced values of a series, in units.
func soakSeries(s []soakSample, f func(soakSample) int64, unit int64) string {
	var b strings.Builder
	step := max(1, len(s)/12)
	for i := 0; i < len(s); i += step {
		fmt.Fprintf(&b, "r%d:%d ", i+1, f(s[i])/unit)
	}
	if len(s) > 0 {
		fmt.Fprintf(&b, "r%d:%d", len(s), f(s[len(s)-1])/unit)
	}
	return b.String()
}

// soakSyms are the soak's symmetric objects.
type soakSyms struct {
	slots   shmem.Sym[int64]  // slots[(w*n+src)*8:][:8] on every PE belong to worker w of PE src
	boxes   shmem.Sym[int64]  // boxes[(w*n+src)*8:][:8]: worker w of PE src's put-with-signal data
	boxSig  shmem.Sym[uint64] // boxSig[w*n+src]: its signal, set to the message's number
	counter shmem.Sym[int64]  // atomic adds from everyone
	issued  shmem.Sym[int64]  // on PE 0: the adds everyone issued
	ring    shmem.Sym[int64]  // the main goroutines' WaitUntil ring
	hand    shmem.Sym[int64]  // hand[w]: worker w's hand-off from the previous PE
	mail    shmem.Sym[int64]  // mail[src*8:][:8]: the main goroutine of PE src's message
	mailSig shmem.Sym[uint64] // counts the messages that arrived
	stop    shmem.Sym[int64]  // set by PE 0 between the two barriers of the last round
}

func soakAlloc(pe *shmem.PE) (s soakSyms, err error) {
	n := pe.NPEs()
	alloc64 := func(k int) shmem.Sym[int64] {
		v, e := shmem.Malloc[int64](pe, k)
		err = errors.Join(err, e)
		return v
	}
	allocU := func(k int) shmem.Sym[uint64] {
		v, e := shmem.Malloc[uint64](pe, k)
		err = errors.Join(err, e)
		return v
	}
	s.slots = alloc64(soakWorkers * n * 8)
	s.boxes = alloc64(soakWorkers * n * 8)
	s.boxSig = allocU(soakWorkers * n)
	s.counter = alloc64(1)
	s.issued = alloc64(1)
	s.ring = alloc64(1)
	s.hand = alloc64(soakWorkers)
	s.mail = alloc64(n * 8)
	s.mailSig = allocU(1)
	s.stop = alloc64(1)
	return s, err
}

// soakPE is one PE's part of the soak. It returns the samples it took.
func soakPE(pe *shmem.PE, c soakConfig) (soakReport, error) {
	n, me := pe.NPEs(), pe.MyPE()
	rep := soakReport{PE: me}
	s, err := soakAlloc(pe)
	if err != nil {
		return rep, err
	}
	if err := pe.BarrierAll(); err != nil {
		return rep, err
	}
	// Each worker waits on its own channel for the next round's number
	// (closed: no more rounds) and answers on done.
	next := make([]chan int64, soakWorkers)
	done := make(chan error, soakWorkers)
	var wg sync.WaitGroup
	for w := range soakWorkers {
		next[w] = make(chan int64)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(c.seed, uint64(me*soakWorkers+w)))
			soakWorker(pe, rng, w, s, next[w], done)
		}()
	}
	stopWorkers := func() {
		for _, ch := range next {
			close(ch)
		}
		wg.Wait()
	}
	start := time.Now()
	for round := int64(1); ; round++ {
		for _, ch := range next {
			ch <- round
		}
		err := soakMain(pe, s, round)
		for range soakWorkers {
			err = errors.Join(err, <-done)
		}
		if err != nil {
			stopWorkers()
			return rep, fmt.Errorf("PE %d, round %d: %w", me, round, err)
		}
		// Barrier A: every PE's workers are parked and their operations
		// complete, so the counters hold every add issued so far.
		if err := pe.BarrierAll(); err != nil {
			stopWorkers()
			return rep, err
		}
		if me == 0 {
			if err := soakCount(s, n); err != nil {
				stopWorkers()
				return rep, fmt.Errorf("round %d: %w", round, err)
			}
		}
		rep.Samples = append(rep.Samples, soakMeasure())
		rep.Rounds = int(round)
		if me == 0 && round >= soakMinRounds && time.Since(start) >= c.d {
			for r := range n {
				if err := shmem.P(s.stop, 0, 1, r); err != nil {
					stopWorkers()
					return rep, err
				}
			}
		}
		// Barrier B: nobody starts the next round while another PE is
		// sampling, and the stop flag has arrived everywhere.
		if err := pe.BarrierAll(); err != nil {
			stopWorkers()
			return rep, err
		}
		if s.stop.Local()[0] != 0 {
			break
		}
	}
	stopWorkers()
	return rep, pe.BarrierAll()
}

// soakMain is the main goroutine's part of a round: the ring, then a
// put-with-signal to every other PE and a wait for theirs.
func soakMain(pe *shmem.PE, s soakSyms, round int64) error {
	n, me := pe.NPEs(), pe.MyPE()
	if me == 0 {
		if err := shmem.P(s.ring, 0, round, 1%n); err != nil {
			return err
		}
	}
	if err := shmem.WaitUntil(s.ring, 0, shmem.CmpGE, round); err != nil {
		return err
	}
	// Nobody passes the token on before this PE's next round.
	if v := s.ring.Local()[0]; v != round {
		return fmt.Errorf("ring token %d, want %d", v, round)
	}
	if me != 0 {
		if err := shmem.P(s.ring, 0, round, (me+1)%n); err != nil {
			return err
		}
	}
	msg := make([]int64, 8)
	for i := range msg {
		msg[i] = round<<16 | int64(me)<<8 | int64(i)
	}
	box := s.mail.Slice(me*8, me*8+8)
	for k := 1; k < n; k++ {
		target := (me + k) % n
		var err error
		if (round+int64(k))%2 == 0 {
			err = shmem.PutSignal(box, msg, s.mailSig, 1, shmem.SignalAdd, target)
		} else if err = shmem.PutSignalNBI(box, msg, s.mailSig, 1, shmem.SignalAdd, target); err == nil {
			err = pe.Quiet()
		}
		if err != nil {
			return err
		}
	}
	// Messages of the next round come only after barrier B.
	want := uint64(round) * uint64(n-1)
	v, err := shmem.SignalWaitUntil(s.mailSig, shmem.CmpGE, want)
	if err != nil {
		return err
	}
	if v != want {
		return fmt.Errorf("%d messages arrived by round %d, want %d", v, round, want)
	}
	mail := s.mail.Local()
	for src := range n {
		if src == me {
			continue
		}
		for i := range 8 {
			if w := round<<16 | int64(src)<<8 | int64(i); mail[src*8+i] != w {
				return fmt.Errorf("message from PE %d: word %d is %#x, want %#x", src, i, mail[src*8+i], w)
			}
		}
	}
	return nil
}

// soakCount checks on PE 0 that the counters on all PEs add up to the
// adds issued.
func soakCount(s soakSyms, n int) error {
	var sum int64
	for r := range n {
		v, err := shmem.AtomicFetch(s.counter, 0, r)
		if err != nil {
			return err
		}
		sum += v
	}
	want, err := shmem.AtomicFetch(s.issued, 0, 0)
	if err != nil {
		return err
	}
	if sum != want {
		return fmt.Errorf("the counters add up to %d, %d adds were issued", sum, want)
	}
	return nil
}

var soakMetrics = []metrics.Sample{{Name: "/gc/heap/live:bytes"}}

// soakMeasure samples the process. It runs a whole GC cycle first, so
// that the live heap it reads is what is reachable at the sampling point
// (every worker parked), not what the last cycle found wherever in a
// round it happened to end.
func soakMeasure() soakSample {
	runtime.GC()
	m := make([]metrics.Sample, len(soakMetrics))
	copy(m, soakMetrics)
	metrics.Read(m)
	return soakSample{Goroutines: runtime.NumGoroutine(), HeapLive: m[0].Value.Uint64(), RSS: rss()}
}

// soakWorker runs worker w's rounds: for each round number from next,
// soakOps random calls, then the hand-off, then an answer on done. Each
// put goes to the worker's own slots on the target, so a get of them
// must read back exactly what was put last.
func soakWorker(pe *shmem.PE, rng *rand.Rand, w int, s soakSyms, next <-chan int64, done chan<- error) {
	n, me := pe.NPEs(), pe.MyPE()
	var ctx *shmem.Context
	defer func() {
		if ctx != nil {
			ctx.Close()
		}
	}()
	own := s.slots.Slice((w*n+me)*8, (w*n+me)*8+8)
	box := s.boxes.Slice((w*n+me)*8, (w*n+me)*8+8)
	sig := s.boxSig.Slice(w*n+me, w*n+me+1)
	last := make([][]int64, n) // what this worker last put at each PE
	for r := range last {
		last[r] = make([]int64, 8)
	}
	buf := make([]int64, 8)
	got := make([]int64, 8)
	seq := int64(0)
	for round := range next {
		err := func() error {
			if (round-1)%soakCtxEvery == 0 {
				if ctx != nil {
					if err := ctx.Close(); err != nil {
						return err
					}
				}
				var err error
				if ctx, err = pe.NewContext(); err != nil {
					return err
				}
				// Open the context's channel to every PE now, so that the
				// goroutines behind them are there at every round's sample.
				seq++
				for r := range n {
					if err := shmem.P(own.Via(ctx), 7, seq, r); err != nil {
						return err
					}
					last[r][7] = seq
				}
				// Complete them: a later put through the default context
				// to the same word is not ordered after them otherwise.
				if err := ctx.Quiet(); err != nil {
					return err
				}
			}
			var adds int64
			for range soakOps {
				seq++
				target := rng.IntN(n)
				fill := func(sign int64) {
					for i := range buf {
						buf[i] = sign * (seq*8 + int64(i))
					}
				}
				check := func(what string) error {
					if !equal(got, last[target]) {
						return fmt.Errorf("worker %d: %s from PE %d read %v after putting %v", w, what, target, got, last[target])
					}
					return nil
				}
				switch rng.IntN(9) {
				case 0: // blocking put, then get back
					fill(1)
					if err := shmem.Put(own, buf, target); err != nil {
						return err
					}
					copy(last[target], buf)
					if err := shmem.Get(got, own, target); err != nil {
						return err
					}
					if err := check("Get"); err != nil {
						return err
					}
				case 1: // non-blocking put and get, then Quiet
					fill(-1)
					if err := shmem.PutNBI(own, buf, target); err != nil {
						return err
					}
					if err := pe.Quiet(); err != nil {
						return err
					}
					copy(last[target], buf)
					clear(got)
					if err := shmem.GetNBI(got, own, target); err != nil {
						return err
					}
					if err := pe.Quiet(); err != nil {
						return err
					}
					if err := check("GetNBI"); err != nil {
						return err
					}
				case 2: // atomic adds, blocking and fetching
					if _, err := shmem.AtomicFetchAdd(s.counter, 0, 2, target); err != nil {
						return err
					}
					if err := shmem.AtomicAdd(s.counter, 0, 1, target); err != nil {
						return err
					}
					adds += 3
				case 3: // a fetching NBI add
					var old int64
					if err := shmem.AtomicFetchAddNBI(&old, s.counter, 0, 5, target); err != nil {
						return err
					}
					if err := pe.Quiet(); err != nil {
						return err
					}
					adds += 5
				case 4: // a single element with P and G
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
				case 5: // the context: an NBI put, its Quiet, a get through it
					fill(1)
					if err := shmem.PutNBI(own.Via(ctx), buf, target); err != nil {
						return err
					}
					if err := ctx.Quiet(); err != nil {
						return err
					}
					copy(last[target], buf)
					if err := shmem.Get(got, own.Via(ctx), target); err != nil {
						return err
					}
					if err := check("Get through a context"); err != nil {
						return err
					}
				case 6: // the context: NBI atomics, completed by its Quiet
					if err := shmem.AtomicAdd(s.counter.Via(ctx), 0, 7, target); err != nil {
						return err
					}
					var old int64
					if err := shmem.AtomicFetchAddNBI(&old, s.counter.Via(ctx), 0, 11, target); err != nil {
						return err
					}
					if err := ctx.Quiet(); err != nil {
						return err
					}
					adds += 18
				case 7, 8: // put-with-signal through the context, then read both back
					fill(1)
					var err error
					if rng.IntN(2) == 0 {
						err = shmem.PutSignal(box.Via(ctx), buf, sig.Via(ctx), uint64(seq), shmem.SignalSet, target)
					} else {
						err = shmem.PutSignalNBI(box.Via(ctx), buf, sig.Via(ctx), uint64(seq), shmem.SignalSet, target)
					}
					if err != nil {
						return err
					}
					if err := ctx.Quiet(); err != nil {
						return err
					}
					v, err := shmem.AtomicFetch(sig, 0, target)
					if err != nil {
						return err
					}
					if err := shmem.Get(got, box, target); err != nil {
						return err
					}
					if v != uint64(seq) || !equal(got, buf) {
						return fmt.Errorf("worker %d: put-with-signal %d to PE %d reads back signal %d, data %v", w, seq, target, v, got)
					}
				}
			}
			if err := ctx.Quiet(); err != nil {
				return err
			}
			if err := pe.Quiet(); err != nil {
				return err
			}
			if err := shmem.AtomicAdd(s.issued, 0, adds, 0); err != nil {
				return err
			}
			if err := pe.Quiet(); err != nil {
				return err
			}
			// The hand-off: worker w of the next PE may start waiting
			// for this round's value before or after it arrives; it
			// sees exactly this round's (the next comes after barrier B).
			if err := shmem.P(s.hand, w, round, (me+1)%n); err != nil {
				return err
			}
			if err := shmem.WaitUntil(s.hand, w, shmem.CmpGE, round); err != nil {
				return err
			}
			if v := s.hand.Local()[w]; v != round {
				return fmt.Errorf("worker %d: hand-off %d in round %d", w, v, round)
			}
			return nil
		}()
		if err != nil {
			err = fmt.Errorf("worker %d: %w", w, err)
		}
		done <- err
	}
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
