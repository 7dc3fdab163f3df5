package collective

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/scenario"
	"github.com/goshmem/goshmem/internal/testhook"
	"github.com/goshmem/goshmem/shmem"
)

// A member that dies inside a collective, at a chosen step of the
// algorithm (testhook.Step), makes the call of every other member end
// with ErrPeerLost within half the PE timeout, never a hang, and no
// member writes outside its dst. A survivor's call may also succeed when
// the victim had already given all that this survivor needed; then its
// result must be right, and one of its next calls fails instead.
//
// Each job runs the case's call once with the victim counting its steps
// (S), checks every member's result, then runs it again with the victim
// dying at one death point: before its first step (0: its entry), after
// the first (1: its entry exchange done), half-way (S/2) or before its
// last (S-1: its exit exchange). A goroutine PE dies by panicking out of
// the hook, which Run takes as that PE's failure, as TestPeerLost's PE
// that returns an error; a process kills itself with SIGKILL.

// dieTimeout is the PE timeout of these jobs, far below the default, so
// that a wait that misses the loss ends (ErrTimeout, a test failure)
// instead of hanging; dieBound, half of it, bounds how long a survivor
// may take to learn of the loss.
const (
	dieTimeout = 6 * time.Second
	dieBound   = dieTimeout / 2
	dieGuard   = 16 // guard elements on each side of dst and src
	dieLarge   = 2000
	diePEs     = 4
)

// dieCase is one collective call. dstLen and srcLen are the lengths the
// call needs on a team of np members; want is the value of dst[i] on
// member me after a successful call (ok false: dst[i] must be
// untouched).
type dieCase struct {
	name           string
	algo           string // GOSHMEM_COLLECTIVE_ALGO; "" for auto
	pes            int    // the job's size; 0 for diePEs
	victim         func(np int) int
	dstLen, srcLen func(np int) int
	call           func(t *shmem.Team, dst, src shmem.Sym[float64]) error
	want           func(i, me, np int) (v float64, ok bool)
}

// dieSrc is member me's src[i]: distinct for every member and index,
// and small enough that every sum here is exact.
func dieSrc(me, i int) float64 { return float64((me+1)*100000 + i) }

const dieSentinel = -0.5

func fixed(n int) func(int) int { return func(int) int { return n } }
func perPE(n int) func(int) int { return func(np int) int { return n * np } }
func last(np int) int           { return np - 1 }
func first(int) int             { return 0 }

// sumTo is the sum over members lo..hi-1 of their src[i].
func sumTo(lo, hi, i int) float64 {
	s := 0.0
	for j := lo; j < hi; j++ {
		s += dieSrc(j, i)
	}
	return s
}

