package shmem_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/launch"
	"github.com/goshmem/goshmem/internal/testproc"
	"github.com/goshmem/goshmem/shmem"
)

// memfdInodes lists the inodes of goshmem segments mapped by process pid.
func memfdInodes(pid string) map[string]bool {
	f, err := os.Open("/proc/" + pid + "/maps")
	if err != nil {
		return nil
	}
	defer f.Close()
	got := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 6 && strings.HasPrefix(fields[5], "/memfd:goshmem") {
			got[fields[4]] = true
		}
	}
	return got
}

// A PE that reports its pid and the segments it maps, then waits for a
// word nobody writes: it ends only when a peer dies (ErrPeerLost) or it
// is killed.
var _ = register("report-and-hang", func(pe *shmem.PE) error {
	flag, err := shmem.Malloc[int64](pe, 1)
	if err != nil {
		return err
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	var inodes []string
	for ino := range memfdInodes("self") {
		inodes = append(inodes, ino)
	}
	line := fmt.Sprintf("%d %s\n", os.Getpid(), strings.Join(inodes, " "))
	name := filepath.Join(os.Getenv("GOSHMEM_TEST_DIR"), strconv.Itoa(pe.MyPE()))
	if err := os.WriteFile(name+".tmp", []byte(line), 0o644); err != nil {
		return err
	}
	if err := os.Rename(name+".tmp", name); err != nil {
		return err
	}
	err = shmem.WaitUntil(flag, 0, shmem.CmpEQ, 1)
	if !errors.Is(err, shmem.ErrPeerLost) {
		return fmt.Errorf("want ErrPeerLost after a peer died, got %v", err)
	}
	return err
})

// killAndCheck starts a job of n PEs, kill -9s the PEs in victims once
// all have reported, and checks that the job ends non-zero promptly and
// that no process maps any of the job's segments afterwards.
func killAndCheck(t *testing.T, n int, victims []int) {
	dir := t.TempDir()
	var out testproc.Buffer
	job := &launch.Job{
		N: n, Program: os.Args[0], Args: []string{"-test.run=^$"},
		Env: []string{envScenario + "=report-and-hang", "GOSHMEM_TEST_DIR=" + dir,
			"GOSHMEM_TIMEOUT=60s", "SHMEM_SYMMETRIC_SIZE=4M"},
		Timeout: 90 * time.Second, TagOutput: true, Stdout: &out, Stderr: &out,
	}
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		c, err := job.Run(context.Background())
		done <- result{c, err}
	}()
	pids := make([]int, n)
	inodes := map[string]bool{}
	deadline := time.Now().Add(60 * time.Second)
	for r := 0; r < n; r++ {
		for {
			b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(r)))
			if err == nil {
				f := strings.Fields(string(b))
				pids[r], _ = strconv.Atoi(f[0])
				for _, ino := range f[1:] {
					inodes[ino] = true
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("PE %d never reported:\n%s", r, out.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if len(inodes) != n {
		t.Fatalf("PEs map %d distinct segments, want %d", len(inodes), n)
	}
	start := time.Now()
	for i, v := range victims {
		// Once the first victim died, the launcher ends the job's other
		// PEs: a later victim may already be gone (ESRCH).
		if err := syscall.Kill(pids[v], syscall.SIGKILL); err != nil && (i == 0 || err != syscall.ESRCH) {
			t.Fatal(err)
		}
	}
	var res result
	select {
	case res = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("job did not end 30 s after kill -9:\n%s", out.String())
	}
	t.Logf("job ended %v after kill -9 with code %d", time.Since(start), res.code)
	if res.err != nil || res.code == 0 {
		t.Fatalf("job ended with code %d, err %v; want a non-zero code\n%s", res.code, res.err, out.String())
	}
	if len(victims) < n && !strings.Contains(out.String(), "killed") {
		t.Errorf("the launcher did not say which PE was killed:\n%s", out.String())
	}
	// No process of the machine maps or holds any of the job's segments.
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		pid := filepath.Base(p)
		for ino := range memfdInodes(pid) {
			if inodes[ino] {
				t.Errorf("process %s still maps segment inode %s", pid, ino)
			}
		}
		fds, _ := filepath.Glob(p + "/fd/*")
		for _, fd := range fds {
			if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, "/memfd:goshmem") {
				var st syscall.Stat_t
				if syscall.Stat(fd, &st) == nil && inodes[strconv.FormatUint(st.Ino, 10)] {
					t.Errorf("process %s still holds segment inode %d", pid, st.Ino)
				}
			}
		}
	}
}

func TestKillOnePE(t *testing.T)   { killAndCheck(t, 4, []int{2}) }
func TestKillEveryPE(t *testing.T) { killAndCheck(t, 3, []int{0, 1, 2}) }

// A PE that returns an error fails the job, and its peers' waits end.
var _ = register("pe1-fails", func(pe *shmem.PE) error {
	if pe.MyPE() == 1 {
		return errors.New("PE 1 fails on purpose")
	}
	flag, err := shmem.Malloc[int64](pe, 1) // PE 1 never joins this
	if err == nil {
		err = shmem.WaitUntil(flag, 0, shmem.CmpEQ, 1)
	}
	return err
})

func TestProcessFailureEndsJob(t *testing.T) {
	start := time.Now()
	err := runProcesses(t, 3, "pe1-fails", nil, nil)
	if err == nil || !strings.Contains(err.Error(), "PE 1 fails on purpose") {
		t.Fatalf("want the job to fail with PE 1's message, got %v", err)
	}
	if el := time.Since(start); el > 30*time.Second {
		t.Fatalf("took %v", el)
	}
}

// GlobalExit under the launcher: the job's exit code is the PE's.
var _ = register("global-exit-7", func(pe *shmem.PE) error {
	if pe.MyPE() == pe.NPEs()-1 {
		pe.GlobalExit(7)
	}
	flag, err := shmem.Malloc[int64](pe, 1)
	if err == nil {
		err = shmem.WaitUntil(flag, 0, shmem.CmpEQ, 1)
	}
	return err
})

func TestGlobalExitUnderLauncher(t *testing.T) {
	err := runProcesses(t, 3, "global-exit-7", nil, nil)
	if err == nil || !strings.HasPrefix(err.Error(), "job exited 7") {
		t.Fatalf("want exit code 7, got %v", err)
	}
}

// Init after Finalize starts afresh, under the launcher too: a new heap,
// new links, the same rank.
var _ = register("reinit", func(pe *shmem.PE) error {
	me, np := pe.MyPE(), pe.NPEs()
	for gen := 1; gen <= 3; gen++ {
		if gen > 1 {
			var err error
			if pe, err = shmem.Init(); err != nil {
				return fmt.Errorf("Init #%d: %w", gen, err)
			}
			if pe.MyPE() != me || pe.NPEs() != np {
				return fmt.Errorf("Init #%d: PE %d of %d, was %d of %d", gen, pe.MyPE(), pe.NPEs(), me, np)
			}
		}
		s, err := shmem.Malloc[int64](pe, 1)
		if err != nil {
			return err
		}
		if me != 0 && s.Local()[0] != 0 { // PE 0's copy may already be counting
			return fmt.Errorf("Init #%d: a fresh heap holds %d", gen, s.Local()[0])
		}
		if err := shmem.AtomicAdd(s, 0, int64(gen), 0); err != nil {
			return err
		}
		if err := pe.BarrierAll(); err != nil {
			return err
		}
		if me == 0 && s.Local()[0] != int64(gen*np) {
			return fmt.Errorf("Init #%d: sum %d, want %d", gen, s.Local()[0], gen*np)
		}
		if err := pe.Finalize(); err != nil {
			return err
		}
		if err := shmem.P(s, 0, 1, 0); !errors.Is(err, shmem.ErrFinalized) {
			return fmt.Errorf("put after Finalize: %v", err)
		}
	}
	return nil
})

func TestInitAfterFinalize(t *testing.T) {
	for _, n := range []int{1, 2, 3} {
		if err := runProcesses(t, n, "reinit", nil, nil); err != nil {
			t.Fatalf("%d PEs: %v", n, err)
		}
	}
}
