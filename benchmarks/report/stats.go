package report

import (
	"fmt"
	"math"
	"slices"
)

// Stats summarises the repetitions of one measurement.
type Stats struct {
	Median, Min, Max float64
	// Outliers are the repetitions more than outlierMADs scaled median
	// absolute deviations (and more than outlierFloor of the median)
	// away from the median. They are reported, never dropped: the median
	// already resists them, and min and max include them.
	Outliers []float64
}

const (
	outlierMADs  = 3.5
	outlierFloor = 0.05
)

// Summarize computes the median (the mean of the middle two for an even
// count), min, max and outliers of xs. It panics on an empty slice: a
// measurement always has at least one repetition.
func Summarize(xs []float64) Stats {
	if len(xs) == 0 {
		panic("report: Summarize of no repetitions")
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	st := Stats{Median: median(s), Min: s[0], Max: s[len(s)-1]}
	dev := make([]float64, len(s))
	for i, x := range s {
		dev[i] = math.Abs(x - st.Median)
	}
	slices.Sort(dev)
	mad := 1.4826 * median(dev) // scaled: estimates the standard deviation of normal noise
	for _, x := range xs {
		d := math.Abs(x - st.Median)
		if d > outlierMADs*mad && d > outlierFloor*st.Median {
			st.Outliers = append(st.Outliers, x)
		}
	}
	return st
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// Summarise turns a job's measurement of a figure into a Figure.
func Summarise(m Measurement) (Figure, error) {
	if len(m.Samples) == 0 || len(m.LimitSamples) == 0 || m.LimitName == "" {
		return Figure{}, fmt.Errorf("report: %s/%s/%d B: a figure needs repetitions and a limit", m.Suite, m.Metric, m.Size)
	}
	st, lim := Summarize(m.Samples), Summarize(m.LimitSamples)
	r := Record{
		Suite: m.Suite, Transport: m.Transport, PEs: m.PEs, Size: m.Size, Metric: m.Metric,
		Value: st.Median, Unit: m.Metric.Unit(), LimitName: m.LimitName, Limit: lim.Median,
		Ratio: m.Metric.Ratio(st.Median, lim.Median), Min: st.Min, Max: st.Max,
	}
	if err := r.Validate(); err != nil {
		return Figure{}, err
	}
	f := Figure{Record: r, Samples: m.Samples, LimitSamples: m.LimitSamples, Iters: m.Iters, Outliers: st.Outliers}
	for _, x := range m.Extra {
		if len(x.Samples) == 0 || x.Name == "" {
			return Figure{}, fmt.Errorf("report: %s/%s/%d B: further limit %q has no repetitions", m.Suite, m.Metric, m.Size, x.Name)
		}
		e := r
		e.LimitName, e.Limit = x.Name, Summarize(x.Samples).Median
		e.Ratio = m.Metric.Ratio(e.Value, e.Limit)
		if err := e.Validate(); err != nil {
			return Figure{}, err
		}
		f.Extra = append(f.Extra, e)
	}
	return f, nil
}

// SummariseLimit turns a reference-limit measurement into a LimitFigure.
func SummariseLimit(m Measurement) LimitFigure {
	st := Summarize(m.Samples)
	return LimitFigure{Name: m.Suite, Transport: m.Transport, PEs: m.PEs, Size: m.Size, Metric: m.Metric,
		Value: st.Median, Unit: m.Metric.Unit(), Min: st.Min, Max: st.Max, Outliers: len(st.Outliers)}
}