// dieCases: every collective family, small (one message through the
// scratch) and large (the direct, ring and pushing algorithms; across
// hosts the pair, halving, root ring and scatter ones), and the
// scratch algorithm in pieces (rd), which gives a small algorithm more
// than one step.
var dieCases = func() []dieCase {
	var cs []dieCase
	barrier := func(victim func(int) int) dieCase {
		return dieCase{victim: victim, dstLen: fixed(1), srcLen: fixed(1),
			call: func(t *shmem.Team, _, _ shmem.Sym[float64]) error { return Barrier(t) },
			want: func(int, int, int) (float64, bool) { return 0, false }}
	}
	bcast := func(n, root int) dieCase {
		return dieCase{dstLen: fixed(n), srcLen: fixed(n),
			call: func(t *shmem.Team, d, s shmem.Sym[float64]) error { return Broadcast(t, d, s, root) },
			want: func(i, me, np int) (float64, bool) { return dieSrc(root, i), true }}
	}
	allreduce := func(n int) dieCase {
		return dieCase{dstLen: fixed(n), srcLen: fixed(n),
			call: func(t *shmem.Team, d, s shmem.Sym[float64]) error { return AllReduce(t, d, s, Sum) },
			want: func(i, me, np int) (float64, bool) { return sumTo(0, np, i), true }}
	}
	reduceTo := func(n, root int) dieCase {
		return dieCase{dstLen: fixed(n), srcLen: fixed(n),
			call: func(t *shmem.Team, d, s shmem.Sym[float64]) error { return Reduce(t, d, s, Sum, root) },
			want: func(i, me, np int) (float64, bool) { return sumTo(0, np, i), me == root }}
	}
	scanOf := func(n int, inclusive bool) dieCase {
		return dieCase{dstLen: fixed(n), srcLen: fixed(n),
			call: func(t *shmem.Team, d, s shmem.Sym[float64]) error {
				if inclusive {
					return InScan(t, d, s, Sum)
				}
				return ExScan(t, d, s, Sum)
			},
			want: func(i, me, np int) (float64, bool) {
				if inclusive {
					return sumTo(0, me+1, i), true
				}
				return sumTo(0, me, i), true
			}}
	}
	fcollect := func(n int) dieCase {
		return dieCase{dstLen: perPE(n), srcLen: fixed(n),
			call: func(t *shmem.Team, d, s shmem.Sym[float64]) error { return FCollect(t, d, s) },
			want: func(i, me, np int) (float64, bool) { return dieSrc(i/n, i%n), true }}
	}
	collect := func(n int) dieCase {
		return dieCase{dstLen: perPE(n), srcLen: fixed(n),
			call: func(t *shmem.Team, d, s shmem.Sym[float64]) error {
				total, err := Collect(t, d, s, n)
				if err == nil && total != n*t.NPEs() {
					return fmt.Errorf("Collect returned a total of %d, want %d", total, n*t.NPEs())
				}
				return err
			},
			want: func(i, me, np int) (float64, bool) { return dieSrc(i/n, i%n), true }}
	}
	alltoall := func(n int) dieCase {
		return dieCase{dstLen: perPE(n), srcLen: perPE(n),
			call: func(t *shmem.Team, d, s shmem.Sym[float64]) error { return AllToAll(t, d, s, n) },
			want: func(i, me, np int) (float64, bool) { return dieSrc(i/n, me*n+i%n), true }}
	}
	// AllToAllS with strides 2 (dst) and 3 (src): element k of the
	// block for member j is src[(j*n+k)*3], landing at dst[(me*n+k)*2].
	alltoallS := func(n int) dieCase {
		return dieCase{
			dstLen: func(np int) int { return (np*n-1)*2 + 1 },
			srcLen: func(np int) int { return (np*n-1)*3 + 1 },
			call:   func(t *shmem.Team, d, s shmem.Sym[float64]) error { return AllToAllS(t, d, s, 2, 3, n) },
			want: func(i, me, np int) (float64, bool) {
				if i%2 != 0 {
					return 0, false
				}
				e := i / 2
				return dieSrc(e/n, (me*n+e%n)*3), true
			}}
	}
	add := func(name, algo string, victim func(int) int, c dieCase) {
		c.name, c.algo = name, algo
		if c.victim == nil {
			c.victim = victim
		}
		cs = append(cs, c)
	}
	add("barrier/last", "", nil, barrier(last))
	add("barrier/first", "", nil, barrier(first)) // the gather barrier's root across hosts
	b9 := barrier(func(int) int { return 5 })
	b9.pes = 9 // dissemination across hosts (flat on one)
	add("barrier/9", "", nil, b9)
	add("broadcast/small", "", last, bcast(4, 0))
	add("broadcast/pieces", "rd", first, bcast(200, 0)) // the root dies
	add("broadcast/large", "", last, bcast(dieLarge, 0))
	add("broadcast/large-root", "", first, bcast(dieLarge, 0))
	add("reduce/small", "", last, reduceTo(4, 0))
	add("reduce/large", "", last, reduceTo(dieLarge, 0))
	add("allreduce/small", "", last, allreduce(4))
	rd9 := allreduce(4)
	rd9.pes = 9 // recursive doubling, with an extra member
	add("allreduce/small9", "", first, rd9)
	rd9 = allreduce(200)
	rd9.pes = 9
	add("allreduce/pieces9", "rd", first, rd9)
	add("allreduce/pieces", "rd", last, allreduce(200))
	add("allreduce/large", "", last, allreduce(dieLarge))
	add("allreduce/ring", "ring", last, allreduce(dieLarge))
	add("allreduce/pushring", "pushring", last, allreduce(dieLarge))
	add("allreduce/halving", "halving", last, allreduce(dieLarge))
	add("inscan/small", "", first, scanOf(4, true))
	add("exscan/large", "", first, scanOf(dieLarge, false))
	add("fcollect/small", "", last, fcollect(2))
	add("fcollect/large", "", last, fcollect(dieLarge))
	add("collect/large", "", first, collect(dieLarge))
	add("alltoall/small", "", last, alltoall(2))
	add("alltoall/large", "", last, alltoall(dieLarge/diePEs))
	add("alltoalls/large", "", first, alltoallS(dieLarge/diePEs))
	return cs
}()

