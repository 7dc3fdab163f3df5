package engine

import (
	"fmt"
	"math"
	"strconv"

	"github.com/goshmem/goshmem/internal/errs"
)

// Launcher names, as Info().Launcher reports them.
const (
	OpenMPI   = "openmpi"    // Open MPI's mpirun (PMIx only; own rendezvous)
	Hydra     = "hydra"      // MPICH's mpiexec.hydra (PMI-1)
	PMI       = "pmi"        // another engine that serves PMI-1
	Slurm     = "slurm"      // srun without a PMI plugin (own rendezvous)
	SlurmPMI2 = "slurm-pmi2" // srun --mpi=pmi2 (PMI-1 wire protocol)
)

// Engine is what the environment says about the job a process belongs
// to when a foreign engine started it.
type Engine struct {
	Launcher string
	// Rank and Size; Size is 0 when only the PMI server can tell (Hydra
	// with -pmi-port sets PMI_ID and PMI_PORT but no size).
	Rank, Size int
	// LocalRank and LocalSize count the PEs the engine started on this
	// node; LocalSize is 0 when unknown.
	LocalRank, LocalSize int
	// JobID tells this job (step) from every other one alive at the same
	// time; the same on every PE. Empty when only the PMI server can
	// tell (its KVS name).
	JobID string
	// PMIFD (>= 0) or PMIPort (host:port, with PMIID) reach a PMI-1
	// server; PMIFD is -1 and PMIPort "" when there is none.
	PMIFD   int
	PMIPort string
	PMIID   int
	// Slurm only: the node this PE runs on (SLURM_NODEID), the first
	// node of the step (SLURM_STEP_NODELIST), and the number of nodes.
	NodeID    int
	FirstNode string
	Nodes     int
	// Rendezvous is GOSHMEM_RENDEZVOUS when set: rank 0 serves the job
	// there and every PE dials it.
	Rendezvous string
}

// SingleNode reports whether every PE is on this node, as far as the
// engine says.
func (e *Engine) SingleNode() bool {
	return e.Size > 0 && e.LocalSize == e.Size
}

// Detect reads the environment through lookup (os.LookupEnv in a PE).
// It returns ok=false and a nil error when no foreign engine started
// the process (goshrun's own variables are read before this, by package
// boot). It checks engines in this order: Open MPI (OMPI_COMM_WORLD_*),
// PMI (PMI_RANK/PMI_SIZE, or PMI_ID/PMI_PORT), Slurm (SLURM_PROCID,
// SLURM_NTASKS in a job step). Slurm comes last because an mpirun or
// mpiexec started inside an allocation inherits SLURM_*.
//
// An environment that names a job of more than one PE but lacks what
// joining it needs is an error (wrapping errs.Invalid) naming what is
// missing: never a silent job of one PE.
func Detect(lookup func(string) (string, bool)) (e Engine, ok bool, err error) {
	v := vars{lookup}
	e.PMIFD = -1
	if r, set := lookup("GOSHMEM_RENDEZVOUS"); set && r != "" {
		e.Rendezvous = r
	}
	switch {
	case v.has("OMPI_COMM_WORLD_SIZE") || v.has("OMPI_COMM_WORLD_RANK"):
		err = e.openMPI(v)
	case v.has("PMI_RANK") || v.has("PMI_SIZE") || v.has("PMI_ID") || v.has("PMI_PORT") || v.has("PMI_FD"):
		err = e.pmi(v)
	case v.has("SLURM_STEP_ID") || v.has("SLURM_STEPID"):
		if !v.has("SLURM_PROCID") && !v.has("SLURM_NTASKS") {
			return Engine{}, false, nil
		}
		e.Launcher = Slurm
		err = e.slurm(v, true)
	default:
		// No engine; a Slurm batch script (SLURM_* but no step) runs
		// the program as one process, which is what it is.
		return Engine{}, false, nil
	}
	if err != nil {
		return Engine{}, true, err
	}
	return e, true, nil
}

type vars struct{ lookup func(string) (string, bool) }

func (v vars) has(name string) bool {
	s, ok := v.lookup(name)
	return ok && s != ""
}

