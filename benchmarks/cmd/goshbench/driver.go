package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/goshmem/goshmem/benchmarks/report"
	"github.com/goshmem/goshmem/benchmarks/suite"
	"github.com/goshmem/goshmem/internal/launch"
)

// PE environment besides goshbench's own: room for the payload, and a
// bound on every goshmem wait that is generous next to a repetition.
const peTimeout = "300s"

// run is goshbench's main: it returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if o.list {
		listSuites(stdout)
		return 0
	}
	if err := runAll(o, args, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

func listSuites(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "suite\tgroup\tPEs\tsizes\tstatus\tdefinition")
	for _, s := range suite.All() {
		pes, sized, status := "any", "fixed", "available"
		if s.Pair {
			pes = "2"
		}
		if s.Sized {
			sized = "-sizes"
			if s.DefaultSizes != nil {
				var ds []string
				for _, n := range s.DefaultSizes {
					ds = append(ds, report.SizeString(n))
				}
				sized = "-sizes, else " + strings.Join(ds, ",")
			}
		}
		if s.Missing != "" {
			status = s.Missing
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Group, pes, sized, status, s.Doc)
	}
	tw.Flush()
	fmt.Fprintf(w, "\ngroups: %s, default, all\n", strings.Join(suite.Groups(), ", "))
}

// runAll runs one job per available transport and PE count, then writes
// every output asked for.
func runAll(o *options, args []string, stdout, stderr io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("goshbench: finding my own binary to start the PEs: %w", err)
	}
	run := report.Run{
		Command:   strings.TrimSpace("goshbench " + strings.Join(args, " ")),
		Timestamp: time.Now().UTC().Format(time.RFC3339),
		GoVersion: runtime.Version(), Transports: o.transports, Reps: o.reps,
	}
	skip := func(what, reason string) {
		run.Skipped = append(run.Skipped, report.Skip{What: what, Reason: reason})
		fmt.Fprintf(stderr, "goshbench: skipping %s: %s\n", what, reason)
	}
	for _, s := range o.suites {
		switch {
		case s.Missing != "":
			skip(s.Name, s.Missing)
		case s.Pair && !containsInt(o.pes, 2):
			skip(s.Name, "pairwise (PE 0 against PE 1, as in OSU): runs in 2-PE jobs only, and -pes has no 2")
		}
	}

	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigc)

	var figs []report.Figure
	for _, tname := range o.transports {
		t := lookupTransport(tname)
		if t.missing != "" {
			skip("transport "+t.name, t.missing)
			continue
		}
		for _, npes := range o.pes {
			var names []string
			for _, s := range o.suites {
				if s.RunsAt(npes) {
					names = append(names, s.Name)
				}
			}
			if len(names) == 0 {
				continue
			}
			cfg := suite.Config{Transport: t.name, Suites: names, Sizes: o.sizes, SizesGiven: o.sizesGiven, Iters: o.iters, Warmup: o.warmup,
				Reps: o.reps, RepTime: o.repTime, Window: o.window, Bind: o.bind, Timeout: 2 * time.Minute}
			if err := cfg.Validate(); err != nil {
				return err
			}
			res, job, err := runJob(exe, t, npes, cfg, o.timeout, sigc, stderr)
			if err != nil {
				return err
			}
			run.Jobs = append(run.Jobs, job)
			if run.CPU == "" {
				run.CPU, run.Cores, run.Threads = res.CPU, res.Cores, res.Threads
			}
			for _, m := range res.Limits {
				run.Limits = append(run.Limits, report.SummariseLimit(m))
			}
			for _, sk := range res.Skipped {
				skip(sk.What, sk.Reason)
			}
			for _, m := range res.Figures {
				f, err := report.Summarise(m)
				if err != nil {
					return fmt.Errorf("goshbench: %s, %d PEs: %w", t.name, npes, err)
				}
				figs = append(figs, f)
			}
		}
	}
	if len(run.Jobs) == 0 {
		return fmt.Errorf("goshbench: nothing to measure (every transport or suite asked for is unavailable; see above)")
	}

	if o.benchFormat {
		if err := report.WriteBench(stdout, run, figs); err != nil {
			return err
		}
		if err := report.WriteTable(stderr, run, figs); err != nil {
			return err
		}
	} else if err := report.WriteTable(stdout, run, figs); err != nil {
		return err
	}
	if o.jsonPath != "" {
		if err := report.WriteJSON(o.jsonPath, run, figs); err != nil {
			return err
		}
	}
	if o.svgDir != "" {
		files, err := report.WriteSVGs(o.svgDir, run, figs)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "goshbench: wrote %d plots into %s\n", len(files), o.svgDir)
	}
	return nil
}