func (c dieCase) np() int {
	if c.pes == 0 {
		return diePEs
	}
	return c.pes
}

// dieHosts are the pretend hosts of a job of np PEs: kind "" for one
// host, else as scenario.Hosts.
func dieHosts(kind string, np int) []string {
	if kind == "" {
		return nil
	}
	return scenario.Hosts(kind, np)
}

func dieCaseNamed(name string) (dieCase, bool) {
	for _, c := range dieCases {
		if c.name == name {
			return c, true
		}
	}
	return dieCase{}, false
}

// dieSteps are the victim's death points in a call of steps steps:
// before its first step (its entry), after the first (its entry exchange
// done), half-way, and before its last (its exit exchange), each once.
func dieSteps(steps int) []int {
	var at []int
	for _, s := range []int{0, 1, steps / 2, steps - 1} {
		if s >= 0 && s < steps && !slices.Contains(at, s) {
			at = append(at, s)
		}
	}
	return at
}

// dieHook is the victim's testhook.Step: it counts the victim's steps
// (counting) or kills it at step at (dying); other PEs pass through.
type dieHook struct {
	victim int
	mode   atomic.Int32 // 0: off, 1: counting, 2: dying
	steps  atomic.Int64 // counting: the most steps seen in a call
	at     atomic.Int64 // dying: the step to die at
	kill   func(step int)
}

func (h *dieHook) step(rank, step int) {
	if rank != h.victim {
		return
	}
	switch h.mode.Load() {
	case 1:
		if int64(step+1) > h.steps.Load() {
			h.steps.Store(int64(step + 1))
		}
	case 2:
		if int64(step) == h.at.Load() {
			h.mode.Store(0)
			h.kill(step)
		}
	}
}

// errDied is the victim's panic value in a goroutine PE.
var errDied = errors.New("the victim died in its collective")

// dieVerdict is what one member saw: for a survivor, its error (nil
// when everything held) and in which call the loss came (0: the one the
// victim died in); for the victim, the step it died at of how many.
type dieVerdict struct {
	err        error
	lostInCall int
	steps, at  int
	died       bool
}

