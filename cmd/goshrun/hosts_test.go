package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/launch"
	"github.com/goshmem/goshmem/internal/testproc"
)

// goshrun --hosts: one goshrun per host through a remote shell. Here the
// "remote shell" is a script that runs the command on this machine with
// GOSHMEM_HOST set to the host's name (so PEs of different hosts talk
// over TCP), in a new session under a middle process that stays (as an
// ssh client does): the agent's only tie to the launcher is its
// standard input. With GOSHMEM_NETNS3=1 (.ci/run makes namespaces g1..g3
// with .ci/netns.sh up 3) the same tests run across three network
// namespaces with their own host names, through `.ci/netns.sh run`.

type hostsEnv struct {
	goshrun, prog string
	rsh           string   // --rsh
	wrap          []string // what runs the launching goshrun
	hosts         string
	rendezvous    string
	hostOf        []string // expected host name prefix of each rank
}

func buildHostsEnv(t *testing.T) (goshrun, prog string) {
	t.Helper()
	g, c1, err := launch.Build(".")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c1)
	p, c2, err := launch.Build("../../internal/engine/testdata/enginejob")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c2)
	return g, p
}

func localHosts(t *testing.T) hostsEnv {
	g, p := buildHostsEnv(t)
	rsh := filepath.Join(t.TempDir(), "rsh.sh")
	script := "#!/bin/sh\nh=$1; shift\nGOSHMEM_HOST=$h exec setsid --wait \"$@\"\n"
	if err := os.WriteFile(rsh, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("setsid (util-linux) is not installed")
	}
	return hostsEnv{goshrun: g, prog: p, rsh: rsh, hosts: "a:2,b:1,c:1", rendezvous: "127.0.0.1:0",
		hostOf: []string{"a", "a", "b", "c"}}
}

func netnsHosts(t *testing.T) hostsEnv {
	if os.Getenv("GOSHMEM_NETNS3") != "1" {
		t.Skip("set GOSHMEM_NETNS3=1 with namespaces g1..g3 up (.ci/netns.sh up 3, as root; .ci/run does)")
	}
	g, p := buildHostsEnv(t)
	script, err := filepath.Abs("../../.ci/netns.sh")
	if err != nil {
		t.Fatal(err)
	}
	return hostsEnv{goshrun: g, prog: p, rsh: script + " run", wrap: []string{script, "run", "g1"},
		hosts: "g1:2,g2:1,g3:1", rendezvous: "10.77.0.1:0", hostOf: []string{"g1/", "g1/", "g2/", "g3/"}}
}

func (h hostsEnv) start(t *testing.T, mode string) *testproc.Job {
	t.Helper()
	argv := append(append([]string(nil), h.wrap...), h.goshrun, "--hosts", h.hosts, "--rsh", h.rsh,
		"--rendezvous", h.rendezvous, "--timeout", "2m", "--env", "GOSHMEM_TIMEOUT=30s", h.prog, mode)
	return testproc.StartJob(t, exec.Command(argv[0], argv[1:]...))
}

// collect reads output lines until want of them match re (or the end).
func collect(t *testing.T, r *testproc.Job, re *regexp.Regexp, want int) [][]string {
	t.Helper()
	var got [][]string
	timer := time.NewTimer(60 * time.Second)
	defer timer.Stop()
	for len(got) < want {
		select {
		case s, ok := <-r.Lines:
			if !ok {
				t.Fatalf("output ended after %d of %d lines; stderr:\n%s", len(got), want, r.Stderr.String())
			}
			if m := re.FindStringSubmatch(s); m != nil {
				got = append(got, m)
			}
		case <-timer.C:
			t.Fatalf("%d of %d lines in 60 s; stderr:\n%s", len(got), want, r.Stderr.String())
		}
	}
	return got
}

// exit waits at most d for the job's end and returns its status.
func exit(t *testing.T, r *testproc.Job, d time.Duration) int {
	t.Helper()
	_, code := r.Wait(t, d)
	return code
}

