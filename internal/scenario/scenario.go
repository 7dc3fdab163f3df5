// Package scenario runs behavioural tests of goshmem as real jobs: a
// scenario is a function of one PE, written once, that a test package
// runs as goroutine PEs under shmem.Run and as separate processes of its
// own test binary, launched the way goshrun launches PEs. A scenario
// reports a failed check by returning an error, since a child process
// has no *testing.T.
//
// Test packages only: a Set is filled by package-level registrations and
// never changed afterwards.
package scenario

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/goshmem/goshmem/internal/launch"
	"github.com/goshmem/goshmem/internal/testproc"
	"github.com/goshmem/goshmem/shmem"
)

// Func is one scenario: what one PE does.
type Func func(pe *shmem.PE) error

// Set is a test binary's scenarios. Env names the variable that tells a
// re-executed test binary which scenario to run as a PE.
type Set struct {
	env string
	m   map[string]Func
}

// New returns an empty set whose children are selected by the variable env.
func New(env string) *Set { return &Set{env: env, m: map[string]Func{}} }

// Add registers f as name and returns it. A duplicate name panics: it is
// a mistake in the test source, found when the test binary starts.
func (s *Set) Add(name string, f Func) Func {
	if _, dup := s.m[name]; dup {
		panic("scenario: duplicate scenario " + name)
	}
	s.m[name] = f
	return f
}

// Get returns the scenario called name, or nil.
func (s *Set) Get(name string) Func { return s.m[name] }

// Child is for TestMain: when this process was launched to run a
// scenario, it runs it as a PE (Init, the scenario, Finalize) and returns
// the exit code and true; otherwise it returns false at once.
func (s *Set) Child() (int, bool) {
	name := os.Getenv(s.env)
	if name == "" {
		return 0, false
	}
	f := s.m[name]
	if f == nil {
		fmt.Fprintf(os.Stderr, "no scenario %q\n", name)
		return 2, true
	}
	pe, err := shmem.Init()
	if err != nil {
		fmt.Fprintf(os.Stderr, "Init: %v\n", err)
		return 3, true
	}
	if err := f(pe); err != nil {
		fmt.Fprintf(os.Stderr, "PE %d: %v\n", pe.MyPE(), err)
		return 1, true
	}
	// A scenario may finalize the PE itself (and Init again).
	if err := pe.Finalize(); err != nil && !errors.Is(err, shmem.ErrFinalized) {
		fmt.Fprintf(os.Stderr, "PE %d: Finalize: %v\n", pe.MyPE(), err)
		return 4, true
	}
	return 0, true
}

// Processes runs scenario name as a job of n processes of this test
// binary (PE hosts as in launch.Job.Hosts; nil: all on this host), with
// env added to every PE's environment. It returns an error holding the
// job's tagged output when the job fails.
func (s *Set) Processes(n int, name string, hosts []string, env ...string) error {
	var out testproc.Buffer
	job := &launch.Job{
		N:       n,
		Program: os.Args[0],
		Args:    []string{"-test.run=^$"},
		Env: append([]string{s.env + "=" + name, "GOSHMEM_TIMEOUT=60s", "SHMEM_SYMMETRIC_SIZE=16M"},
			env...),
		Hosts:     hosts,
		Timeout:   3 * time.Minute,
		TagOutput: true,
		Stdout:    &out,
		Stderr:    &out,
	}
	code, err := job.Run(context.Background())
	if err != nil {
		return fmt.Errorf("launch: %v\n%s", err, out.String())
	}
	if code != 0 {
		return fmt.Errorf("job exited %d:\n%s", code, out.String())
	}
	return nil
}

// Hosts names pretend hosts for n PEs: "remote" puts every PE on a host
// of its own, "mixed" puts PEs on hosts in pairs (a,a,b,b,...).
func Hosts(kind string, n int) []string {
	h := make([]string, n)
	for i := range h {
		switch kind {
		case "remote":
			h[i] = fmt.Sprintf("host%d", i)
		case "mixed":
			h[i] = fmt.Sprintf("host%d", i/2)
		}
	}
	return h
}

// Check turns a false condition into an error.
func Check(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}
