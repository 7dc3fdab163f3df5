package launch

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goshmem/goshmem/internal/errs"
)

// Build turns program into something to execute. A Go package — a
// directory, a pattern containing "...", a file ending in .go, or an
// import path such as example.com/cmd/x that is not a file — is built
// with `go build -o` into a fresh temporary directory, in the current
// directory's module; cleanup removes that directory. Anything else (a
// binary path, or a command name looked up in PATH) is returned
// unchanged with a no-op cleanup. cleanup is never nil.
func Build(program string) (bin string, cleanup func(), err error) {
	return BuildLog(program, nil)
}

// buildNotice is how long a build runs before BuildLog says so.
const buildNotice = time.Second

// BuildLog is Build that tells logf (if not nil) what it is doing when
// the build takes longer than a second (a cold build of a package takes
// tens of seconds): a line when it passes a second, one when it is done.
//
// The temporary directory does not outlive the process even when the
// process is killed (kill -9 included) while the build runs or the job
// runs: a reaper (/bin/sh) holds a pipe from this process, and removes
// the directory when the pipe closes, which the kernel does however the
// process ends. It ignores SIGINT, SIGTERM and SIGHUP, so a Ctrl-C that
// reaches the whole process group does not stop it first.
func BuildLog(program string, logf func(format string, args ...any)) (bin string, cleanup func(), err error) {
	nop := func() {}
	if program == "" {
		return "", nop, fmt.Errorf("launch: no program: %w", errs.Invalid)
	}
	if !needsBuild(program) {
		return program, nop, nil
	}
	gotool, err := goTool()
	if err != nil {
		return "", nop, err
	}
	dir, err := os.MkdirTemp("", "goshrun-")
	if err != nil {
		return "", nop, fmt.Errorf("launch: building %s: %w", program, err)
	}
	stopReaper := startReaper(dir)
	cleanup = func() {
		os.RemoveAll(dir)
		stopReaper()
	}
	bin = filepath.Join(dir, binName(program))
	cmd := exec.Command(gotool, "build", "-o", bin, program)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// If this process dies, go build gets SIGINT, on which it stops its
	// compilers and removes its own work directory. (The parent-death
	// signal follows the forking thread, which stays locked meanwhile.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGINT}
	start := time.Now()
	var noticed atomic.Bool
	if logf != nil {
		t := time.AfterFunc(buildNotice, func() {
			noticed.Store(true)
			logf("building %s with go build (a first build can take half a minute)...", program)
		})
		defer t.Stop()
	}
	runtime.LockOSThread()
	err = cmd.Start()
	runtime.UnlockOSThread()
	if err == nil {
		err = cmd.Wait()
	}
	if logf != nil && noticed.Load() && err == nil {
		logf("built %s in %.1fs", program, time.Since(start).Seconds())
	}
	if err != nil {
		cleanup()
		return "", nop, fmt.Errorf("launch: go build %s: %w\n%s", program, err, bytes.TrimSpace(out.Bytes()))
	}
	return bin, cleanup, nil
}

// startReaper starts the process that removes dir once this process
// ends, and returns what stops it (after dir is gone). If it cannot
// start, dir is only removed by cleanup.
func startReaper(dir string) (stop func()) {
	cmd := exec.Command("/bin/sh", "-c", `trap "" INT TERM HUP; cat >/dev/null; rm -rf -- "$1"`, "goshrun-reaper", dir)
	w, err := cmd.StdinPipe()
	if err != nil {
		return func() {}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // not in a PE's group, nor signalled with ours
	if err := cmd.Start(); err != nil {
		return func() {}
	}
	return func() {
		w.Close()
		cmd.Wait()
	}
}

// needsBuild reports whether program names Go source rather than an
// executable.
func needsBuild(program string) bool {
	if strings.HasSuffix(program, ".go") || strings.Contains(program, "...") {
		return true
	}
	if fi, err := os.Stat(program); err == nil {
		return fi.IsDir()
	}
	// Not on disk. A relative or absolute path is a missing file (exec
	// reports it); a bare name is a command in PATH; a slash-separated
	// name whose first element has a dot is an import path.
	if filepath.IsAbs(program) || strings.HasPrefix(program, "./") || strings.HasPrefix(program, "../") {
		return false
	}
	first, _, hasSlash := strings.Cut(program, "/")
	return hasSlash && strings.Contains(first, ".")
}

// binName picks the built binary's name from the package's last element.
func binName(program string) string {
	p := strings.TrimSuffix(strings.TrimSuffix(program, "/..."), ".go")
	if strings.HasPrefix(p, ".") {
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
	}
	switch name := filepath.Base(p); name {
	case "", ".", "..", "/":
		return "pe"
	default:
		return name
	}
}

// goTool finds the go command: in PATH, else in $GOROOT/bin.
func goTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	if root := os.Getenv("GOROOT"); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("launch: the go command is not in PATH (needed to build a Go package): %w", errs.Invalid)
}
