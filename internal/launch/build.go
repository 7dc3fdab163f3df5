package launch

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

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
	cleanup = func() { os.RemoveAll(dir) }
	bin = filepath.Join(dir, binName(program))
	cmd := exec.Command(gotool, "build", "-o", bin, program)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		cleanup()
		return "", nop, fmt.Errorf("launch: go build %s: %w\n%s", program, err, bytes.TrimSpace(out.Bytes()))
	}
	return bin, cleanup, nil
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
