package shmem_test

import (
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/scenario"
	"github.com/goshmem/goshmem/shmem"
)

// The behavioural tests are scenarios (internal/scenario): written once
// as a function of one PE and run over every route below.
type scenarioFunc = scenario.Func

const envScenario = "GOSHMEM_TEST_SCENARIO"

var scenarios = scenario.New(envScenario)

func register(name string, f scenarioFunc) scenarioFunc { return scenarios.Add(name, f) }

func TestMain(m *testing.M) {
	if code, child := scenarios.Child(); child {
		os.Exit(code)
	}
	code := m.Run()
	if current != nil {
		current.stop() // end the benchmark job's helper processes cleanly
	}
	os.Exit(code)
}

// route is a way of running a scenario on n PEs.
type route struct {
	name string
	run  func(t *testing.T, n int, name string, s scenarioFunc) error
}

func pretendHosts(kind string, n int) []string { return scenario.Hosts(kind, n) }

var routes = []route{
	{"goroutines", func(t *testing.T, n int, name string, s scenarioFunc) error {
		return shmem.Run(n, s, shmem.WithTimeout(60*time.Second), shmem.WithHeapSize(16<<20))
	}},
	{"processes", func(t *testing.T, n int, name string, s scenarioFunc) error {
		return runProcesses(t, n, name, nil)
	}},
	// Pretend hosts: PEs on different names talk over loopback TCP
	// through netmesh, as PEs on different machines do.
	{"goroutines-tcp", func(t *testing.T, n int, name string, s scenarioFunc) error {
		return shmem.Run(n, s, shmem.WithTimeout(60*time.Second), shmem.WithHeapSize(16<<20),
			shmem.WithHosts(pretendHosts("remote", n)))
	}},
	{"goroutines-mixed", func(t *testing.T, n int, name string, s scenarioFunc) error {
		return shmem.Run(n, s, shmem.WithTimeout(60*time.Second), shmem.WithHeapSize(16<<20),
			shmem.WithHosts(pretendHosts("mixed", n)))
	}},
	{"processes-mixed", func(t *testing.T, n int, name string, s scenarioFunc) error {
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
	return scenarios.Processes(n, name, hosts)
}

// each runs scenario name on every route for every PE count.
func each(t *testing.T, name string, counts ...int) {
	s := scenarios.Get(name)
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

// inGoroutines runs f(0), ..., f(n-1), each in a goroutine of its own,
// and returns the first error any of them returned once all have.
func inGoroutines(n int, f func(i int) error) error {
	var wg sync.WaitGroup
	errc := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- f(i)
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			return err
		}
	}
	return nil
}