// dieRun is one PE's part of a job: the counting call, then the call the
// victim dies in at step at, of the steps steps the counting call must
// have shown (at -1: the counting call only, whose count the victim
// reports). kill is how the victim dies; report takes each member's
// verdict.
func dieRun(pe *shmem.PE, c dieCase, at, steps int, kill func(step int), report func(dieVerdict)) error {
	w := pe.World()
	me, np := w.MyPE(), w.NPEs()
	victim := c.victim(np)
	dl, sl := c.dstLen(np), c.srcLen(np)
	dAll, err := shmem.Malloc[float64](pe, dl+2*dieGuard)
	if err != nil {
		return err
	}
	sAll, err := shmem.Malloc[float64](pe, sl+2*dieGuard)
	if err != nil {
		return err
	}
	ready, err := shmem.Malloc[uint64](pe, 1)
	if err != nil {
		return err
	}
	dst, src := dAll.Slice(dieGuard, dieGuard+dl), sAll.Slice(dieGuard, dieGuard+sl)
	d, s := dAll.Local(), sAll.Local()
	for i := range d {
		d[i] = dieSentinel
	}
	for i := range s {
		s[i] = dieSentinel
	}
	for i := range sl {
		s[dieGuard+i] = dieSrc(me, i)
	}
	// check looks at this member's buffers after a call: the guards and
	// src as set, and dst as want says when the call succeeded.
	check := func(ok bool) error {
		for i := range d {
			j := i - dieGuard
			want, set := dieSentinel, false
			if j >= 0 && j < dl && ok {
				want, set = c.want(j, me, np)
				if !set {
					want = dieSentinel
				}
			}
			if j >= 0 && j < dl && !ok {
				continue // a failed call may have written any of dst
			}
			if d[i] != want {
				return fmt.Errorf("PE %d: dst[%d] (guard %d) is %v, want %v", me, j, dieGuard, d[i], want)
			}
		}
		for i := range s {
			want := dieSentinel
			if j := i - dieGuard; j >= 0 && j < sl {
				want = dieSrc(me, j)
			}
			if s[i] != want {
				return fmt.Errorf("PE %d: src[%d] (guard %d) changed to %v", me, i-dieGuard, dieGuard, s[i])
			}
		}
		return nil
	}
	var h *dieHook
	if me == victim {
		h = &dieHook{victim: pe.MyPE(), kill: kill}
		f := h.step
		testhook.Step.Store(&f)
		h.mode.Store(1)
	}
	if err := c.call(w, dst, src); err != nil {
		return fmt.Errorf("PE %d: the counting call: %w", me, err)
	}
	if err := check(true); err != nil {
		return fmt.Errorf("the counting call: %w", err)
	}
	for i := range dl {
		d[dieGuard+i] = dieSentinel
	}
	if at < 0 {
		if me == victim {
			report(dieVerdict{steps: int(h.steps.Load())})
		}
		return nil
	}
	// The victim enters the call it dies in only once every survivor is
	// out of the counting call: a death is seen at once by every wait,
	// even one whose data is on its way, so a victim that died right
	// after it left the counting call could fail the others' (as it may
	// in a program; here it would test nothing).
	if me != victim {
		if err := shmem.AtomicAdd(ready, 0, 1, w.WorldPE(victim)); err != nil {
			return err
		}
	} else {
		if err := shmem.WaitUntil(ready, 0, shmem.CmpGE, uint64(np-1)); err != nil {
			return err
		}
		if got := int(h.steps.Load()); got != steps {
			return fmt.Errorf("PE %d: the call took %d steps, and %d in the counting job", me, got, steps)
		}
		h.at.Store(int64(at))
		h.mode.Store(2)
		report(dieVerdict{steps: steps, at: at, died: true})
		err := c.call(w, dst, src)
		return fmt.Errorf("PE %d: the victim's call returned (%v) instead of dying at step %d of %d", me, err, at, steps)
	}
	// A survivor: the call, then more of them until one fails (the
	// first one may succeed, with the victim's part given). A call that
	// still succeeds after three is a failure: the victim is dead.
	start := time.Now()
	for k := 0; k < 4; k++ {
		err := c.call(w, dst, src)
		if cerr := check(err == nil); cerr != nil {
			report(dieVerdict{err: fmt.Errorf("call %d after the victim's death (%v): %w", k, err, cerr)})
			return nil
		}
		if err == nil {
			continue
		}
		if took := time.Since(start); took > dieBound {
			err = fmt.Errorf("PE %d learnt of the loss after %v (bound %v): %w", me, took, dieBound, err)
		} else if !errors.Is(err, shmem.ErrPeerLost) {
			err = fmt.Errorf("PE %d: the call ended with %w, want ErrPeerLost", me, err)
		} else {
			err = nil
		}
		report(dieVerdict{err: err, lostInCall: k})
		return nil
	}
	report(dieVerdict{err: fmt.Errorf("PE %d: four calls succeeded after the victim's death", me)})
	return nil
}

