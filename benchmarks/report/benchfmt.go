package report

import (
	"fmt"
	"io"
	"runtime"
	"strings"
)

// BenchName is a figure's name in the Go benchmark format, with the
// parameters as name keys so that benchstat can group by them
// (benchstat -col /transport):
//
//	BenchmarkPutLatency/metric=latency/transport=shm/pes=2/size=8B
func BenchName(r Record) string {
	var b strings.Builder
	b.WriteString("Benchmark")
	for _, part := range strings.FieldsFunc(r.Suite, func(c rune) bool { return c == '-' || c == '_' || c == '/' }) {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	fmt.Fprintf(&b, "/metric=%s/transport=%s/pes=%d/size=%s", r.Metric, r.Transport, r.PEs, SizeString(r.Size))
	return b.String()
}

// benchUnit is the unit a metric's values carry in benchmark lines.
func benchUnit(m Metric) string {
	if m == Latency {
		return "ns/op"
	}
	return m.Unit()
}

// WriteBench writes the figures in the Go benchmark format
// (golang.org/design/14313-benchmark-format): the run's configuration,
// unit metadata, then one line per repetition, so that benchstat sees
// each figure's distribution. Each line carries the figure in its unit
// and the ratio to the limit measured in the same repetition (x-limit).
func WriteBench(w io.Writer, run Run, figs []Figure) error {
	var b strings.Builder
	fmt.Fprintf(&b, "goos: %s\ngoarch: %s\n", runtime.GOOS, runtime.GOARCH)
	b.WriteString("pkg: github.com/goshmem/goshmem/benchmarks\n")
	fmt.Fprintf(&b, "cpu: %s\n", run.CPU)
	// No timestamp: benchstat would split two runs' results by it.
	fmt.Fprintf(&b, "go: %s\ncores: %d\nthreads: %d\n", run.GoVersion, run.Cores, run.Threads)
	b.WriteString("Unit GB/s better=higher\nUnit Mops/s better=higher\nUnit x-limit better=higher\n")
	for _, f := range figs {
		name := BenchName(f.Record)
		for i, v := range f.Samples {
			lim := f.Limit
			if i < len(f.LimitSamples) {
				lim = f.LimitSamples[i]
			}
			fmt.Fprintf(&b, "%s\t%d\t%.6g %s\t%.6g x-limit\n", name, max(f.Iters, 1), v, benchUnit(f.Metric), f.Metric.Ratio(v, lim))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