func pidAlive(pid int) bool {
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

func waitGone(t *testing.T, pids []int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for _, p := range pids {
		for pidAlive(p) {
			if time.Now().After(deadline) {
				t.Fatalf("PE process %d still runs %v after the job ended", p, d)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

var pePidLine = regexp.MustCompile(`^PE (\d+) pid (\d+)$`)

func testHostsJob(t *testing.T, h hostsEnv) {
	r := h.start(t, "ok")
	got := collect(t, r, regexp.MustCompile(`^PE (\d+) of 4 OK launcher=goshrun shm=(\d+)$`), 4)
	for _, m := range got {
		rank, _ := strconv.Atoi(m[1])
		wantShm := "1"
		if rank < 2 {
			wantShm = "2" // ranks 0 and 1 share the first host
		}
		if m[2] != wantShm {
			t.Errorf("PE %d maps %s heaps, want %s: %v", rank, m[2], wantShm, m)
		}
	}
	if code := exit(t, r, 30*time.Second); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, r.Stderr.String())
	}
}

// pids starts mode "kill" and returns every PE's pid once all wait.
func (h hostsEnv) startKill(t *testing.T) (*testproc.Job, map[int]int) {
	r := h.start(t, "kill")
	pids := map[int]int{}
	for _, m := range collect(t, r, pePidLine, 4) {
		rank, _ := strconv.Atoi(m[1])
		pids[rank], _ = strconv.Atoi(m[2])
	}
	collect(t, r, regexp.MustCompile(` waiting$`), 4)
	return r, pids
}

func testHostsKillPE(t *testing.T, h hostsEnv) {
	r, pids := h.startKill(t)
	killed := time.Now()
	syscall.Kill(pids[2], syscall.SIGKILL)
	code := exit(t, r, 30*time.Second)
	took := time.Since(killed)
	t.Logf("kill -9 of PE 2 (host %s) ended the job in %v with status %d", h.hostOf[2], took.Round(time.Millisecond), code)
	if code != 137 || took > 5*time.Second {
		t.Errorf("exit %d after %v, want 137 within 5 s; stderr:\n%s", code, took, r.Stderr.String())
	}
	if !strings.Contains(r.Stderr.String(), "goshrun: PE 2 killed by signal killed") {
		t.Errorf("stderr does not name PE 2:\n%s", r.Stderr.String())
	}
	all := []int{pids[0], pids[1], pids[2], pids[3]}
	waitGone(t, all, 3*time.Second)
}

// A remote PE dies when its goshrun's connection is lost: kill -9 of
// the launching goshrun ends every host's PEs.
func testHostsKillLauncher(t *testing.T, h hostsEnv) {
	r, pids := h.startKill(t)
	killed := time.Now()
	syscall.Kill(r.Cmd.Process.Pid, syscall.SIGKILL)
	all := []int{pids[0], pids[1], pids[2], pids[3]}
	waitGone(t, all, 5*time.Second)
	t.Logf("kill -9 of the launching goshrun ended every PE in %v", time.Since(killed).Round(time.Millisecond))
}

func testHostsGlobalExit(t *testing.T, h hostsEnv) {
	r := h.start(t, "exit7")
	if code := exit(t, r, 30*time.Second); code != 7 {
		t.Fatalf("exit %d, want 7; stderr:\n%s", code, r.Stderr.String())
	}
}

func runHostsTests(t *testing.T, h hostsEnv) {
	t.Run("job", func(t *testing.T) { testHostsJob(t, h) })
	t.Run("kill9PE", func(t *testing.T) { testHostsKillPE(t, h) })
	t.Run("kill9launcher", func(t *testing.T) { testHostsKillLauncher(t, h) })
	t.Run("globalexit7", func(t *testing.T) { testHostsGlobalExit(t, h) })
}

func TestHostsLocal(t *testing.T) { runHostsTests(t, localHosts(t)) }
func TestHostsNetns(t *testing.T) { runHostsTests(t, netnsHosts(t)) }

func TestHostsUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--hosts", "a:0", "prog"},
		{"--hosts", "a:2,", "prog"},
		{"--hosts", "a:x", "prog"},
		{"-n", "3", "--hosts", "a:2", "prog"},
		{"--hosts", "a:2", "--host-list", "x", "prog"},
	} {
		if code, _, errOut := goshrun(t, args...); code != 2 {
			t.Errorf("%q: code %d, want 2 (%s)", args, code, errOut)
		}
	}
	if hs, err := launch.ParseHosts("h1:2,h2,h3:1"); err != nil || fmt.Sprint(hs) != "[{h1 2} {h2 1} {h3 1}]" {
		t.Errorf("ParseHosts = %v, %v", hs, err)
	}
}

// With ssh as the remote shell, the command reaches the remote shell as
// one string: goshrun quotes each argument. A stand-in "ssh" joins its
// arguments and hands them to sh -c, as sshd does.
func TestHostsSSHQuoting(t *testing.T) {
	g, _ := buildHostsEnv(t)
	dir := t.TempDir()
	ssh := filepath.Join(dir, "ssh")
	script := "#!/bin/sh\nh=$1; shift\nGOSHMEM_HOST=$h exec sh -c \"$*\"\n"
	if err := os.WriteFile(ssh, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := goshrunBin(t, g, "--hosts", "a,b", "--rsh", ssh, "--rendezvous", "127.0.0.1:0",
		"--env", "X=it's  spaced", "--", "sh", "-c", `echo "rank $GOSHMEM_RANK of $GOSHMEM_SIZE: $X; \$1=$1"`, "zero", "arg with 'quotes'")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		`rank 0 of 2: it's  spaced; $1=arg with 'quotes'`,
		`rank 1 of 2: it's  spaced; $1=arg with 'quotes'`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("output %q lacks %q", out, want)
		}
	}
}

// goshrunBin runs the goshrun binary bin (a real process, for the remote
// shell to start again).
func goshrunBin(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr testproc.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := cmd.ProcessState.ExitCode()
	if err != nil && code < 0 {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}
