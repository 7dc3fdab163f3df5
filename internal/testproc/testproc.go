// Package testproc runs commands for goshmem's tests: whole jobs
// (goshrun, mpirun, srun, or a test binary's own PEs) in a process group
// of their own, and the concurrency-safe buffer their output goes to. It
// imports nothing of goshmem, so any package's tests may use it.
package testproc

import (
	"bufio"
	"bytes"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Buffer is a bytes.Buffer for concurrent writers.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Job is a command a test runs as a whole job (goshrun, mpirun, srun),
// in a process group of its own, with its standard output line by line
// and its standard error kept.
type Job struct {
	Cmd    *exec.Cmd
	Lines  chan string   // standard output, a line at a time; closed at its end
	Stderr Buffer        // standard error
	Done   chan struct{} // closed once the command has exited
}

// StartJob starts cmd (whose Stdout and Stderr must be unset). The
// test's cleanup kills the job's process group if it is still running
// and waits for it.
func StartJob(t testing.TB, cmd *exec.Cmd) *Job {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	j := &Job{Cmd: cmd, Lines: make(chan string, 64), Done: make(chan struct{})}
	cmd.Stderr = &j.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			j.Lines <- sc.Text()
		}
		close(j.Lines)
		cmd.Wait()
		close(j.Done)
	}()
	t.Cleanup(func() {
		select {
		case <-j.Done:
		default:
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-j.Done
		}
	})
	return j
}

// Wait waits at most d for the job to end, and returns the output lines
// not yet read and the exit status, 128 + the signal's number for a
// death by signal (as a shell reports it).
func (j *Job) Wait(t testing.TB, d time.Duration) (lines []string, status int) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case s, ok := <-j.Lines:
			if ok {
				lines = append(lines, s)
				continue
			}
			select {
			case <-j.Done:
			case <-timer.C:
				t.Fatalf("the job did not end within %v; stderr:\n%s", d, j.Stderr.String())
			}
			status = j.Cmd.ProcessState.ExitCode()
			if ws, ok := j.Cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				status = 128 + int(ws.Signal())
			}
			return lines, status
		case <-timer.C:
			t.Fatalf("the job did not end within %v; output %q; stderr:\n%s", d, lines, j.Stderr.String())
		}
	}
}
