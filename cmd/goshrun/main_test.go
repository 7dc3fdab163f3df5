package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/launch"
	"github.com/goshmem/goshmem/internal/testproc"
)

func goshrun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestProgramFlagsPassThrough(t *testing.T) {
	code, out, errOut := goshrun(t, "-n", "3", "--tag-output", "--env", "X=y", "--host-list=h", "--",
		"sh", "-c", `echo "rank=$GOSHMEM_RANK size=$GOSHMEM_SIZE x=$X host=$GOSHMEM_HOST"; exit 0`)
	if code != 0 {
		t.Fatalf("code %d\n%s%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	slices.Sort(lines)
	want := []string{
		"[0] rank=0 size=3 x=y host=h",
		"[1] rank=1 size=3 x=y host=h",
		"[2] rank=2 size=3 x=y host=h",
	}
	if !slices.Equal(lines, want) {
		t.Fatalf("output %q, want %q", lines, want)
	}
}

func TestExitStatus(t *testing.T) {
	code, _, errOut := goshrun(t, "-np", "2", "sh", "-c", `[ "$GOSHMEM_RANK" = 1 ] && exit 5; sleep 30`)
	if code != 5 || !strings.Contains(errOut, "goshrun: PE 1 exited with status 5") {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
}

func TestTestPE(t *testing.T) {
	bin, cleanup, err := launch.Build("../../internal/launch/testdata/pe")
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	code, out, errOut := goshrun(t, "-n", "4", "--env", "PE_TEST_MODE=2=exit7,*=sleep", "--timeout", "1m", bin)
	if code != 7 {
		t.Fatalf("code %d\n%s%s", code, out, errOut)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"prog"},
		{"-n", "0", "prog"},
		{"-n", "2", "--env", "novalue", "prog"},
		{"-n", "3", "--host-list", "a,b", "prog"},
		{"--no-such-flag", "prog"},
	} {
		if code, _, _ := goshrun(t, args...); code != 2 {
			t.Errorf("%q: code %d, want 2", args, code)
		}
	}
}

func TestSpreadHosts(t *testing.T) {
	got, err := spreadHosts("a,b", 4)
	if err != nil || !slices.Equal(got, []string{"a", "a", "b", "b"}) {
		t.Fatalf("%q %v", got, err)
	}
	if got, _ := spreadHosts("", 4); got != nil {
		t.Fatalf("%q", got)
	}
	if _, err := spreadHosts("a,,b", 3); err == nil {
		t.Fatal("empty name accepted")
	}
}

// goshrun says that it is building, and a kill -9 of goshrun in the
// middle of a build leaves no build directory behind. A fake go command
// (first in PATH) stands for a slow cold build.
func TestBuildKilledLeavesNothing(t *testing.T) {
	self, cleanup, err := launch.Build(".")
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	fake, tmp := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(fake, "go"), []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-n", "1", "../../examples/pi")
	cmd.Env = append(os.Environ(), "PATH="+fake+":"+os.Getenv("PATH"), "TMPDIR="+tmp)
	var stderr testproc.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(stderr.String(), "goshrun: building ../../examples/pi") {
		if time.Now().After(deadline) {
			t.Fatalf("no progress message; stderr %q", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	dirs, _ := filepath.Glob(filepath.Join(tmp, "goshrun-*"))
	if len(dirs) != 1 {
		t.Fatalf("build directories %q, want one while building", dirs)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	for {
		left, _ := filepath.Glob(filepath.Join(tmp, "*"))
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("left behind after kill -9 of goshrun: %q", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