// dieCount is the number of steps the victim of case c takes in its
// call, on goroutine PEs on hosts (nil: one host).
func dieCount(t *testing.T, c dieCase, hosts []string) int {
	t.Helper()
	verdicts, err := dieJob(t, c, -1, 0, hosts)
	if err != nil {
		t.Fatalf("the counting job: %v", err)
	}
	steps := verdicts[c.victim(c.np())].steps
	if steps < 1 {
		t.Fatalf("the victim took %d steps", steps)
	}
	return steps
}

// dieJob runs dieRun on goroutine PEs on hosts (nil: one host).
func dieJob(t *testing.T, c dieCase, at, steps int, hosts []string) ([]dieVerdict, error) {
	t.Helper()
	t.Setenv(envAlgo, c.algo)
	defer testhook.Step.Store(nil)
	verdicts := make([]dieVerdict, c.np())
	opts := []shmem.Option{shmem.WithTimeout(dieTimeout), shmem.WithHeapSize(4 << 20)}
	if hosts != nil {
		opts = append(opts, shmem.WithHosts(hosts))
	}
	// A wait the PE timeout does not bound (a loop outside shmem's
	// waits) would hang the job: the test fails at three timeouts,
	// leaving the job's goroutines behind.
	done := make(chan error, 1)
	go func() {
		done <- shmem.Run(c.np(), func(pe *shmem.PE) error {
			return dieRun(pe, c, at, steps, func(int) { panic(errDied) }, func(v dieVerdict) { verdicts[pe.MyPE()] = v })
		}, opts...)
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(3 * dieTimeout):
		t.Fatalf("the job has not ended after %v: a PE waits forever", 3*dieTimeout)
	}
	if errors.Is(err, shmem.ErrInvalid) && strings.Contains(err.Error(), "netmesh") {
		t.Skipf("remote PEs are not built: %v", err)
	}
	return verdicts, err
}

// dieJudge checks the verdicts of a job: the victim died at its step,
// and every survivor learnt of it in time with its buffers intact.
// runErr is the job's error, which is the victim's death.
func dieJudge(t *testing.T, c dieCase, verdicts []dieVerdict, runErr error) {
	t.Helper()
	victim := c.victim(len(verdicts))
	v := verdicts[victim]
	if !v.died {
		t.Fatalf("the victim, PE %d, did not reach its death (job: %v)", victim, runErr)
	}
	if runErr == nil {
		t.Fatalf("the job succeeded although PE %d died", victim)
	}
	late := 0
	for r, v := range verdicts {
		if r == victim {
			continue
		}
		if v.err != nil {
			t.Errorf("survivor PE %d: %v", r, v.err)
		}
		if v.lostInCall > 0 {
			late++
		}
	}
	t.Logf("PE %d died at step %d of %d; %d survivors completed that call first", victim, v.at, v.steps, late)
}

func TestDieMidCollective(t *testing.T) {
	routes := []struct {
		name  string
		hosts string
	}{{"goroutines", ""}, {"tcp", "remote"}}
	for _, r := range routes {
		for _, c := range dieCases {
			t.Run(r.name+"/"+c.name, func(t *testing.T) {
				hosts := dieHosts(r.hosts, c.np())
				steps := dieCount(t, c, hosts)
				for _, at := range dieSteps(steps) {
					t.Run("step"+strconv.Itoa(at), func(t *testing.T) {
						verdicts, err := dieJob(t, c, at, steps, hosts)
						dieJudge(t, c, verdicts, err)
					})
				}
			})
		}
	}
}

// The processes route: the same job as separate processes of this test
// binary. The victim kills itself with SIGKILL; the launcher then sends
// SIGTERM to the others, and SIGKILL launch.DefaultGrace (2 s) later, so
// the survivors ignore SIGTERM and write their verdicts into files, each
// before that SIGKILL or not at all (a failure).
const envDie = "GOSHMEM_COLLECTIVE_TEST_DIE" // case name, step, steps, verdict directory

