package engine

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/testproc"
)

// The engine tests run the PE program testdata/enginejob under the real
// engines: mpirun (Open MPI), mpiexec.hydra (MPICH, with PMI_FD and with
// -pmi-port), and srun (Slurm, plain and --mpi=pmi2). .ci/run installs
// the engines, starts a one-node Slurm, and sets GOSHMEM_ENGINES=1.

const enginePEs = 4

// buildJob builds the PE program once per test binary run.
func buildJob(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "enginejob")
	cmd := exec.Command("go", "build", "-o", bin, "./testdata/enginejob")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the PE program: %v\n%s", err, out)
	}
	return bin
}

func TestEngines(t *testing.T) {
	if os.Getenv("GOSHMEM_ENGINES") != "1" {
		t.Skip("set GOSHMEM_ENGINES=1 to run jobs under mpirun, mpiexec.hydra and srun (.ci/run does, after installing them)")
	}
	if runtime.GOOS != "linux" {
		t.Skip("Linux only")
	}
	bin := buildJob(t)
	for _, l := range Commands(enginePEs) {
		t.Run(l.Label, func(t *testing.T) {
			if err := l.Usable(); err != nil {
				t.Skip(err)
			}
			t.Run("job", func(t *testing.T) { engineJob(t, l, bin, nil) })
			t.Run("keyfile", func(t *testing.T) {
				// No GOSHMEM_KEY: every PE reads (one creates) the key file.
				engineJob(t, l, bin, []string{"HOME=" + t.TempDir(), "GOSHMEM_KEY="})
			})
			t.Run("kill9", func(t *testing.T) { engineKill(t, l, bin, false) })
			t.Run("kill9all", func(t *testing.T) { engineKill(t, l, bin, true) })
			t.Run("globalexit7", func(t *testing.T) { engineExit(t, l, bin) })
			t.Run("wrongkey", func(t *testing.T) { engineWrongKey(t, l, bin) })
		})
	}
}

