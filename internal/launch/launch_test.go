package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/errs"
)

// peBin is the test PE (testdata/pe), built once by TestMain.
var peBin string

func TestMain(m *testing.M) {
	bin, cleanup, err := Build("./testdata/pe")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	peBin = bin
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// hang bounds every job in these tests; a job that should end in a
// second or two but takes this long is a hang.
const hang = 60 * time.Second

type result struct {
	code    int
	err     error
	stdout  string
	stderr  string
	elapsed time.Duration
}

// run runs j with the test PE, mode as PE_TEST_MODE, and buffers for
// the output.
func run(t *testing.T, j *Job, mode string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if j.Program == "" {
		j.Program = peBin
	}
	j.Stdout, j.Stderr = &stdout, &stderr
	j.Env = append(j.Env, "PE_TEST_MODE="+mode)
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	start := time.Now()
	code, err := j.Run(ctx)
	res := result{code, err, stdout.String(), stderr.String(), time.Since(start)}
	if res.elapsed > hang/2 {
		t.Errorf("job took %v", res.elapsed)
	}
	return res
}

func (r result) String() string {
	return fmt.Sprintf("code %d err %v after %v\nstdout:\n%s\nstderr:\n%s", r.code, r.err, r.elapsed, r.stdout, r.stderr)
}

// pidDir returns a directory for the PEs' pid files and its env entry.
func pidDir(t *testing.T) (string, string) {
	d := t.TempDir()
	return d, "PE_TEST_PIDDIR=" + d
}

// readPids returns every pid the PEs wrote.
func readPids(t *testing.T, dir string) []int {
	t.Helper()
	var pids []int
	files, _ := filepath.Glob(filepath.Join(dir, "[0-9]*"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(s)
			if err != nil {
				t.Fatal(err)
			}
			pids = append(pids, pid)
		}
	}
	return pids
}

// gone reports whether pid no longer runs (absent or a zombie waiting
// for whoever reaps orphans).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

func expectGone(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for !gone(pid) {
			if time.Now().After(deadline) {
				t.Errorf("process %d still runs", pid)
				syscall.Kill(pid, syscall.SIGKILL)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func TestAllSucceed(t *testing.T) {
	r := run(t, &Job{N: 4}, "*=ok")
	if r.code != 0 || r.err != nil || r.stderr != "" {
		t.Fatal(r)
	}
}

func TestOneFails(t *testing.T) {
	dir, env := pidDir(t)
	r := run(t, &Job{N: 3, Env: []string{env}}, "1=exit3,*=sleepchild")
	if r.code != 3 || r.err != nil {
		t.Fatal(r)
	}
	if !strings.Contains(r.stderr, "goshrun: PE 1 exited with status 3\n") {
		t.Fatalf("no failure line: %v", r)
	}
	if n := strings.Count(r.stderr, "goshrun:"); n != 1 {
		t.Errorf("%d launcher lines, want 1: %v", n, r)
	}
	pids := readPids(t, dir)
	if len(pids) != 5 { // 3 PEs and 2 children
		t.Fatalf("pids %v", pids)
	}
	expectGone(t, pids)
}

func TestKilledBySignal(t *testing.T) {
	r := run(t, &Job{N: 2}, "0=kill9,*=sleep")
	if r.code != 128+9 || !strings.Contains(r.stderr, "goshrun: PE 0 killed by signal killed") {
		t.Fatal(r)
	}
}

// A survivor that fails because its peer died is not blamed for the
// death, even when the launcher reaps it first: PE 2's status reaches
// the launcher 0.4 s late (a child holds its output open), while the
// others exit 7 as soon as the boot server reports PE 2 lost.
func TestSurvivorNotBlamed(t *testing.T) {
	for i := range 3 {
		r := run(t, &Job{N: 4}, "2=kill9slow,*=lostexit7")
		if r.code != 128+9 {
			t.Fatalf("run %d: exit %d, want 137 (PE 2 was killed): %v", i, r.code, r)
		}
		first := strings.Index(r.stderr, "goshrun: PE 2 killed by signal killed")
		if first < 0 || strings.Index(r.stderr, "exited with status 7") < first {
			t.Fatalf("run %d: PE 2 is not named first: %v", i, r)
		}
	}
}

// NoGrace (goshrun --grace 0s) kills at once instead of meaning the
// default 2 s.
func TestNoGrace(t *testing.T) {
	dir, env := pidDir(t)
	r := run(t, &Job{N: 3, Env: []string{env}, Grace: NoGrace}, "2=exit3,*=ignoreterm")
	if r.code != 3 {
		t.Fatal(r)
	}
	if r.elapsed >= DefaultGrace {
		t.Fatalf("the job took %v to end: the PEs that ignore SIGTERM waited for a grace", r.elapsed)
	}
	expectGone(t, readPids(t, dir))
}

func TestKillAfterGrace(t *testing.T) {
	dir, env := pidDir(t)
	r := run(t, &Job{N: 3, Env: []string{env}, Grace: 300 * time.Millisecond}, "2=exit3,*=ignoreterm")
	if r.code != 3 {
		t.Fatal(r)
	}
	expectGone(t, readPids(t, dir))
}

func TestGlobalExit(t *testing.T) {
	for _, tc := range []struct {
		mode string
		code int
	}{
		{"0=exit7,*=sleep", 7},
		{"2=exit0,*=sleep", 0},
	} {
		r := run(t, &Job{N: 3}, tc.mode)
		if r.code != tc.code || r.err != nil {
			t.Fatalf("%s: %v", tc.mode, r)
		}
	}
}

func TestExitWithoutBye(t *testing.T) {
	r := run(t, &Job{N: 2}, "0=nobye,*=sleep")
	if r.code != CodeFailure || !strings.Contains(r.stderr, "PE 0 exited with status 0 without closing its connection to the launcher") {
		t.Fatal(r)
	}
}

// A PE that exits 0 without joining, in a job whose other PEs joined,
// ends the job at once: they wait for it in the bootstrap otherwise (the
// test PEs' own bound is 60 s). Both orders: the deserter exits before
// or after the others join.
func TestExitWithoutJoining(t *testing.T) {
	for _, n := range []int{2, 3} {
		start := time.Now()
		r := run(t, &Job{N: n}, "1=nojoin,*=ok")
		if r.code != CodeFailure || !strings.Contains(r.stderr, "PE 1 exited with status 0 without joining the job") {
			t.Fatal(r)
		}
		if el := time.Since(start); el > 10*time.Second {
			t.Fatalf("%d PEs: the job took %v to end", n, el)
		}
	}
}

func TestTagOutput(t *testing.T) {
	r := run(t, &Job{N: 2, TagOutput: true}, "*=print")
	if r.code != 0 {
		t.Fatal(r)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	slices.Sort(lines)
	want := []string{"[0] hello from 0", "[0] no newline", "[0] second line", "[1] hello from 1", "[1] no newline", "[1] second line"}
	if !slices.Equal(lines, want) {
		t.Fatalf("stdout lines %q, want %q", lines, want)
	}
	lines = strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	slices.Sort(lines)
	if want := []string{"[0] err line", "[1] err line"}; !slices.Equal(lines, want) {
		t.Fatalf("stderr lines %q, want %q", lines, want)
	}
}

func TestUntaggedOutput(t *testing.T) {
	r := run(t, &Job{N: 2}, "*=print")
	if r.code != 0 || !strings.Contains(r.stdout, "from 1\nsecond line") || strings.Contains(r.stdout, "[1]") {
		t.Fatal(r)
	}
}

func TestEnv(t *testing.T) {
	r := run(t, &Job{
		N:         2,
		TagOutput: true,
		Hosts:     []string{"hostA", "hostB"},
		Env:       []string{"PE_TEST_EXTRA=x y", "GOSHMEM_RANK=99"},
	}, "*=env")
	if r.code != 0 {
		t.Fatal(r)
	}
	for _, want := range []string{
		"[0] GOSHMEM_RANK=0\n", "[1] GOSHMEM_RANK=1\n",
		"[1] GOSHMEM_SIZE=2\n", "[0] GOSHMEM_HOST=hostA\n", "[1] GOSHMEM_HOST=hostB\n",
		"[0] GOSHMEM_LAUNCHER=goshrun\n", "[1] GOSHMEM_RENDEZVOUS=127.0.0.1:",
		"[0] GOSHMEM_JOBID=gosh-", "[1] keylen=64\n", "[0] PE_TEST_EXTRA=x y\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(r)
	}
}

func TestTimeout(t *testing.T) {
	r := run(t, &Job{N: 2, Timeout: time.Second}, "*=sleep")
	if r.code != CodeTimeout || r.err != nil || !strings.Contains(r.stderr, "goshrun: job timed out after 1s") {
		t.Fatal(r)
	}
}

// waitJoined waits until n PEs have written their pid files (they do so
// after their Allgather, so the whole job has joined).
func waitJoined(t *testing.T, dir string, n int) {
	t.Helper()
	deadline := time.Now().Add(hang / 2)
	for {
		files, _ := filepath.Glob(filepath.Join(dir, "[0-9]*"))
		if len(files) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d PEs joined", len(files), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSignalForwarded(t *testing.T) {
	for _, tc := range []struct {
		mode  string
		grace time.Duration
	}{
		{"*=termok", 0},                          // PEs handle SIGTERM and exit 0
		{"*=ignoreterm", 300 * time.Millisecond}, // PEs ignore it: killed after the grace
	} {
		dir, env := pidDir(t)
		sigs := make(chan os.Signal, 1)
		done := make(chan result, 1)
		go func() {
			done <- run(t, &Job{N: 2, Env: []string{env}, Signals: sigs, Grace: tc.grace}, tc.mode)
		}()
		waitJoined(t, dir, 2)
		sigs <- syscall.SIGTERM
		r := <-done
		if r.code != 128+15 || !strings.Contains(r.stderr, "goshrun: received terminated; forwarding it to every PE") {
			t.Fatalf("%s: %v", tc.mode, r)
		}
		if tc.mode == "*=termok" && strings.Count(r.stdout, "terminated") != 2 {
			t.Fatalf("%s: PEs did not see the signal: %v", tc.mode, r)
		}
		expectGone(t, readPids(t, dir))
	}
}

func TestContextCancel(t *testing.T) {
	dir, env := pidDir(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type out struct {
		code int
		err  error
	}
	done := make(chan out, 1)
	go func() {
		j := &Job{N: 2, Program: peBin, Env: []string{env, "PE_TEST_MODE=*=sleep"}, Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}
		code, err := j.Run(ctx)
		done <- out{code, err}
	}()
	waitJoined(t, dir, 2)
	cancel()
	o := <-done
	if o.code != CodeFailure || !errors.Is(o.err, context.Canceled) {
		t.Fatalf("code %d err %v", o.code, o.err)
	}
	expectGone(t, readPids(t, dir))
}

func TestInvalidJob(t *testing.T) {
	for _, j := range []*Job{
		{N: 0, Program: peBin},
		{N: 1},
		{N: 2, Program: peBin, Hosts: []string{"a"}},
		{N: 1, Program: peBin, Env: []string{"NOEQUALS"}},
	} {
		if code, err := j.Run(context.Background()); code != CodeFailure || !errors.Is(err, errs.Invalid) {
			t.Errorf("%+v: code %d err %v", j, code, err)
		}
	}
}

func TestStartFailure(t *testing.T) {
	j := &Job{N: 2, Program: filepath.Join(t.TempDir(), "missing"), Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}
	if code, err := j.Run(context.Background()); code != CodeFailure || err == nil {
		t.Fatalf("code %d err %v", code, err)
	}
}

func TestBuild(t *testing.T) {
	for _, p := range []string{"./testdata/pe", "./testdata/pe/main.go"} {
		bin, cleanup, err := Build(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		fi, err := os.Stat(bin)
		if err != nil || fi.Mode()&0o111 == 0 {
			t.Fatalf("%s: built %s: %v", p, bin, err)
		}
		if filepath.Base(bin) != map[string]string{"./testdata/pe": "pe", "./testdata/pe/main.go": "main"}[p] {
			t.Errorf("%s: binary named %s", p, bin)
		}
		cleanup()
		if _, err := os.Stat(filepath.Dir(bin)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: cleanup left %s", p, filepath.Dir(bin))
		}
	}
	for _, p := range []string{peBin, "true", "./no-such-file"} {
		bin, cleanup, err := Build(p)
		if err != nil || bin != p {
			t.Fatalf("%s: built %q, %v; want it unchanged", p, bin, err)
		}
		cleanup()
	}
	broken := t.TempDir()
	os.WriteFile(filepath.Join(broken, "main.go"), []byte("package main\nfunc main() { undefined() }\n"), 0o644)
	if _, cleanup, err := Build(filepath.Join(broken, "main.go")); err == nil || !strings.Contains(err.Error(), "undefined") {
		t.Fatalf("broken package: %v", err)
	} else {
		cleanup()
	}
}

func TestNeedsBuild(t *testing.T) {
	for p, want := range map[string]bool{
		"./testdata/pe":          true,
		"./testdata/...":         true,
		"prog.go":                true,
		"example.com/cmd/x":      true,
		"true":                   false,
		"./no-such-file":         false,
		"/bin/true":              false,
		"testdata/pe":            true, // a directory
		"no-such-dir/with-slash": false,
	} {
		if got := needsBuild(p); got != want {
			t.Errorf("needsBuild(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestLineWriter(t *testing.T) {
	var buf bytes.Buffer
	o := &output{stdout: &buf}
	lw := newLineWriter("[3] ", lockedWriter{o, &buf})
	for _, s := range []string{"a", "b\nc", "\n\n", "d\ne\nf"} {
		lw.Write([]byte(s))
	}
	lw.Flush()
	if got, want := buf.String(), "[3] ab\n[3] c\n[3] \n[3] d\n[3] e\n[3] f\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	buf.Reset()
	lw.Write(bytes.Repeat([]byte("x"), maxLine+10))
	lw.Flush()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 2 || len(lines[0]) != 4+maxLine || lines[1] != "[3] "+strings.Repeat("x", 10) {
		t.Fatalf("long line split into %d lines", len(lines))
	}
}

func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	r := run(t, &Job{N: 2, TagOutput: true}, "0=exit3,*=sleep")
	if r.code != 3 {
		t.Fatal(r)
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestIDs(t *testing.T) {
	if a, b := NewJobID(), NewJobID(); a == b || !strings.HasPrefix(a, "gosh-") {
		t.Fatalf("job ids %q %q", a, b)
	}
	if k := NewKey(); len(k) != 32 || bytes.Equal(k, NewKey()) {
		t.Fatalf("key %x", k)
	}
}
