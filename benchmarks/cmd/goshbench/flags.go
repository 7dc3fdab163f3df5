package main

import (
	"flag"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goshmem/goshmem/benchmarks/suite"
	"github.com/goshmem/goshmem/heap"
)

// options are goshbench's command line, resolved.
type options struct {
	suites      []*suite.Suite
	suitesFlag  string
	pes         []int
	sizes       []int
	sizesGiven  bool // -sizes or -quick: the sizes apply to every sized suite, overriding its own defaults
	iters       int
	warmup      int
	reps        int
	repTime     time.Duration
	window      int
	bind        string
	quick       bool
	transports  []string
	jsonPath    string
	benchFormat bool
	svgDir      string
	timeout     time.Duration // per job
	list        bool
}

// Defaults of a full run; -quick changes those not given explicitly.
const (
	defaultSizes      = "1-4M"
	quickSizes        = "8,4K,1M"
	defaultJobTimeout = 30 * time.Minute
	quickJobTimeout   = 3 * time.Minute
)

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("goshbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: goshbench [flags]\n\n"+
			"Runs OSU-style goshmem benchmarks between PE processes and prints each figure beside\n"+
			"a limit of this machine measured in the same run. See docs/performance.md.\n\nflags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.suitesFlag, "suites", "default", "suites or groups to run, comma-separated (`names`; -list shows them; \"all\", \"default\")")
	pes := fs.String("pes", "2,4", "PE counts, one job each (`list`); pairwise suites run in the 2-PE job only")
	sizes := fs.String("sizes", defaultSizes, "message sizes (`list`): 8,4K,1M or a power-of-two range 1-4M; "+
		"the ring suites run at 8,64,512,4K,32K,256K unless -sizes or -quick is given")
	fs.IntVar(&o.iters, "iters", 0, "iterations per repetition (`n`; 0: calibrated to -rep-time)")
	fs.IntVar(&o.warmup, "warmup", 0, "untimed warm-up iterations per figure (`n`; 0: about -rep-time/4)")
	fs.IntVar(&o.reps, "reps", suite.DefaultReps, "repetitions per figure and per limit (`n`)")
	fs.DurationVar(&o.repTime, "rep-time", suite.DefaultRepTime, "target `duration` of one repetition when -iters is 0")
	fs.IntVar(&o.window, "window", suite.DefaultWindow, "operations per Quiet in bandwidth and rate suites (`n`)")
	fs.StringVar(&o.bind, "bind", suite.BindCPU, "PE placement (`mode`): cpu binds PE r to the r-th allowed CPU when PEs <= CPUs (as mpirun does); none leaves it to the kernel")
	fs.BoolVar(&o.quick, "quick", false, "smoke run of a few seconds: sizes "+quickSizes+", 3 repetitions of about 1 ms")
	tr := fs.String("transport", "shm", "transports, comma-separated (`list`): shm, tcp, netns (every PE in a network namespace of its own: run inside g1 of .ci/netns.sh)")
	fs.StringVar(&o.jsonPath, "json", "", "write the run and one record per figure as JSON to `file`")
	fs.BoolVar(&o.benchFormat, "bench-format", false, "print Go benchmark lines (for benchstat) on stdout; the table goes to stderr")
	fs.StringVar(&o.svgDir, "svg", "", "write SVG plots of latency and bandwidth against size into `dir`")
	fs.DurationVar(&o.timeout, "timeout", defaultJobTimeout, "end a job that runs longer than `duration`")
	fs.BoolVar(&o.list, "list", false, "list the suites and exit")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("goshbench: unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	o.sizesGiven = set["sizes"] || o.quick
	if o.quick {
		if !set["sizes"] {
			*sizes = quickSizes
		}
		if !set["reps"] {
			o.reps = suite.QuickReps
		}
		if !set["rep-time"] {
			o.repTime = suite.QuickRepTime
		}
		if !set["timeout"] {
			o.timeout = quickJobTimeout
		}
	}
	var err error
	if o.suites, err = suite.Select(o.suitesFlag); err != nil {
		return nil, err
	}
	if o.pes, err = parsePEs(*pes); err != nil {
		return nil, err
	}
	if o.sizes, err = parseSizes(*sizes); err != nil {
		return nil, err
	}
	if o.transports, err = parseTransports(*tr); err != nil {
		return nil, err
	}
	if o.bind != suite.BindCPU && o.bind != suite.BindNone {
		return nil, fmt.Errorf("goshbench: -bind %q: want %s or %s", o.bind, suite.BindCPU, suite.BindNone)
	}
	if o.timeout <= 0 {
		return nil, fmt.Errorf("goshbench: -timeout %v: want a positive duration", o.timeout)
	}
	return o, nil
}

func parsePEs(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 || n > 1024 {
			return nil, fmt.Errorf("goshbench: -pes %q: want PE counts from 2 to 1024, like 2,4", s)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// parseSizes reads "8,4K,1M" and power-of-two ranges "1-4M" (1, 2, 4,
// ... 4 MiB; a range from a non-power of two doubles from it).
func parseSizes(s string) ([]int, error) {
	bad := func(err error) ([]int, error) {
		return nil, fmt.Errorf("goshbench: -sizes %q: want sizes like 8,4K,1M or a range like 1-4M: %v", s, err)
	}
	size := func(f string) (int, error) {
		n, err := heap.ParseSize(f)
		if err == nil && (n < 1 || n > 1<<30) {
			err = fmt.Errorf("%d bytes is outside 1 B to 1 GiB", n)
		}
		return int(n), err
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		lo, hi, isRange := strings.Cut(f, "-")
		a, err := size(lo)
		if err != nil {
			return bad(err)
		}
		if !isRange {
			out = append(out, a)
			continue
		}
		z, err := size(hi)
		if err != nil {
			return bad(err)
		}
		if z < a {
			return bad(fmt.Errorf("range %s ends below its start", f))
		}
		for v := a; v <= z && bits.Len(uint(v)) < 62; v *= 2 {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
