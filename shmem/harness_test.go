package shmem_test

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
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

// route is a way of running a scenario on n PEs, with opts given to Run
// (the goroutine routes) and env ("K=V") added to every child's
// environment (the process routes): the same settings, spelled both ways.
type route struct {
	name string
	run  func(t *testing.T, n int, name string, s scenarioFunc, opts []shmem.Option, env []string) error
}

func pretendHosts(kind string, n int) []string { return scenario.Hosts(kind, n) }

// Every scenario runs on every route. A route whose job for some n would
// be another route's job again skips it.
var routes = []route{
	{"goroutines", func(t *testing.T, n int, name string, s scenarioFunc, opts []shmem.Option, env []string) error {
		return runGoroutines(n, s, nil, opts)
	}},
	{"processes", func(t *testing.T, n int, name string, s scenarioFunc, opts []shmem.Option, env []string) error {
		return runProcesses(t, n, name, nil, env)
	}},
	// Pretend hosts: PEs on different names talk over loopback TCP
	// through netmesh, as PEs on different machines do.
	{"goroutines-tcp", func(t *testing.T, n int, name string, s scenarioFunc, opts []shmem.Option, env []string) error {
		return runGoroutines(n, s, pretendHosts("remote", n), opts)
	}},
	{"goroutines-mixed", func(t *testing.T, n int, name string, s scenarioFunc, opts []shmem.Option, env []string) error {
		return runGoroutines(n, s, pretendHosts("mixed", n), opts)
	}},
	// Separate processes, each on a pretend host of its own: every link
	// is netmesh over TCP between OS processes, as on real machines.
	{"processes-tcp", func(t *testing.T, n int, name string, s scenarioFunc, opts []shmem.Option, env []string) error {
		if n == 1 {
			t.Skip("one PE: the processes route runs it")
		}
		return runProcesses(t, n, name, pretendHosts("remote", n), env)
	}},
	// Separate processes in pairs per pretend host: shared memory within
	// a host, TCP between hosts, in one job. One or two PEs are one host
	// (the processes route); two hosts of one PE are processes-tcp.
	{"processes-mixed", func(t *testing.T, n int, name string, s scenarioFunc, opts []shmem.Option, env []string) error {
		if n <= 2 {
			t.Skip("one host: the processes route runs it (and processes-tcp on two hosts)")
		}
		return runProcesses(t, n, name, pretendHosts("mixed", n), env)
	}},
}

// runGoroutines runs s on n goroutine PEs on hosts (nil: all on one
// host), with a minute's timeout and a 16 MiB heap unless opts say else.
func runGoroutines(n int, s scenarioFunc, hosts []string, opts []shmem.Option) error {
	o := append([]shmem.Option{shmem.WithTimeout(60 * time.Second), shmem.WithHeapSize(16 << 20)}, opts...)
	if hosts != nil {
		o = append(o, shmem.WithHosts(hosts))
	}
	return shmem.Run(n, s, o...)
}

// runProcesses launches n copies of this test binary as a job running
// scenario name, on hosts (nil: all on this host) with env added.
func runProcesses(t *testing.T, n int, name string, hosts []string, env []string) error {
	t.Helper()
	if testing.Short() && n > 4 {
		t.Skip("-short: skipping a job of more than 4 processes")
	}
	return scenarios.Processes(n, name, hosts, env...)
}

// each runs scenario name on every route for every PE count.
func each(t *testing.T, name string, counts ...int) {
	for _, n := range counts {
		onRoutes(t, name, n, nil, nil, false)
	}
}

// eachWith is each on n PEs with opts given to Run and env to the
// launched processes (the same settings, spelled both ways). A job ended
// by GlobalExit(0) passes, as it does under a launcher.
func eachWith(t *testing.T, name string, n int, opts []shmem.Option, env ...string) {
	onRoutes(t, name, n, opts, env, true)
}

// onRoutes runs scenario name on n PEs on every route.
func onRoutes(t *testing.T, name string, n int, opts []shmem.Option, env []string, exit0 bool) {
	s := scenarios.Get(name)
	if s == nil {
		t.Fatalf("no scenario %q", name)
	}
	for _, r := range routes {
		t.Run(r.name+"/"+strconv.Itoa(n), func(t *testing.T) {
			err := r.run(t, n, name, s, opts, env)
			var ee *shmem.ExitError
			if err != nil && !(exit0 && errors.As(err, &ee) && ee.Code == 0) {
				t.Fatal(err)
			}
		})
	}
}

// The tcp routes place every PE on a pretend host of its own: each PE
// sees its own name and reaches every other PE over TCP, never through a
// mapped heap.
var _ = register("all-remote", func(pe *shmem.PE) error {
	in := pe.Info()
	if want := pretendHosts("remote", pe.NPEs())[pe.MyPE()]; in.Host != want {
		return fmt.Errorf("PE %d is on host %q, want %q", pe.MyPE(), in.Host, want)
	}
	for _, r := range in.Routes {
		if r.PE != pe.MyPE() && r.Kind != "tcp" {
			return fmt.Errorf("route from PE %d to PE %d on host %q is %s, want tcp", pe.MyPE(), r.PE, r.Host, r.Kind)
		}
	}
	return nil
})

func TestTCPRoutesAreRemote(t *testing.T) {
	s := scenarios.Get("all-remote")
	for _, r := range routes {
		if strings.HasSuffix(r.name, "-tcp") {
			t.Run(r.name+"/3", func(t *testing.T) {
				if err := r.run(t, 3, "all-remote", s, nil, nil); err != nil {
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