func (v vars) str(name string) string {
	s, _ := v.lookup(name)
	return s
}

// num reads a required non-negative decimal variable; who names the
// engine in the error.
func (v vars) num(who, name string) (int, error) {
	s, ok := v.lookup(name)
	if !ok || s == "" {
		return 0, fmt.Errorf("engine: %s: %s is not set: %w", who, name, errs.Invalid)
	}
	return parseNum(name, s)
}

func parseNum(name, s string) (int, error) {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n < 0 || n > math.MaxInt32 {
		return 0, fmt.Errorf("engine: %s=%q is not a non-negative integer: %w", name, s, errs.Invalid)
	}
	return int(n), nil
}

func checkRank(who string, rank, size int) error {
	if size < 1 || rank >= size {
		return fmt.Errorf("engine: %s: rank %d outside a job of %d PEs: %w", who, rank, size, errs.Invalid)
	}
	return nil
}

// rankSize reads the engine's rank and size variables.
func (e *Engine) rankSize(v vars, who, rankVar, sizeVar string) (err error) {
	if e.Rank, err = v.num(who, rankVar); err != nil {
		return err
	}
	if e.Size, err = v.num(who, sizeVar); err != nil {
		return err
	}
	return checkRank(who, e.Rank, e.Size)
}

func (e *Engine) openMPI(v vars) (err error) {
	const who = "Open MPI (OMPI_COMM_WORLD_*)"
	e.Launcher = OpenMPI
	if err := e.rankSize(v, who, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"); err != nil {
		return err
	}
	if e.Size == 1 {
		e.LocalSize = 1
		return nil
	}
	if e.LocalRank, err = v.num(who, "OMPI_COMM_WORLD_LOCAL_RANK"); err != nil {
		return err
	}
	if e.LocalSize, err = v.num(who, "OMPI_COMM_WORLD_LOCAL_SIZE"); err != nil {
		return err
	}
	if e.LocalSize < 1 || e.LocalRank >= e.LocalSize || e.LocalSize > e.Size {
		return fmt.Errorf("engine: %s: local rank %d of %d in a job of %d: %w", who, e.LocalRank, e.LocalSize, e.Size, errs.Invalid)
	}
	switch {
	case v.has("OMPI_MCA_ess_base_jobid"):
		e.JobID = "ompi-" + v.str("OMPI_MCA_ess_base_jobid")
	case v.has("PMIX_NAMESPACE"):
		e.JobID = "ompi-" + v.str("PMIX_NAMESPACE")
	default:
		return fmt.Errorf("engine: %s: a job of %d PEs, but neither OMPI_MCA_ess_base_jobid nor PMIX_NAMESPACE is set to tell it from other jobs: %w",
			who, e.Size, errs.Invalid)
	}
	return nil
}

func (e *Engine) pmi(v vars) (err error) {
	who := "PMI (PMI_*)"
	switch {
	case v.has("PMI_FD"):
		if e.PMIFD, err = parseNum("PMI_FD", v.str("PMI_FD")); err != nil {
			return err
		}
	case v.has("PMI_PORT"):
		e.PMIPort = v.str("PMI_PORT")
	}
	if v.has("PMI_RANK") || v.has("PMI_SIZE") {
		if err := e.rankSize(v, who, "PMI_RANK", "PMI_SIZE"); err != nil {
			return err
		}
	} else {
		// Hydra's -pmi-port: the server tells rank and size.
		if e.PMIID, err = v.num(who, "PMI_ID"); err != nil {
			return err
		}
		if e.PMIPort == "" {
			return fmt.Errorf("engine: %s: PMI_ID is set but PMI_PORT is not: %w", who, errs.Invalid)
		}
		e.Rank = e.PMIID
	}
	if e.PMIFD < 0 && e.PMIPort == "" && e.Size > 1 {
		return fmt.Errorf("engine: %s: PMI_RANK and PMI_SIZE=%d are set but neither PMI_FD nor PMI_PORT: no PMI server to exchange addresses with: %w",
			who, e.Size, errs.Invalid)
	}
	// Which engine serves it: srun --mpi=pmi2 also sets the step's
	// SLURM_* (with the same rank); Hydra sets MPI_LOCALRANKID.
	slurmRank, serr := parseNum("SLURM_PROCID", v.str("SLURM_PROCID"))
	switch {
	case v.has("MPI_LOCALRANKID") || v.has("MPI_LOCALNRANKS"):
		e.Launcher = Hydra
		if e.LocalRank, err = v.num(who, "MPI_LOCALRANKID"); err != nil {
			return err
		}
		if e.LocalSize, err = v.num(who, "MPI_LOCALNRANKS"); err != nil {
			return err
		}
	case (v.has("SLURM_STEP_ID") || v.has("SLURM_STEPID")) && serr == nil && slurmRank == e.Rank:
		e.Launcher = SlurmPMI2
		if err := e.slurm(v, false); err != nil {
			return err
		}
	default:
		e.Launcher = PMI
	}
	if e.Size == 1 {
		e.LocalRank, e.LocalSize = 0, 1
	}
	return nil
}

