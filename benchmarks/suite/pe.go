package suite

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/goshmem/goshmem/benchmarks/report"
	"github.com/goshmem/goshmem/shmem"
)

// IsPE reports whether this process was started by goshbench as one PE
// of a job (goshbench re-executes itself; EnvPE selects this mode).
func IsPE() bool { return os.Getenv(EnvPE) == "1" }

// PEMain runs this process as one PE of a goshbench job and returns the
// process's exit code. Every PE runs the configured suites; PE 0 times
// them, prints progress on stderr and writes results.json; every PE
// writes pe-N.json (where it ran) into the EnvOut directory.
func PEMain() int {
	if err := runPE(); err != nil {
		fmt.Fprintf(os.Stderr, "goshbench PE: %v\n", err)
		return 1
	}
	return 0
}

func runPE() error {
	cfg, err := configFromEnv()
	if err != nil {
		return err
	}
	out := os.Getenv(EnvOut)
	if out == "" {
		return fmt.Errorf("%s is not set", EnvOut)
	}
	before := readProc()
	pe, err := shmem.Init()
	if err != nil {
		return err
	}
	cpus, err := allowedCPUs() // before binding narrows them
	if err != nil {
		return fmt.Errorf("PE %d: %w", pe.MyPE(), err)
	}
	bound, err := bind(cfg.Bind, pe.MyPE(), pe.NPEs())
	if err != nil {
		return fmt.Errorf("PE %d: %w", pe.MyPE(), err)
	}
	before.cpu = currentCPU()
	b, err := newB(pe, cfg, os.Stderr)
	if err != nil {
		return err
	}
	b.oversub = pe.NPEs() > len(cpus)
	// After newB's barrier every PE has met every other: the routes are
	// settled, and must be the transport's.
	routes, err := checkRoutes(pe.Info(), cfg.Transport)
	if err != nil {
		return err
	}
	if path := os.Getenv(EnvCPUProfile); path != "" {
		if b.rank > 0 {
			path = fmt.Sprintf("%s.%d", path, b.rank)
		}
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var todo []*Suite
	for _, name := range cfg.Suites {
		if s := Lookup(name); s.RunsAt(b.npes) {
			todo = append(todo, s)
		}
	}
	start := time.Now()
	for i, s := range todo {
		if b.rank == 0 {
			what := ""
			if s.Sized {
				what = fmt.Sprintf(" (%d sizes)", len(cfg.SizesFor(s)))
			}
			fmt.Fprintf(b.progress, "goshbench: %s, %d PEs: %5.1fs [%d/%d] %s%s\n",
				cfg.Transport, b.npes, time.Since(start).Seconds(), i+1, len(todo), s.Name, what)
		}
		if !s.Sized {
			if err := s.Run(b, 0); err != nil {
				return fmt.Errorf("suite %s: %w", s.Name, err)
			}
			continue
		}
		for _, size := range cfg.SizesFor(s) {
			if err := s.Run(b, size); err != nil {
				return fmt.Errorf("suite %s at %d bytes: %w", s.Name, size, err)
			}
		}
	}
	if b.tcp != nil {
		b.tcp.conn.Close()
	}
	info := pe.Info()
	after := readProc()
	place := report.Placement{PE: b.rank, Pid: info.Pid, Host: info.Host, CPUsAllowed: after.cpus,
		CPUStart: before.cpu, CPUEnd: after.cpu, Preempted: after.nonvoluntary - before.nonvoluntary,
		VoluntarySw: after.voluntary - before.voluntary, Oversubscribed: info.Oversubscribed, BoundCPU: bound,
		Routes: routes}
	if err := writeJSON(filepath.Join(out, fmt.Sprintf("pe-%d.json", b.rank)), place); err != nil {
		return err
	}
	if b.rank == 0 {
		res := report.JobResult{Transport: cfg.Transport, PEs: b.npes, CPU: info.CPU, Cores: info.Cores,
			Threads: info.Threads, GoVersion: info.GoVersion, Figures: b.figures, Limits: b.limits, Skipped: b.skipped}
		if err := writeJSON(filepath.Join(out, "results.json"), res); err != nil {
			return err
		}
	}
	return pe.Finalize()
}

// checkRoutes makes sure the job measures the transport it is named
// after: in a shm job every peer's heap is mapped here, in a tcp or
// netns job no peer's is (each PE has a host of its own, so every pair
// talks through netmesh). It returns the routes as "PE r: kind [addr]".
func checkRoutes(in shmem.Info, transport string) ([]string, error) {
	var out []string
	for _, r := range in.Routes {
		if r.Kind == "self" {
			continue
		}
		if (transport != TransportSHM) != (r.Kind != "shm") {
			return nil, fmt.Errorf("goshbench PE %d: a %s job, but PE %d is reached over %q "+
				"(host %q here, %q there)", in.PE, transport, r.PE, r.Kind, in.Host, r.Host)
		}
		out = append(out, strings.TrimSpace(fmt.Sprintf("PE %d: %s %s", r.PE, r.Kind, r.Addr)))
	}
	return out, nil
}

func writeJSON(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
