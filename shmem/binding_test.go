package shmem_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/heap"
	"github.com/goshmem/goshmem/internal/launch"
	"github.com/goshmem/goshmem/internal/testproc"
	"github.com/goshmem/goshmem/shmem"
)

// oversub-binding checks Info().Oversubscribed against
// GOSHMEM_TEST_WANT_OVERSUB (when the test set it; other runs of every
// scenario have nothing to check).
var _ = register("oversub-binding", func(pe *shmem.PE) error {
	want, set := os.LookupEnv("GOSHMEM_TEST_WANT_OVERSUB")
	if got := pe.Info().Oversubscribed; set && got != (want == "1") {
		return fmt.Errorf("PE %d: Oversubscribed %v with GOSHMEM_TEST_WANT_OVERSUB=%s (CPUs allowed here: %d)",
			pe.MyPE(), got, want, cpusAllowed())
	}
	return pe.BarrierAll()
})

// procs-share checks runtime.GOMAXPROCS against GOSHMEM_TEST_WANT_PROCS
// (when the test set it).
var _ = register("procs-share", func(pe *shmem.PE) error {
	want, set := os.LookupEnv("GOSHMEM_TEST_WANT_PROCS")
	if got := strconv.Itoa(runtime.GOMAXPROCS(0)); set && got != want {
		return fmt.Errorf("PE %d: GOMAXPROCS %s, want %s (CPUs allowed here: %d, GOMAXPROCS=%q)",
			pe.MyPE(), got, want, cpusAllowed(), os.Getenv("GOMAXPROCS"))
	}
	return pe.BarrierAll()
})

func cpusAllowed() int {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil {
		return -1
	}
	return set.Count()
}

// twoCPUs returns the path of taskset and two CPUs this process may run
// on, or skips the test.
func twoCPUs(t *testing.T) (string, []int) {
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		t.Skip("no taskset")
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	var cpus []int
	for c := 0; c < 1024 && len(cpus) < 2; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) < 2 {
		t.Skip("fewer than 2 CPUs")
	}
	return taskset, cpus
}

// A launcher that binds each PE to a CPU of its own (as mpirun
// --bind-to core does) leaves each PE process one CPU; the PEs must not
// count themselves as sharing it. Bound all to one CPU, they do.
func TestOversubscribedFollowsBinding(t *testing.T) {
	taskset, cpus := twoCPUs(t)
	for _, tc := range []struct {
		name   string
		cpuOf  string // shell expression of the rank's CPU
		oversb string
	}{
		{"own-cpu", fmt.Sprintf(`$(( GOSHMEM_RANK == 0 ? %d : %d ))`, cpus[0], cpus[1]), "0"},
		{"one-cpu", fmt.Sprint(cpus[0]), "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wrapper := filepath.Join(t.TempDir(), "bind.sh")
			body := "#!/bin/sh\nexec " + taskset + " -c " + tc.cpuOf + " \"$@\"\n"
			if err := os.WriteFile(wrapper, []byte(body), 0o755); err != nil {
				t.Fatal(err)
			}
			var out testproc.Buffer
			job := &launch.Job{
				N: 2, Program: wrapper, Args: []string{os.Args[0], "-test.run=^$"},
				Env: []string{envScenario + "=oversub-binding", "GOSHMEM_TEST_WANT_OVERSUB=" + tc.oversb,
					"GOSHMEM_TIMEOUT=30s", "SHMEM_SYMMETRIC_SIZE=16M"},
				Timeout: time.Minute, TagOutput: true, Stdout: &out, Stderr: &out,
			}
			code, err := job.Run(context.Background())
			if err != nil || code != 0 {
				t.Fatalf("exit %d, %v:\n%s", code, err, out.String())
			}
		})
	}
}

func TestCPUUnion(t *testing.T) {
	type m = [heap.CPUWords]uint64
	bit := func(cs ...int) (v m) {
		for _, c := range cs {
			v[c/64] |= 1 << (c % 64)
		}
		return v
	}
	for _, tc := range []struct {
		masks []m
		want  int
	}{
		{nil, 0},
		{[]m{{}}, 0},
		{[]m{bit(0), bit(1)}, 2},
		{[]m{bit(0), bit(0)}, 1},
		{[]m{bit(0, 1), bit(1, 1000)}, 3},
		{[]m{bit(63), bit(64), {}}, 2},
	} {
		if got := shmem.CPUUnion(tc.masks); got != tc.want {
			t.Errorf("cpuUnion(%v) = %d, want %d", tc.masks, got, tc.want)
		}
	}
}

// Three PE processes sharing two CPUs take one Go processor each when
// they have TCP links (pretend hosts), unless GOMAXPROCS is set; PEs
// that only share memory keep the runtime's count.
func TestProcsShare(t *testing.T) {
	taskset, cpus := twoCPUs(t)
	wrapper := filepath.Join(t.TempDir(), "bind.sh")
	body := fmt.Sprintf("#!/bin/sh\nexec %s -c %d,%d \"$@\"\n", taskset, cpus[0], cpus[1])
	if err := os.WriteFile(wrapper, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		hosts []string
		env   string
		want  string
	}{
		{"tcp", []string{"a", "b", "c"}, "", "1"},
		{"tcp-env", []string{"a", "b", "c"}, "GOMAXPROCS=2", "2"},
		{"shm", nil, "", "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out testproc.Buffer
			env := []string{envScenario + "=procs-share", "GOSHMEM_TEST_WANT_PROCS=" + tc.want,
				"GOSHMEM_TIMEOUT=30s", "SHMEM_SYMMETRIC_SIZE=16M"}
			if tc.env != "" {
				env = append(env, tc.env)
			}
			job := &launch.Job{
				N: 3, Hosts: tc.hosts, Program: wrapper, Args: []string{os.Args[0], "-test.run=^$"},
				Env: env, Timeout: time.Minute, TagOutput: true, Stdout: &out, Stderr: &out,
			}
			code, err := job.Run(context.Background())
			if err != nil || code != 0 {
				t.Fatalf("exit %d, %v:\n%s", code, err, out.String())
			}
		})
	}
}

func TestProcsFor(t *testing.T) {
	for _, tc := range []struct{ pes, cpus, procs, want int }{
		{4, 2, 2, 1},    // 4 PEs on 2 CPUs: one each
		{3, 2, 2, 1},    // a share below one is one
		{2, 2, 2, 2},    // not oversubscribed: unchanged
		{1, 8, 8, 8},    // alone
		{16, 8, 8, 1},   // 16 on 8
		{4, 16, 16, 16}, // fewer PEs than CPUs
		{8, 4, 2, 1},
		{4, 2, 1, 1}, // already one
		{0, 2, 2, 2}, // nothing known
		{4, 0, 2, 2},
	} {
		if got := shmem.ProcsFor(tc.pes, tc.cpus, tc.procs); got != tc.want {
			t.Errorf("procsFor(%d PEs, %d CPUs, %d procs) = %d, want %d", tc.pes, tc.cpus, tc.procs, got, tc.want)
		}
	}
}