// slurm reads a job step's variables. full: Slurm is the engine (rank
// and size come from it, and it must say where rank 0 is).
func (e *Engine) slurm(v vars, full bool) (err error) {
	const who = "Slurm (SLURM_*)"
	if full {
		if err := e.rankSize(v, who, "SLURM_PROCID", "SLURM_NTASKS"); err != nil {
			return err
		}
		if e.Size == 1 {
			e.LocalSize = 1
			return nil
		}
	}
	job, step := v.str("SLURM_JOB_ID"), v.str("SLURM_STEP_ID")
	if job == "" {
		job = v.str("SLURM_JOBID")
	}
	if step == "" {
		step = v.str("SLURM_STEPID")
	}
	if job == "" {
		return fmt.Errorf("engine: %s: a job of %d PEs, but SLURM_JOB_ID is not set: %w", who, e.Size, errs.Invalid)
	}
	e.JobID = "slurm-" + job + "." + step
	if e.LocalRank, err = v.num(who, "SLURM_LOCALID"); err != nil {
		return err
	}
	if e.NodeID, err = v.num(who, "SLURM_NODEID"); err != nil {
		return err
	}
	tpn := v.str("SLURM_STEP_TASKS_PER_NODE")
	if tpn == "" {
		tpn = v.str("SLURM_TASKS_PER_NODE")
	}
	if tpn == "" {
		return fmt.Errorf("engine: %s: neither SLURM_STEP_TASKS_PER_NODE nor SLURM_TASKS_PER_NODE is set (needed for the local PE count): %w", who, errs.Invalid)
	}
	counts, err := TasksPerNode(tpn)
	if err != nil {
		return err
	}
	if e.NodeID >= len(counts) {
		return fmt.Errorf("engine: %s: SLURM_NODEID=%d but SLURM_STEP_TASKS_PER_NODE=%q lists %d nodes: %w", who, e.NodeID, tpn, len(counts), errs.Invalid)
	}
	e.LocalSize, e.Nodes = counts[e.NodeID], len(counts)
	if e.LocalRank >= e.LocalSize {
		return fmt.Errorf("engine: %s: SLURM_LOCALID=%d but node %d runs %d tasks: %w", who, e.LocalRank, e.NodeID, e.LocalSize, errs.Invalid)
	}
	if full {
		sum := 0
		for _, c := range counts {
			sum += c
		}
		if sum != e.Size {
			return fmt.Errorf("engine: %s: SLURM_STEP_TASKS_PER_NODE=%q adds up to %d tasks, SLURM_NTASKS is %d: %w", who, tpn, sum, e.Size, errs.Invalid)
		}
		nl := v.str("SLURM_STEP_NODELIST")
		if nl == "" {
			nl = v.str("SLURM_NODELIST")
		}
		if nl == "" {
			return fmt.Errorf("engine: %s: a job of %d PEs, but SLURM_STEP_NODELIST is not set (rank 0 serves the rendezvous on its first node): %w", who, e.Size, errs.Invalid)
		}
		if e.FirstNode, err = FirstHost(nl); err != nil {
			return err
		}
	}
	return nil
}
