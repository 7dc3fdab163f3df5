package report

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// SizeString writes a byte count the way the table and benchmark names
// do: 8B, 4KiB, 1MiB (exact binary units), or a plain byte count.
func SizeString(n int) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// ValueString writes a value of metric m with a readable unit: latency
// in ns, µs or ms; bandwidth in MB/s or GB/s; rate in Kops/s or Mops/s.
func ValueString(m Metric, v float64) string {
	scale, unit, prec := display(m, v)
	return fmt.Sprintf("%.*f %s", prec, v/scale, unit)
}

// display picks the unit ValueString writes v in: the divisor, the
// unit's name and the number of decimals.
func display(m Metric, v float64) (scale float64, unit string, prec int) {
	switch m {
	case Latency:
		switch {
		case v < 1e3:
			return 1, "ns", 1
		case v < 1e6:
			return 1e3, "µs", 2
		}
		return 1e6, "ms", 2
	case Bandwidth:
		if v < 0.1 {
			return 1e-3, "MB/s", 2
		}
		return 1, "GB/s", 2
	case Rate:
		if v < 1 {
			return 1e-3, "Kops/s", 1
		}
		return 1, "Mops/s", 1
	}
	return 1, "", 3
}

// bare writes v without a unit, in the unit ValueString chooses for ref
// (the median), so that min, max and outliers read in the median's unit.
func bare(m Metric, ref, v float64) string {
	scale, _, prec := display(m, ref)
	return fmt.Sprintf("%.*f", prec, v/scale)
}

// WriteTable writes the readable report: the run's description, the
// reference limits, every figure with its limit and ratio, and what was
// not measured.
func WriteTable(w io.Writer, run Run, figs []Figure) error {
	var b strings.Builder
	fmt.Fprintf(&b, "goshbench  %s  %s\n", run.Timestamp, run.GoVersion)
	fmt.Fprintf(&b, "cpu: %s (%d cores, %d logical CPUs)\n", run.CPU, run.Cores, run.Threads)
	fmt.Fprintf(&b, "command: %s\n", run.Command)
	for _, j := range run.Jobs {
		fmt.Fprintf(&b, "job %s, %d PEs: %.1f s, load average %s -> %s\n", j.Transport, j.PEs, j.Seconds, j.LoadStart, j.LoadEnd)
		for _, p := range j.Placement {
			over := ""
			if p.Oversubscribed {
				over = ", oversubscribed"
			}
			bound := "not bound"
			if p.BoundCPU >= 0 {
				bound = fmt.Sprintf("bound to CPU %d", p.BoundCPU)
			}
			fmt.Fprintf(&b, "  PE %d: pid %d, host %s, %s (allowed %s), ran on %d then %d, preempted %d times, slept %d times%s\n",
				p.PE, p.Pid, p.Host, bound, p.CPUsAllowed, p.CPUStart, p.CPUEnd, p.Preempted, p.VoluntarySw, over)
			if len(p.Routes) > 0 {
				fmt.Fprintf(&b, "        routes: %s\n", strings.Join(p.Routes, "; "))
			}
		}
	}
	if len(run.Limits) > 0 {
		b.WriteString("\nLimits measured in this run (median of repetitions, min-max)\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "limit\ttransport\tPEs\tsize\tmedian\tmin-max\toutliers\t")
		for _, l := range run.Limits {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s-%s\t%d\t\n", l.Name, l.Transport, l.PEs, SizeString(l.Size),
				ValueString(l.Metric, l.Value), bare(l.Metric, l.Value, l.Min), bare(l.Metric, l.Value, l.Max), l.Outliers)
		}
		tw.Flush()
	}
	if len(figs) > 0 {
		fmt.Fprintf(&b, "\nFigures (median of %d repetitions, min-max; limit measured alternately in the same job;\n", run.Reps)
		b.WriteString("ratio = value/limit for bandwidth and rate, limit/value for latency: 1 is at the limit, higher is better;\n")
		b.WriteString("an \"and\" line holds the figure above it to a further limit)\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "suite\ttransport\tPEs\tsize\tmetric\tmedian\tmin-max\tlimit\t\tratio\toutliers\t")
		for _, f := range figs {
			size := SizeString(f.Size)
			if f.Size == 0 {
				size = "-"
			}
			out := "-"
			if len(f.Outliers) > 0 {
				var vs []string
				for _, o := range f.Outliers {
					vs = append(vs, bare(f.Metric, f.Value, o))
				}
				out = strings.Join(vs, " ")
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s-%s\t%s\t%s\t%.3f\t%s\t\n", f.Suite, f.Transport, f.PEs, size, f.Metric,
				ValueString(f.Metric, f.Value), bare(f.Metric, f.Value, f.Min), bare(f.Metric, f.Value, f.Max),
				f.LimitName, ValueString(f.Metric, f.Limit), f.Ratio, out)
			// Further limits of the same figure, one line each under it.
			for _, e := range f.Extra {
				fmt.Fprintf(tw, "  and\t\t\t\t\t\t\t%s\t%s\t%.3f\t\t\n", e.LimitName, ValueString(e.Metric, e.Limit), e.Ratio)
			}
		}
		tw.Flush()
	}
	if len(run.Skipped) > 0 {
		b.WriteString("\nNot measured\n")
		for _, s := range run.Skipped {
			fmt.Fprintf(&b, "  %s: %s\n", s.What, s.Reason)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