var _ = register("die", func(pe *shmem.PE) error {
	f := strings.Split(os.Getenv(envDie), ",")
	if len(f) != 4 {
		return fmt.Errorf("%s=%q: want case,step,steps,dir", envDie, os.Getenv(envDie))
	}
	c, ok := dieCaseNamed(f[0])
	at, err1 := strconv.Atoi(f[1])
	steps, err2 := strconv.Atoi(f[2])
	if !ok || err1 != nil || err2 != nil {
		return fmt.Errorf("%s=%q: no such case or a bad number", envDie, os.Getenv(envDie))
	}
	signal.Ignore(syscall.SIGTERM)
	me := pe.MyPE()
	var werr error
	report := func(v dieVerdict) {
		line := fmt.Sprintf("ok %d", v.lostInCall)
		switch {
		case v.died:
			line = fmt.Sprintf("died %d %d", v.at, v.steps)
		case v.err != nil:
			line = "error " + v.err.Error()
		}
		werr = os.WriteFile(filepath.Join(f[3], "pe"+strconv.Itoa(me)), []byte(line), 0o600)
	}
	kill := func(int) {
		if werr == nil {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}
	if err := dieRun(pe, c, at, steps, kill, report); err != nil {
		return err
	}
	return werr
})

// dieProcesses runs case c with the victim dying at step at of steps as
// processes on hosts (nil: one host) and returns the members' verdicts.
func dieProcesses(t *testing.T, c dieCase, at, steps int, hosts []string) ([]dieVerdict, error) {
	dir := t.TempDir()
	runErr := scenarios.Processes(c.np(), "die", hosts,
		envDie+"="+strings.Join([]string{c.name, strconv.Itoa(at), strconv.Itoa(steps), dir}, ","),
		envAlgo+"="+c.algo, "GOSHMEM_TIMEOUT="+dieTimeout.String())
	verdicts := make([]dieVerdict, c.np())
	for r := range verdicts {
		b, err := os.ReadFile(filepath.Join(dir, "pe"+strconv.Itoa(r)))
		if err != nil {
			verdicts[r].err = fmt.Errorf("no verdict (%v); the job: %v", err, runErr)
			continue
		}
		word, rest, _ := strings.Cut(string(b), " ")
		v := &verdicts[r]
		switch word {
		case "died":
			v.died = true
			_, err = fmt.Sscanf(rest, "%d %d", &v.at, &v.steps)
		case "ok":
			_, err = fmt.Sscanf(rest, "%d", &v.lostInCall)
		default:
			err = errors.New(rest)
		}
		if err != nil {
			v.err = err
		}
	}
	return verdicts, runErr
}

// Separate processes: on one host (the liveness link tells of a killed
// PE) and on pretend hosts in pairs (the TCP link does, for the PE on
// the other host). Steps are counted by a goroutine job on the same
// hosts; the victim checks its count.
func TestDieMidCollectiveProcesses(t *testing.T) {
	routes := []struct {
		name  string
		hosts string
	}{{"processes", ""}, {"processes-mixed", "mixed"}}
	for _, r := range routes {
		for _, c := range dieCases {
			t.Run(r.name+"/"+c.name, func(t *testing.T) {
				hosts := dieHosts(r.hosts, c.np())
				steps := dieCount(t, c, hosts)
				// Two death points (after the entry exchange and before
				// the last step), one under -short: a process job costs
				// tens of milliseconds.
				all := dieSteps(steps)
				at := []int{all[min(1, len(all)-1)]}
				if !small && all[len(all)-1] != at[0] {
					at = append(at, all[len(all)-1])
				}
				for _, at := range at {
					t.Run("step"+strconv.Itoa(at), func(t *testing.T) {
						verdicts, err := dieProcesses(t, c, at, steps, hosts)
						dieJudge(t, c, verdicts, err)
					})
				}
			})
		}
	}
}
