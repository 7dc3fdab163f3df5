package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/goshmem/goshmem/internal/errs"
)

func envOf(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		m[k] = v
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// The environments below are what each engine set on this kind of
// machine (../shared/recipes/slurm-single-node.md and env dumps).
var (
	ompi = []string{"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=4", "OMPI_COMM_WORLD_LOCAL_RANK=1",
		"OMPI_COMM_WORLD_LOCAL_SIZE=4", "OMPI_MCA_ess_base_jobid=938868737", "PMIX_NAMESPACE=938868737", "PMIX_RANK=1"}
	hydra     = []string{"PMI_RANK=2", "PMI_SIZE=4", "PMI_FD=6", "MPI_LOCALRANKID=2", "MPI_LOCALNRANKS=4", "HYDI_CONTROL_FD=7"}
	hydraPort = []string{"PMI_ID=3", "PMI_PORT=vm:39681", "MPI_LOCALRANKID=3", "MPI_LOCALNRANKS=4"}
	slurm     = []string{"SLURM_PROCID=3", "SLURM_NTASKS=5", "SLURM_LOCALID=0", "SLURM_NODEID=1", "SLURM_JOB_ID=17",
		"SLURM_STEP_ID=2", "SLURM_STEPID=2", "SLURM_STEP_NODELIST=node[07-08]", "SLURM_STEP_TASKS_PER_NODE=3,2"}
	slurmPMI2 = append([]string{"PMI_FD=11", "PMI_RANK=3", "PMI_SIZE=5", "PMI_JOBID=17.2"}, slurm...)
)

func with(base []string, kv ...string) []string {
	return append(append([]string(nil), base...), kv...)
}

func without(base []string, name string) []string {
	var out []string
	for _, kv := range base {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

func TestDetect(t *testing.T) {
	cases := []struct {
		name string
		env  []string
		want Engine // checked fields: Launcher, Rank, Size, LocalRank, LocalSize, JobID, PMI*, FirstNode, NodeID
	}{
		{"openmpi", ompi, Engine{Launcher: OpenMPI, Rank: 1, Size: 4, LocalRank: 1, LocalSize: 4, JobID: "ompi-938868737", PMIFD: -1}},
		{"openmpi without ess jobid", without(ompi, "OMPI_MCA_ess_base_jobid"),
			Engine{Launcher: OpenMPI, Rank: 1, Size: 4, LocalRank: 1, LocalSize: 4, JobID: "ompi-938868737", PMIFD: -1}},
		{"openmpi of one", []string{"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=1"},
			Engine{Launcher: OpenMPI, Size: 1, LocalSize: 1, PMIFD: -1}},
		{"mpirun inside an allocation", with(ompi, slurm...),
			Engine{Launcher: OpenMPI, Rank: 1, Size: 4, LocalRank: 1, LocalSize: 4, JobID: "ompi-938868737", PMIFD: -1}},
		{"hydra", hydra, Engine{Launcher: Hydra, Rank: 2, Size: 4, LocalRank: 2, LocalSize: 4, PMIFD: 6}},
		{"hydra -pmi-port", hydraPort, Engine{Launcher: Hydra, Rank: 3, LocalRank: 3, LocalSize: 4, PMIFD: -1, PMIPort: "vm:39681", PMIID: 3}},
		{"mpiexec inside an allocation", with(hydra, "SLURM_JOB_ID=5", "SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_NTASKS=1"),
			Engine{Launcher: Hydra, Rank: 2, Size: 4, LocalRank: 2, LocalSize: 4, PMIFD: 6}},
		{"srun --mpi=pmi2", slurmPMI2, Engine{Launcher: SlurmPMI2, Rank: 3, Size: 5, LocalRank: 0, LocalSize: 2, JobID: "slurm-17.2", PMIFD: 11, NodeID: 1}},
		{"other PMI", []string{"PMI_RANK=0", "PMI_SIZE=2", "PMI_FD=3"}, Engine{Launcher: PMI, Size: 2, PMIFD: 3}},
		{"srun", slurm, Engine{Launcher: Slurm, Rank: 3, Size: 5, LocalRank: 0, LocalSize: 2, JobID: "slurm-17.2", PMIFD: -1, FirstNode: "node07", NodeID: 1}},
		{"srun old names", []string{"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=0", "SLURM_NODEID=0", "SLURM_JOBID=9",
			"SLURM_STEPID=1", "SLURM_NODELIST=localhost", "SLURM_TASKS_PER_NODE=2"},
			Engine{Launcher: Slurm, Size: 2, LocalSize: 2, JobID: "slurm-9.1", PMIFD: -1, FirstNode: "localhost"}},
		{"srun of one", []string{"SLURM_PROCID=0", "SLURM_NTASKS=1", "SLURM_STEP_ID=0"}, Engine{Launcher: Slurm, Size: 1, LocalSize: 1, PMIFD: -1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, ok, err := Detect(envOf(c.env...))
			if err != nil || !ok {
				t.Fatalf("Detect: %v, %v", ok, err)
			}
			w := c.want
			if e.Launcher != w.Launcher || e.Rank != w.Rank || e.Size != w.Size || e.LocalRank != w.LocalRank ||
				e.LocalSize != w.LocalSize || e.JobID != w.JobID || e.PMIFD != w.PMIFD || e.PMIPort != w.PMIPort ||
				e.PMIID != w.PMIID || e.FirstNode != w.FirstNode || e.NodeID != w.NodeID {
				t.Fatalf("Detect =\n %+v\nwant\n %+v", e, w)
			}
		})
	}
}

func TestDetectNone(t *testing.T) {
	for _, env := range [][]string{
		nil,
		{"HOME=/root"},
		// A Slurm batch script: the allocation's SLURM_*, no step.
		{"SLURM_JOB_ID=4", "SLURM_NTASKS=4", "SLURM_PROCID=0", "SLURM_NODELIST=localhost"},
	} {
		if e, ok, err := Detect(envOf(env...)); ok || err != nil {
			t.Errorf("Detect(%v) = %+v, %v, %v; want no engine", env, e, ok, err)
		}
	}
}

func TestDetectRefusesWhatCannotBeJoined(t *testing.T) {
	cases := []struct {
		name    string
		env     []string
		mention string // the error must name what is missing
	}{
		{"openmpi without size", without(ompi, "OMPI_COMM_WORLD_SIZE"), "OMPI_COMM_WORLD_SIZE"},
		{"openmpi without local size", without(ompi, "OMPI_COMM_WORLD_LOCAL_SIZE"), "OMPI_COMM_WORLD_LOCAL_SIZE"},
		{"openmpi without a job id", without(without(ompi, "OMPI_MCA_ess_base_jobid"), "PMIX_NAMESPACE"), "PMIX_NAMESPACE"},
		{"openmpi rank out of range", with(without(ompi, "OMPI_COMM_WORLD_RANK"), "OMPI_COMM_WORLD_RANK=4"), "outside"},
		{"openmpi garbage size", with(without(ompi, "OMPI_COMM_WORLD_SIZE"), "OMPI_COMM_WORLD_SIZE=four"), "OMPI_COMM_WORLD_SIZE"},
		{"pmi without server", without(hydra, "PMI_FD"), "PMI_FD"},
		{"pmi without size", without(hydra, "PMI_SIZE"), "PMI_SIZE"},
		{"pmi id without port", without(hydraPort, "PMI_PORT"), "PMI_PORT"},
		{"hydra without local size", without(hydra, "MPI_LOCALNRANKS"), "MPI_LOCALNRANKS"},
		{"srun without nodelist", without(without(slurm, "SLURM_STEP_NODELIST"), "SLURM_NODELIST"), "SLURM_STEP_NODELIST"},
		{"srun without tasks per node", without(slurm, "SLURM_STEP_TASKS_PER_NODE"), "SLURM_STEP_TASKS_PER_NODE"},
		{"srun without job id", without(slurm, "SLURM_JOB_ID"), "SLURM_JOB_ID"},
		{"srun without local id", without(slurm, "SLURM_LOCALID"), "SLURM_LOCALID"},
		{"srun tasks do not add up", with(without(slurm, "SLURM_NTASKS"), "SLURM_NTASKS=6"), "adds up"},
		{"srun node beyond the list", with(without(slurm, "SLURM_NODEID"), "SLURM_NODEID=2"), "SLURM_NODEID"},
		{"srun bad tasks per node", with(without(slurm, "SLURM_STEP_TASKS_PER_NODE"), "SLURM_STEP_TASKS_PER_NODE=3(y2)"), "SLURM_STEP_TASKS_PER_NODE"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, ok, err := Detect(envOf(c.env...))
			if err == nil {
				t.Fatalf("Detect = %+v, %v, nil; want an error", e, ok)
			}
			if !ok || !errors.Is(err, errs.Invalid) || !strings.Contains(err.Error(), c.mention) {
				t.Fatalf("Detect error %q (ok %v): want errs.Invalid naming %s", err, ok, c.mention)
			}
		})
	}
}

func TestFirstHost(t *testing.T) {
	for in, want := range map[string]string{
		"localhost": "localhost", "a,b": "a", "node[03-05,9],gpu1": "node03", "node[9,1-2]": "node9",
		"rack[1-2]-n[7-8]": "rack1-n7", "n[001-100]": "n001", "x.example.com": "x.example.com",
	} {
		if got, err := FirstHost(in); err != nil || got != want {
			t.Errorf("FirstHost(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", ",a", "n[1-2", "n]", "n[]", "n[a-b]", strings.Repeat("a", maxList+1)} {
		if got, err := FirstHost(in); !errors.Is(err, errs.Invalid) {
			t.Errorf("FirstHost(%.20q) = %q, %v; want errs.Invalid", in, got, err)
		}
	}
}

func TestTasksPerNode(t *testing.T) {
	for in, want := range map[string][]int{"4": {4}, "2(x3),1": {2, 2, 2, 1}, "1,2,3": {1, 2, 3}, "5(x1)": {5}} {
		got, err := TasksPerNode(in)
		if err != nil || len(got) != len(want) {
			t.Fatalf("TasksPerNode(%q) = %v, %v; want %v", in, got, err, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("TasksPerNode(%q) = %v; want %v", in, got, want)
			}
		}
	}
	for _, in := range []string{"", "0", "-1", "2(x0)", "2(x", "2x3", "a", "2(x3)1", "1(x2000000)", ","} {
		if got, err := TasksPerNode(in); !errors.Is(err, errs.Invalid) {
			t.Errorf("TasksPerNode(%q) = %v, %v; want errs.Invalid", in, got, err)
		}
	}
}

func FuzzSlurmLists(f *testing.F) {
	for _, s := range []string{"node[03-05,9],gpu1", "2(x3),1", "a[", "]", "1(x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if h, err := FirstHost(s); err == nil && (h == "" || strings.ContainsAny(h, ",[]")) {
			t.Fatalf("FirstHost(%q) = %q", s, h)
		}
		if c, err := TasksPerNode(s); err == nil {
			for _, n := range c {
				if n < 1 {
					t.Fatalf("TasksPerNode(%q) = %v", s, c)
				}
			}
		}
	})
}