// start runs the engine with the PE program in mode; extra entries
// override the environment ("K=" with an empty value removes K).
func start(t *testing.T, l Command, bin, mode string, extra []string) *testproc.Job {
	t.Helper()
	args := append(append([]string(nil), l.Args...), bin, mode)
	cmd := exec.Command(l.Path, args...)
	env := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	env["GOSHMEM_KEY"] = strings.Repeat("3c", KeySize)
	env["GOSHMEM_TIMEOUT"] = "20s"
	for _, kv := range extra {
		k, v, _ := strings.Cut(kv, "=")
		if v == "" {
			delete(env, k)
		} else {
			env[k] = v
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	return testproc.StartJob(t, cmd)
}

// goshmemSockets lists the abstract rendezvous sockets of engine jobs
// ("@goshmem-rdv-..."). Segment-exchange sockets die with their
// processes, which leftovers checks; other goshmem tests running at the
// same time make those, never these.
func goshmemSockets() map[string]bool {
	b, _ := os.ReadFile("/proc/net/unix")
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 8 && strings.HasPrefix(f[len(f)-1], "@goshmem-rdv-") {
			out[f[len(f)-1]] = true
		}
	}
	return out
}

// leftovers waits (at most 3 s) until none of pids is alive (a zombie
// whose parent has not reaped it is dead) and no goshmem socket absent
// from before remains, and reports what is still there.
func leftovers(pids []int, before map[string]bool) []string {
	deadline := time.Now().Add(3 * time.Second)
	for {
		var left []string
		for _, p := range pids {
			st, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
			if err == nil {
				if f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:])); len(f) > 0 && f[0] != "Z" && f[0] != "X" {
					left = append(left, fmt.Sprintf("process %d", p))
				}
			}
		}
		for s := range goshmemSockets() {
			if !before[s] {
				left = append(left, "socket "+s)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var okLine = regexp.MustCompile(`^PE (\d+) of (\d+) OK launcher=(\S+) shm=(\d+)$`)

func engineJob(t *testing.T, l Command, bin string, extra []string) {
	before := goshmemSockets()
	r := start(t, l, bin, "ok", extra)
	lines, code := r.Wait(t, 60*time.Second)
	if code != 0 {
		t.Fatalf("exit %d; output %q; stderr:\n%s", code, lines, r.Stderr.String())
	}
	seen := map[string]bool{}
	for _, s := range lines {
		m := okLine.FindStringSubmatch(s)
		if m == nil {
			continue
		}
		if m[2] != strconv.Itoa(enginePEs) || m[3] != l.Launcher || m[4] != strconv.Itoa(enginePEs) {
			t.Errorf("%q: want %d PEs, launcher %s, %d sharing memory", s, enginePEs, l.Launcher, enginePEs)
		}
		seen[m[1]] = true
	}
	if len(seen) != enginePEs {
		t.Fatalf("%d PEs reported OK, want %d: %q; stderr:\n%s", len(seen), enginePEs, lines, r.Stderr.String())
	}
	if left := leftovers(nil, before); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

var pidLine = regexp.MustCompile(`^PE (\d+) pid (\d+)$`)

// engineKill kills PE 2 (every PE when all) with SIGKILL while every PE
// waits, and checks that the job ends within 5 s, non-zero, naming PE 2,
// and that no PE process or rendezvous socket is left.
func engineKill(t *testing.T, l Command, bin string, all bool) {
	before := goshmemSockets()
	r := start(t, l, bin, "kill", nil)
	pids := map[int]int{}
	waiting := 0
	var lines []string
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	for waiting < enginePEs {
		select {
		case s, ok := <-r.Lines:
			if !ok {
				t.Fatalf("the job ended before every PE waited: %q; stderr:\n%s", lines, r.Stderr.String())
			}
			lines = append(lines, s)
			if m := pidLine.FindStringSubmatch(s); m != nil {
				rank, _ := strconv.Atoi(m[1])
				pids[rank], _ = strconv.Atoi(m[2])
			}
			if strings.HasSuffix(s, " waiting") {
				waiting++
			}
		case <-timer.C:
			t.Fatalf("PEs did not start waiting: %q; stderr:\n%s", lines, r.Stderr.String())
		}
	}
	victim := pids[2]
	if victim == 0 {
		t.Fatalf("no pid for PE 2 in %q", lines)
	}
	killed := time.Now()
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	what := "PE 2"
	if all {
		what = "every PE"
		for rank, p := range pids {
			if rank != 2 {
				syscall.Kill(p, syscall.SIGKILL) // some may be gone already
			}
		}
	}
	_, code := r.Wait(t, 30*time.Second)
	took := time.Since(killed)
	t.Logf("%s: kill -9 of %s ended the job in %v with status %d", l.Label, what, took.Round(time.Millisecond), code)
	if took > 5*time.Second {
		t.Errorf("the job took %v to end after PE 2 died, want under 5 s", took)
	}
	if code == 0 {
		t.Errorf("the job exited 0 after PE 2 was killed")
	}
	stderr := r.Stderr.String()
	switch {
	case all:
		// Nobody is left to name anyone: the engine reports.
		t.Logf("%s's report: %q", l.Path, strings.TrimSpace(stderr))
	case l.SelfKill:
		// Hydra SIGKILLs every other rank itself within milliseconds,
		// often before the runtime can say anything, and exits 9 (the
		// signal's number) or 255; what it prints is its own.
		t.Logf("%s's own report: %q", l.Path, strings.TrimSpace(stderr))
	case !strings.Contains(stderr, "PE 2 was lost"):
		t.Errorf("stderr does not name PE 2:\n%s", stderr)
	}
	procs := make([]int, 0, len(pids))
	for _, p := range pids {
		procs = append(procs, p)
	}
	if left := leftovers(procs, before); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

func engineExit(t *testing.T, l Command, bin string) {
	before := goshmemSockets()
	r := start(t, l, bin, "exit7", nil)
	_, code := r.Wait(t, 30*time.Second)
	if code != 7 {
		t.Errorf("GlobalExit(7) made %s exit %d, want 7; stderr:\n%s", l.Path, code, r.Stderr.String())
	}
	if left := leftovers(nil, before); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

func engineWrongKey(t *testing.T, l Command, bin string) {
	// PE 2 holds another key; the others wait for it until their
	// timeout unless the engine ends them first.
	r := start(t, l, bin, "badkey", []string{"GOSHMEM_TIMEOUT=4s"})
	_, code := r.Wait(t, 30*time.Second)
	stderr := r.Stderr.String()
	if code == 0 {
		t.Errorf("a job with a PE holding the wrong key exited 0")
	}
	if !strings.Contains(stderr, "enginejob: Init:") || !strings.Contains(stderr, "authentication failed") {
		t.Errorf("stderr does not show PE 2's Init refused:\n%s", stderr)
	}
}
