package shmem_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/launch"
	"github.com/goshmem/goshmem/shmem"
)

// A scenario is a behavioural test written once and run over every route:
// as goroutine PEs under shmem.Run, and as separate processes launched the
// way goshrun launches them (this test binary, re-executed). It reports a
// failed check by returning an error, since a child process has no *testing.T.
type scenario func(pe *shmem.PE) error

// scenarios is filled by init functions of the test files and never
// changed afterwards.
var scenarios = map[string]scenario{}

func register(name string, s scenario) scenario {
	if _, dup := scenarios[name]; dup {
		panic("duplicate scenario " + name)
	}
	scenarios[name] = s
	return s
}

const envScenario = "GOSHMEM_TEST_SCENARIO"

func TestMain(m *testing.M) {
	if name := os.Getenv(envScenario); name != "" {
		os.Exit(childMain(name))
	}
	code := m.Run()
	if current != nil {
		current.stop() // end the benchmark job's helper processes cleanly
	}
	os.Exit(code)
}

// childMain runs one scenario as a launched PE.
func childMain(name string) int {
	s := scenarios[name]
	if s == nil {
		fmt.Fprintf(os.Stderr, "no scenario %q\n", name)
		return 2
	}
	pe, err := shmem.Init()
	if err != nil {
		fmt.Fprintf(os.Stderr, "Init: %v\n", err)
		return 3
	}
	if err := s(pe); err != nil {
		fmt.Fprintf(os.Stderr, "PE %d: %v\n", pe.MyPE(), err)
		return 1
	}
	// A scenario may finalize the PE itself (and Init again).
	if err := pe.Finalize(); err != nil && !errors.Is(err, shmem.ErrFinalized) {
		fmt.Fprintf(os.Stderr, "PE %d: Finalize: %v\n", pe.MyPE(), err)
		return 4
	}
	return 0
}

// route is a way of running a scenario on n PEs.
type route struct {
	name string
	run  func(t *testing.T, n int, name string, s scenario) error
}

// pretendHosts names hosts for n PEs: "remote" puts every PE on a host
// of its own, "mixed" puts PEs on hosts in pairs (a,a,b,b,...).
func pretendHosts(kind string, n int) []string {
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

var routes = []route{
	{"goroutines", func(t *testing.T, n int, name string, s scenario) error {
		return shmem.Run(n, s, shmem.WithTimeout(60*time.Second), shmem.WithHeapSize(16<<20))
	}},
	{"processes", func(t *testing.T, n int, name string, s scenario) error {
		return runProcesses(t, n, name, nil)
	}},
	// Pretend hosts: PEs on different names talk over loopback TCP
	// through netmesh, as PEs on different machines do.
	{"goroutines-tcp", func(t *testing.T, n int, name string, s scenario) error {
		return shmem.Run(n, s, shmem.WithTimeout(60*time.Second), shmem.WithHeapSize(16<<20),
			shmem.WithHosts(pretendHosts("remote", n)))
	}},
	{"goroutines-mixed", func(t *testing.T, n int, name string, s scenario) error {
		return shmem.Run(n, s, shmem.WithTimeout(60*time.Second), shmem.WithHeapSize(16<<20),
			shmem.WithHosts(pretendHosts("mixed", n)))
	}},
	{"processes-mixed", func(t *testing.T, n int, name string, s scenario) error {
		return runProcesses(t, n, name, pretendHosts("mixed", n))
	}},
}

// runProcesses launches n copies of this test binary as a job running
// scenario name.
func runProcesses(t *testing.T, n int, name string, hosts []string) error {
	t.Helper()
	if testing.Short() && n > 4 {
		t.Skip("-short: skipping a job of more than 4 processes")
	}
	var out safeBuffer
	job := &launch.Job{
		N:         n,
		Program:   os.Args[0],
		Args:      []string{"-test.run=^$"},
		Env:       []string{envScenario + "=" + name, "GOSHMEM_TIMEOUT=60s", "SHMEM_SYMMETRIC_SIZE=16M"},
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

// each runs scenario name on every route for every PE count.
func each(t *testing.T, name string, counts ...int) {
	s := scenarios[name]
	if s == nil {
		t.Fatalf("no scenario %q", name)
	}
	for _, r := range routes {
		for _, n := range counts {
			t.Run(r.name+"/"+strconv.Itoa(n), func(t *testing.T) {
				if err := r.run(t, n, name, s); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// check turns a false condition into an error.
func check(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}