// runJob runs one job of npes PE processes of this binary and collects
// what they wrote.
func runJob(exe string, t *transport, npes int, cfg suite.Config, timeout time.Duration,
	sigc <-chan os.Signal, stderr io.Writer) (report.JobResult, report.Job, error) {
	var res report.JobResult
	job := report.Job{Transport: t.name, PEs: npes, LoadStart: loadavg()}
	dir, err := os.MkdirTemp("", "goshbench-")
	if err != nil {
		return res, job, err
	}
	defer os.RemoveAll(dir)
	cenv, err := cfg.Environ()
	if err != nil {
		return res, job, err
	}
	j := &launch.Job{
		N: npes, Program: exe,
		Env: []string{suite.EnvPE + "=1", suite.EnvOut + "=" + dir, cenv,
			"SHMEM_SYMMETRIC_SIZE=" + strconv.Itoa(cfg.HeapBytes(npes)), "GOSHMEM_TIMEOUT=" + peTimeout},
		// PEs print only progress and errors: all of it goes to stderr,
		// so that stdout carries the report alone.
		Stdout: stderr, Stderr: stderr, Timeout: timeout, Signals: sigc,
		Logf: func(format string, args ...any) {
			fmt.Fprintf(stderr, "goshbench: launcher: "+format+"\n", args...)
		},
	}
	if t.hosts != nil {
		j.Hosts = t.hosts(npes)
	}
	if t.place != nil {
		prog, args, listen, err := t.place(npes, dir, exe)
		if err != nil {
			return res, job, fmt.Errorf("goshbench: %s job of %d PEs: %w", t.name, npes, err)
		}
		j.Program, j.Args, j.Listen = prog, args, listen
	}
	fmt.Fprintf(stderr, "goshbench: starting %s job of %d PEs (%d suites)\n", t.name, npes, len(cfg.Suites))
	start := time.Now()
	code, err := j.Run(context.Background())
	job.Seconds, job.LoadEnd = time.Since(start).Seconds(), loadavg()
	if err != nil {
		return res, job, fmt.Errorf("goshbench: %s job of %d PEs: %w", t.name, npes, err)
	}
	if code != 0 {
		return res, job, fmt.Errorf("goshbench: %s job of %d PEs failed with exit code %d (PE errors above)", t.name, npes, code)
	}
	if err := readJSON(filepath.Join(dir, "results.json"), &res); err != nil {
		return res, job, err
	}
	for r := range npes {
		var p report.Placement
		if err := readJSON(filepath.Join(dir, fmt.Sprintf("pe-%d.json", r)), &p); err != nil {
			return res, job, err
		}
		job.Placement = append(job.Placement, p)
	}
	fmt.Fprintf(stderr, "goshbench: %s job of %d PEs done in %.1f s\n", t.name, npes, job.Seconds)
	return res, job, nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("goshbench: reading a PE's results: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("goshbench: %s: %w", path, err)
	}
	return nil
}

// loadavg is the first three fields of /proc/loadavg.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func containsInt(xs []int, v int) bool {
	for _, x := range xs {
		if x == v {
			return true
		}
	}
	return false
}
