package report

import (
	"errors"
	"fmt"
	"math"
)

// Metric is what a figure measures.
type Metric string

// The metrics, each with one unit.
const (
	Latency   Metric = "latency"   // ns per operation (or round trip); lower is better
	Bandwidth Metric = "bandwidth" // GB/s (10^9 bytes per second); higher is better
	Rate      Metric = "rate"      // Mops/s (10^6 operations per second); higher is better
)

// Unit is the metric's unit as written in records.
func (m Metric) Unit() string {
	switch m {
	case Latency:
		return "ns"
	case Bandwidth:
		return "GB/s"
	case Rate:
		return "Mops/s"
	}
	return ""
}

// Valid reports whether m is one of the three metrics.
func (m Metric) Valid() bool { return m.Unit() != "" }

// Ratio is how close value comes to limit, oriented so that higher is
// always better and 1 means "at the limit": value/limit for bandwidth
// and rate, limit/value for latency.
func (m Metric) Ratio(value, limit float64) float64 {
	if m == Latency {
		return limit / value
	}
	return value / limit
}

// Record is one figure of a run: one line of the table, one element of
// the -json file's "records". The field set and names are fixed (CI
// checks them); value, min and max are in unit; limit is in unit too.
type Record struct {
	Suite     string  `json:"suite"`
	Transport string  `json:"transport"`
	PEs       int     `json:"pes"`
	Size      int     `json:"size"` // bytes per operation; 0 when the suite has no size (barrier)
	Metric    Metric  `json:"metric"`
	Value     float64 `json:"value"` // median of the repetitions
	Unit      string  `json:"unit"`
	LimitName string  `json:"limit_name"`
	Limit     float64 `json:"limit"` // median of the limit's repetitions, measured in the same job
	Ratio     float64 `json:"ratio"`
	Min       float64 `json:"min"` // lowest repetition
	Max       float64 `json:"max"` // highest repetition
}

// Validate checks the record against the schema: known metric with its
// unit, names present, positive finite numbers, min <= value <= max, and
// ratio equal to value/limit (bandwidth, rate) or limit/value (latency).
func (r Record) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if r.Suite == "" || r.Transport == "" || r.LimitName == "" {
		bad("suite %q, transport %q and limit_name %q must all be set", r.Suite, r.Transport, r.LimitName)
	}
	if !r.Metric.Valid() {
		bad("metric %q is not latency, bandwidth or rate", r.Metric)
	} else if r.Unit != r.Metric.Unit() {
		bad("unit %q does not go with metric %s (want %s)", r.Unit, r.Metric, r.Metric.Unit())
	}
	if r.PEs < 1 || r.Size < 0 {
		bad("pes %d, size %d", r.PEs, r.Size)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"value", r.Value}, {"limit", r.Limit}, {"ratio", r.Ratio}, {"min", r.Min}, {"max", r.Max}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v <= 0 {
			bad("%s %v is not a positive finite number", f.name, f.v)
		}
	}
	if !(r.Min <= r.Value && r.Value <= r.Max) {
		bad("min %v <= value %v <= max %v does not hold", r.Min, r.Value, r.Max)
	}
	if r.Metric.Valid() && r.Value > 0 && r.Limit > 0 {
		if want := r.Metric.Ratio(r.Value, r.Limit); math.Abs(r.Ratio-want) > 1e-9*want {
			bad("ratio %v, want %v for %s", r.Ratio, want, r.Metric)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("record %s/%s/%d PEs/%d B/%s: %w", r.Suite, r.Transport, r.PEs, r.Size, r.Metric, err)
	}
	return nil
}

// Key identifies a figure within a run.
func (r Record) Key() string {
	return fmt.Sprintf("%s|%s|%d|%d|%s", r.Suite, r.Transport, r.PEs, r.Size, r.Metric)
}
