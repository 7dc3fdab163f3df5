package engine

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Command is how to start n PEs under one engine on this machine, as
// docs/launching.md gives it; the engine tests (here and in shmem) run
// their jobs through these.
type Command struct {
	Launcher string // what Info().Launcher reports under it
	Label    string
	Path     string
	Args     []string // before the program
	Slurm    bool     // needs a Slurm controller (SLURM_CONF)
	// SelfKill: the engine itself SIGKILLs every other rank within
	// milliseconds when one dies (Hydra), before the runtime can speak.
	SelfKill bool
}

// Commands lists the engines' command lines for n PEs.
func Commands(n int) []Command {
	np := strconv.Itoa(n)
	ompi := []string{"--oversubscribe", "-np", np}
	if os.Geteuid() == 0 {
		ompi = append([]string{"--allow-run-as-root"}, ompi...)
	}
	return []Command{
		{Launcher: OpenMPI, Label: "mpirun", Path: "mpirun.openmpi", Args: ompi},
		{Launcher: Hydra, Label: "mpiexec.hydra", Path: "mpiexec.hydra", Args: []string{"-n", np}, SelfKill: true},
		{Launcher: Hydra, Label: "mpiexec.hydra-pmi-port", Path: "mpiexec.hydra", Args: []string{"-pmi-port", "-n", np}, SelfKill: true},
		{Launcher: Slurm, Label: "srun", Path: "srun", Args: []string{"-n", np, "--overcommit"}, Slurm: true},
		{Launcher: SlurmPMI2, Label: "srun-pmi2", Path: "srun", Args: []string{"--mpi=pmi2", "-n", np, "--overcommit"}, Slurm: true},
	}
}

// Usable says why c cannot run here (nil when it can): the engine is
// not installed, or no Slurm controller answers.
func (c Command) Usable() error {
	if _, err := exec.LookPath(c.Path); err != nil {
		return fmt.Errorf("%s is not installed (.ci/run installs openmpi-bin, mpich and Slurm)", c.Path)
	}
	if c.Slurm {
		if _, err := exec.LookPath("sinfo"); err != nil {
			return fmt.Errorf("sinfo is not installed (.ci/run installs slurm-client)")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "sinfo", "-h", "-o", "%T").Output()
		st := strings.TrimSpace(string(out))
		if err != nil || st == "" || strings.Contains(st, "down") || strings.Contains(st, "drain") || strings.Contains(st, "not_responding") {
			return fmt.Errorf("no Slurm controller answers (sinfo: %v %q; .ci/run starts one with .ci/slurm.sh and sets SLURM_CONF)", err, st)
		}
	}
	return nil
}
