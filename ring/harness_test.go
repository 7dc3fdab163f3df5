package ring

import (
	"errors"
	"flag"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/scenario"
	"github.com/goshmem/goshmem/shmem"
)

// The behavioural tests are scenarios (internal/scenario): written once
// as a function of one PE and run over every route below — goroutine PEs,
// separate processes, goroutine PEs on pretend hosts all apart (TCP) or
// in pairs (mixed), and separate processes on pretend hosts in pairs
// (processes-mixed).
type scenarioFunc = scenario.Func

const (
	envScenario = "GOSHMEM_RING_TEST_SCENARIO"
	envSmall    = "GOSHMEM_RING_TEST_SMALL" // "1": the parent runs -short or -race
)

var scenarios = scenario.New(envScenario)

func register(name string, f scenarioFunc) scenarioFunc { return scenarios.Add(name, f) }

// small is set once, before any test runs: under -short or -race the
// floods send fewer messages. Child processes learn it from envSmall.
var small bool

func TestMain(m *testing.M) {
	small = os.Getenv(envSmall) == "1"
	if code, child := scenarios.Child(); child {
		os.Exit(code)
	}
	flag.Parse()
	small = testing.Short() || raceOn
	code := m.Run()
	if theJob != nil {
		theJob.stop() // the process benchmarks' helper PE
	}
	os.Exit(code)
}

// scaled is n, or n/div under -short and -race.
func scaled(n, div int) int {
	if small {
		return max(n/div, 1)
	}
	return n
}

// route is a way of running a scenario on n PEs, with env ("K=V") set
// for it: in this process (the goroutine routes) or added to every
// child's environment (the process routes).
type route struct {
	name string
	run  func(t *testing.T, n int, name string, s scenarioFunc, env []string) error
}

var routes = []route{
	{"goroutines", func(t *testing.T, n int, name string, s scenarioFunc, env []string) error {
		setenv(t, env)
		return shmem.Run(n, s, shmem.WithTimeout(60*time.Second), shmem.WithHeapSize(16<<20))
	}},
	{"processes", func(t *testing.T, n int, name string, s scenarioFunc, env []string) error {
		return runProcesses(t, n, name, nil, env)
	}},
	// Every PE on a pretend host of its own: every lane runs over TCP.
	{"tcp", func(t *testing.T, n int, name string, s scenarioFunc, env []string) error {
		setenv(t, env)
		return runHosts(t, n, s, scenario.Hosts("remote", n))
	}},
	// Pairs of PEs per pretend host: lanes over shared memory and TCP in
	// one job.
	{"mixed", func(t *testing.T, n int, name string, s scenarioFunc, env []string) error {
		setenv(t, env)
		return runHosts(t, n, s, scenario.Hosts("mixed", n))
	}},
	// Separate processes in pairs per pretend host: the lanes between
	// hosts run over netmesh's sockets between OS processes, as on real
	// machines. Two PEs go on two hosts (a pair on one host is the
	// processes route again); one PE is the processes route.
	{"processes-mixed", func(t *testing.T, n int, name string, s scenarioFunc, env []string) error {
		switch n {
		case 1:
			t.Skip("one PE: the processes route runs it")
		case 2:
			return runProcesses(t, n, name, scenario.Hosts("remote", n), env)
		}
		return runProcesses(t, n, name, scenario.Hosts("mixed", n), env)
	}},
}

// setenv sets env ("K=V" entries) for the rest of test t.
func setenv(t *testing.T, env []string) {
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// runHosts runs s on goroutine PEs placed on pretend hosts, with opts
// (default: a timeout of a minute, a 16 MiB heap).
func runHosts(t *testing.T, n int, s scenarioFunc, hosts []string, opts ...shmem.Option) error {
	t.Helper()
	if opts == nil {
		opts = []shmem.Option{shmem.WithTimeout(60 * time.Second), shmem.WithHeapSize(16 << 20)}
	}
	err := shmem.Run(n, s, append(opts, shmem.WithHosts(hosts))...)
	if errors.Is(err, shmem.ErrInvalid) && strings.Contains(err.Error(), "netmesh") {
		t.Skipf("remote PEs are not built: %v", err)
	}
	return err
}

// runProcesses launches n copies of this test binary as a job running
// scenario name, on hosts (nil: all on this host) with env added.
func runProcesses(t *testing.T, n int, name string, hosts []string, env []string) error {
	t.Helper()
	return scenarios.Processes(n, name, hosts, append(env, envSmall+"="+map[bool]string{false: "0", true: "1"}[small])...)
}

// each runs scenario name on every route for every PE count.
func each(t *testing.T, name string, counts ...int) { eachOn(t, name, nil, counts...) }

// eachOn runs scenario name on the routes named (nil: every route) for
// every PE count.
func eachOn(t *testing.T, name string, names []string, counts ...int) {
	s := scenarios.Get(name)
	if s == nil {
		t.Fatalf("no scenario %q", name)
	}
	for _, r := range routes {
		if names != nil && !slices.Contains(names, r.name) {
			continue
		}
		for _, n := range counts {
			t.Run(r.name+"/"+strconv.Itoa(n), func(t *testing.T) {
				if err := r.run(t, n, name, s, nil); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// check turns a false condition into an error.
func check(ok bool, format string, args ...any) error { return scenario.Check(ok, format, args...) }
