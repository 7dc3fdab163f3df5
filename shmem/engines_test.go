package shmem_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/engine"
)

// The behavioural scenarios, under the foreign engines: every scenario
// that a Test in this package runs with each() also runs here as a job
// of this test binary under mpirun, mpiexec.hydra (both forms) and srun
// (plain and --mpi=pmi2), at the largest PE count of its list up to 4.
// .ci/run sets GOSHMEM_ENGINES=1 after installing the engines and
// starting Slurm.

var eachCall = regexp.MustCompile(`each\(t, "([^"]+)"((?:, \d+)+)\)`)

// eachScenarios reads the scenario names and PE counts from this
// package's tests, so that a new scenario is covered here too.
func eachScenarios(t *testing.T) map[string]int {
	files, _ := filepath.Glob("*_test.go")
	out := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range eachCall.FindAllStringSubmatch(string(b), -1) {
			best := 0
			for _, c := range strings.Split(strings.TrimPrefix(m[2], ", "), ", ") {
				if n, _ := strconv.Atoi(c); n <= 4 && n > best {
					best = n
				}
			}
			if best > 0 {
				out[m[1]] = best
			}
		}
	}
	if len(out) < 10 {
		t.Fatalf("found only %d scenarios in this package's tests: the pattern is stale", len(out))
	}
	return out
}

func TestScenariosUnderEngines(t *testing.T) {
	if os.Getenv("GOSHMEM_ENGINES") != "1" {
		t.Skip("set GOSHMEM_ENGINES=1 to run the scenarios under mpirun, mpiexec.hydra and srun (.ci/run does, after installing them)")
	}
	scen := eachScenarios(t)
	names := make([]string, 0, len(scen))
	for name := range scen {
		names = append(names, name)
	}
	slices.Sort(names)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range engine.Commands(4) {
		t.Run(c.Label, func(t *testing.T) {
			if err := c.Usable(); err != nil {
				t.Skip(err)
			}
			for _, name := range names {
				n := scen[name]
				t.Run(name+"/"+strconv.Itoa(n), func(t *testing.T) {
					cmd := engine.Commands(n)
					var cn engine.Command
					for _, x := range cmd {
						if x.Label == c.Label {
							cn = x
						}
					}
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
					defer cancel()
					job := exec.CommandContext(ctx, cn.Path, append(cn.Args, self)...)
					// As the processes route runs them (internal/scenario).
					job.Env = append(os.Environ(), envScenario+"="+name, "GOSHMEM_TIMEOUT=60s", "SHMEM_SYMMETRIC_SIZE=16M",
						"GOSHMEM_KEY="+strings.Repeat("7e", 32))
					var out bytes.Buffer
					job.Stdout, job.Stderr = &out, &out
					if err := job.Run(); err != nil {
						t.Fatalf("%s under %s: %v\n%s", name, cn.Label, err, out.String())
					}
				})
			}
		})
	}
}
