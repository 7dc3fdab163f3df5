package report

import (
	"encoding/json"
	"fmt"
	"os"
)

// Measurement is what a job's PE 0 hands back to goshbench for one
// figure: the raw repetitions of the figure and of its limit, measured
// alternately (figure, limit, figure, limit, ...) so that a burst of
// load on a shared machine hits both.
type Measurement struct {
	Suite     string    `json:"suite"`
	Transport string    `json:"transport"`
	PEs       int       `json:"pes"`
	Size      int       `json:"size"`
	Metric    Metric    `json:"metric"`
	Samples   []float64 `json:"samples"` // one per repetition, in Metric.Unit()
	Iters     int       `json:"iters"`   // iterations per repetition
	// The limit the figure is held to; empty for a measurement that is a
	// limit itself (the run's reference limits).
	LimitName    string    `json:"limit_name,omitempty"`
	LimitSamples []float64 `json:"limit_samples,omitempty"`
	LimitIters   int       `json:"limit_iters,omitempty"`
	// Extra are further limits the figure is held to, measured in
	// alternation with it and its limit like the limit itself (a ring
	// figure's machine limit, beside its put+signal baseline).
	Extra []ExtraMeasurement `json:"extra,omitempty"`
}

// ExtraMeasurement is the raw repetitions of one further limit of a
// figure.
type ExtraMeasurement struct {
	Name    string    `json:"name"`
	Samples []float64 `json:"samples"`
	Iters   int       `json:"iters"`
}

// JobResult is everything one job hands back: written by PE 0 as
// results.json in the job's directory.
type JobResult struct {
	Transport string        `json:"transport"`
	PEs       int           `json:"pes"`
	CPU       string        `json:"cpu"`     // cpuid brand string
	Cores     int           `json:"cores"`   // physical cores
	Threads   int           `json:"threads"` // logical CPUs
	GoVersion string        `json:"go_version"`
	Figures   []Measurement `json:"figures"`
	Limits    []Measurement `json:"limits"`
	Skipped   []Skip        `json:"skipped"` // what the job did not measure (same-host limits in a tcp job)
}

// Placement is where one PE ran, as the PE saw it (written by every PE
// as pe-N.json).
type Placement struct {
	PE             int    `json:"pe"`
	Pid            int    `json:"pid"`
	Host           string `json:"host"`
	BoundCPU       int    `json:"bound_cpu"`    // the CPU goshbench bound the PE to (-bind cpu), or -1
	CPUsAllowed    string `json:"cpus_allowed"` // the affinity list at the end, as in /proc/self/status
	CPUStart       int    `json:"cpu_start"`    // the CPU it ran on at start and at the end
	CPUEnd         int    `json:"cpu_end"`
	Preempted      int64  `json:"preempted"`      // involuntary context switches during the job
	VoluntarySw    int64  `json:"voluntary_sw"`   // voluntary context switches (sleeps in waits)
	Oversubscribed bool   `json:"oversubscribed"` // more PEs on the host than logical CPUs
	// Routes: how this PE reached each other PE ("PE 1: shm", "PE 1: tcp 127.0.0.1:40123").
	Routes []string `json:"routes"`
}

// Job describes one job of a run.
type Job struct {
	Transport string      `json:"transport"`
	PEs       int         `json:"pes"`
	Seconds   float64     `json:"seconds"`
	LoadStart string      `json:"loadavg_start"` // /proc/loadavg before and after
	LoadEnd   string      `json:"loadavg_end"`
	Placement []Placement `json:"placement"`
}

// Skip is a figure or transport that was asked for but not measured,
// with the reason.
type Skip struct {
	What   string `json:"what"`
	Reason string `json:"reason"`
}

// Run describes a whole goshbench run.
type Run struct {
	Command    string        `json:"command"`
	Timestamp  string        `json:"timestamp"` // RFC 3339, UTC, at the start
	GoVersion  string        `json:"go_version"`
	CPU        string        `json:"cpu"`
	Cores      int           `json:"cores"`
	Threads    int           `json:"threads"`
	Transports []string      `json:"transports"`
	Reps       int           `json:"reps"`
	Jobs       []Job         `json:"jobs"`
	Limits     []LimitFigure `json:"limits"`
	Skipped    []Skip        `json:"skipped"`
	// ExtraLimits holds the figures that are held to more than one
	// limit, once per further limit: records of the same schema as
	// "records" (same suite, transport, pes, size, metric, value, min and
	// max as the figure's record), with that limit and the ratio to it.
	// The ring figures are held to a plain put+signal in their records
	// and to the machine's limit here.
	ExtraLimits []Record `json:"extra_limits"`
}

// LimitFigure is one of the run's reference limits (copy() bandwidth,
// cache-line round trip, TCP round trip and stream), summarised.
type LimitFigure struct {
	Name      string  `json:"name"`
	Transport string  `json:"transport"` // the job it was measured in
	PEs       int     `json:"pes"`
	Size      int     `json:"size"`
	Metric    Metric  `json:"metric"`
	Value     float64 `json:"value"`
	Unit      string  `json:"unit"`
	Min       float64 `json:"min"`
	Max       float64 `json:"max"`
	Outliers  int     `json:"outliers"`
}

// Figure is a Record with the repetitions behind it, for the table, the
// benchmark lines and the plots.
type Figure struct {
	Record
	Samples      []float64
	LimitSamples []float64
	Iters        int
	Outliers     []float64 // repetitions far from the median (kept in the median, min and max)
	Extra        []Record  // the figure held to its further limits (Run.ExtraLimits)
}

// File is the -json output: the run's description and one record per
// figure.
type File struct {
	Run     Run      `json:"run"`
	Records []Record `json:"records"`
}

// WriteJSON writes the -json file.
func WriteJSON(path string, run Run, figs []Figure) error {
	f := File{Run: run, Records: make([]Record, 0, len(figs))}
	f.Run.ExtraLimits = []Record{}
	for _, g := range figs {
		f.Records = append(f.Records, g.Record)
		f.Run.ExtraLimits = append(f.Run.ExtraLimits, g.Extra...)
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
