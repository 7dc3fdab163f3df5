package collective

import (
	"errors"
	"flag"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/scenario"
	"github.com/goshmem/goshmem/shmem"
)

// The behavioural tests are scenarios (internal/scenario): written once
// as a function of one PE and run over every route below — goroutine
// PEs, separate processes, and pretend hosts all apart (TCP) or in pairs
// (mixed).
const (
	envScenario = "GOSHMEM_COLLECTIVE_TEST_SCENARIO"
	envSmall    = "GOSHMEM_COLLECTIVE_TEST_SMALL" // "1": the parent runs -short or -race
)

var scenarios = scenario.New(envScenario)

func register(name string, f scenario.Func) scenario.Func { return scenarios.Add(name, f) }

// small is set once, before any test runs: under -short or -race the
// matrices are cut down. Child processes learn it from envSmall.
var small bool

func TestMain(m *testing.M) {
	small = os.Getenv(envSmall) == "1"
	if code, child := scenarios.Child(); child {
		os.Exit(code)
	}
	flag.Parse()
	small = testing.Short() || raceOn
	os.Exit(m.Run())
}

// route is a way of running a scenario on n PEs with a symmetric heap of
// heap bytes each, with env added to the environment of every PE (set in
// this process for goroutine PEs).
type route struct {
	name string
	run  func(t *testing.T, n int, name string, env []string, heap uint64) error
}

// testHeap is each PE's symmetric heap unless a test asks for more
// (eachHeap).
const testHeap = 16 << 20

var (
	goroutines = route{"goroutines", func(t *testing.T, n int, name string, env []string, heap uint64) error {
		return runHosts(t, n, name, env, heap, nil)
	}}
	processes = route{"processes", func(t *testing.T, n int, name string, env []string, heap uint64) error {
		return scenarios.Processes(n, name, nil, childEnv(env, heap)...)
	}}
	tcp = route{"tcp", func(t *testing.T, n int, name string, env []string, heap uint64) error {
		return runHosts(t, n, name, env, heap, scenario.Hosts("remote", n))
	}}
	mixed = route{"mixed", func(t *testing.T, n int, name string, env []string, heap uint64) error {
		return runHosts(t, n, name, env, heap, scenario.Hosts("mixed", n))
	}}
	processesMixed = route{"processes-mixed", func(t *testing.T, n int, name string, env []string, heap uint64) error {
		return scenarios.Processes(n, name, scenario.Hosts("mixed", n), childEnv(env, heap)...)
	}}
	allRoutes = []route{goroutines, processes, tcp, mixed, processesMixed}
)

// childEnv is what a child PE gets on top of scenario.Processes' own
// settings: env, the small mode, and the heap size (later entries win,
// so it replaces the default SHMEM_SYMMETRIC_SIZE).
func childEnv(env []string, heap uint64) []string {
	return append(env[:len(env):len(env)], envSmall+"="+smallFlag(),
		"SHMEM_SYMMETRIC_SIZE="+strconv.FormatUint(heap, 10))
}

func smallFlag() string {
	if small {
		return "1"
	}
	return "0"
}

// runHosts runs scenario name on goroutine PEs placed on pretend hosts
// (nil: one host).
func runHosts(t *testing.T, n int, name string, env []string, heap uint64, hosts []string) error {
	t.Helper()
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	opts := []shmem.Option{shmem.WithTimeout(60 * time.Second), shmem.WithHeapSize(heap)}
	if hosts != nil {
		opts = append(opts, shmem.WithHosts(hosts))
	}
	err := shmem.Run(n, scenarios.Get(name), opts...)
	if errors.Is(err, shmem.ErrInvalid) && strings.Contains(err.Error(), "netmesh") {
		t.Skipf("remote PEs are not built: %v", err)
	}
	return err
}

// each runs scenario name on the given routes for every PE count.
func each(t *testing.T, name string, routes []route, env []string, counts ...int) {
	t.Helper()
	eachHeap(t, name, routes, env, testHeap, counts...)
}

// eachHeap is each with a symmetric heap of heap bytes per PE.
func eachHeap(t *testing.T, name string, routes []route, env []string, heap uint64, counts ...int) {
	t.Helper()
	if scenarios.Get(name) == nil {
		t.Fatalf("no scenario %q", name)
	}
	for _, r := range routes {
		for _, n := range counts {
			t.Run(r.name+"/"+strconv.Itoa(n), func(t *testing.T) {
				if err := r.run(t, n, name, env, heap); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

func check(ok bool, format string, args ...any) error { return scenario.Check(ok, format, args...) }
