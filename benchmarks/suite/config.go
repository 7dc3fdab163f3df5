package suite

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// The environment goshbench gives its PE processes (besides the
// launcher's): the PE mode switch, the job's configuration and the
// directory the PEs write their results into.
const (
	EnvPE     = "GOSHBENCH_PE"     // "1": run as a PE of a goshbench job
	EnvConfig = "GOSHBENCH_CONFIG" // the job's Config, JSON
	EnvOut    = "GOSHBENCH_OUT"    // directory for results.json and pe-N.json
	// EnvCPUProfile, set by the user, makes PE 0 write a CPU profile of
	// its whole run to this file, and PE r > 0 to the file's name + "."
	// + r (go tool pprof BINARY FILE).
	EnvCPUProfile = "GOSHBENCH_CPUPROFILE"
)

// Config is one job's configuration, the same on every PE.
type Config struct {
	Transport string   `json:"transport"`
	Suites    []string `json:"suites"` // registry names, in order; each applies to the job's PE count
	Sizes     []int    `json:"sizes"`  // bytes, for sized suites
	// SizesGiven: Sizes was chosen on the command line (-sizes, or
	// -quick's), and applies to every sized suite; otherwise a suite with
	// DefaultSizes runs at those.
	SizesGiven bool `json:"sizes_given"`
	// Iters is the number of iterations per repetition; 0 calibrates it
	// so that a repetition lasts about RepTime.
	Iters int `json:"iters"`
	// Warmup is the number of untimed iterations before the first
	// repetition; 0 warms up for about RepTime/4.
	Warmup  int           `json:"warmup"`
	Reps    int           `json:"reps"`
	RepTime time.Duration `json:"rep_time"`
	Window  int           `json:"window"` // operations in flight per Quiet for bandwidth and rate
	Bind    string        `json:"bind"`   // BindCPU or BindNone
	// Timeout bounds the raw spin loops of the limits (shmem's own waits
	// have GOSHMEM_TIMEOUT).
	Timeout time.Duration `json:"timeout"`
}

// Defaults for a full run and for -quick.
const (
	DefaultReps    = 5
	DefaultRepTime = 20 * time.Millisecond
	DefaultWindow  = 64 // as OSU's osu_oshm_*_bw and _mr
	QuickReps      = 3
	QuickRepTime   = time.Millisecond
	maxAutoIters   = 1 << 24
)

// SizesFor is the sizes suite s runs at in this job.
func (c Config) SizesFor(s *Suite) []int {
	if !c.SizesGiven && s.DefaultSizes != nil {
		return s.DefaultSizes
	}
	return c.Sizes
}

// MaxSize is the largest size of the job, and at least 1 MiB (the
// reference copy-into-the-mapping limit uses 1 MiB).
func (c Config) MaxSize() int {
	m := 1 << 20
	for _, s := range c.Sizes {
		m = max(m, s)
	}
	for _, name := range c.Suites {
		if s := Lookup(name); s != nil && s.Sized {
			for _, size := range c.SizesFor(s) {
				m = max(m, size)
			}
		}
	}
	return m
}

// HeapBytes is the symmetric heap a job of npes PEs needs: the payload
// buffer, the rate slots and the small objects, plus, when a ring suite
// runs, one figure's lanes and baseline buffer (ringHeapBytes), rounded
// up to MiB.
func (c Config) HeapBytes(npes int) int {
	n := c.MaxSize() + npes*slotBytes + 1<<20
	for _, name := range c.Suites {
		if s := Lookup(name); s != nil && s.Group == "ring" {
			n += ringHeapBytes(c.SizesFor(s))
			break
		}
	}
	// A Comm's lanes at the full eager size, and the raw lane figure
	// comm-latency is held to.
	for _, name := range c.Suites {
		if s := Lookup(name); s != nil && s.Group == "comm" {
			n += commHeapBytes(npes) + ringHeapBytes(c.SizesFor(s))
			break
		}
	}
	// The collective suites' src and dst, allocated per figure: the
	// largest is alltoall's, npes blocks of the size each.
	coll := 0
	for _, name := range c.Suites {
		if s := Lookup(name); s != nil && s.Group == "collectives" {
			for _, size := range c.SizesFor(s) {
				coll = max(coll, 2*npes*max(size, 8)+2<<10)
			}
		}
	}
	n += coll
	return (n + 1<<20 - 1) &^ (1<<20 - 1)
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.Reps < 1:
		return fmt.Errorf("goshbench: %d repetitions: want at least 1", c.Reps)
	case c.Iters < 0 || c.Warmup < 0:
		return fmt.Errorf("goshbench: -iters %d, -warmup %d: want 0 (automatic) or more", c.Iters, c.Warmup)
	case c.RepTime <= 0 || c.Window < 1 || c.Timeout <= 0:
		return fmt.Errorf("goshbench: repetition time %v, window %d, timeout %v: want positive values", c.RepTime, c.Window, c.Timeout)
	case c.Bind != BindCPU && c.Bind != BindNone:
		return fmt.Errorf("goshbench: -bind %q: want %s or %s", c.Bind, BindCPU, BindNone)
	case c.Transport != TransportSHM && c.Transport != TransportTCP && c.Transport != TransportNetns:
		return fmt.Errorf("goshbench: transport %q: want %s, %s or %s", c.Transport, TransportSHM, TransportTCP, TransportNetns)
	}
	for _, s := range c.Sizes {
		if s < 1 || s > 1<<30 {
			return fmt.Errorf("goshbench: size %d: want 1 B to 1 GiB", s)
		}
	}
	for _, name := range c.Suites {
		if Lookup(name) == nil {
			return fmt.Errorf("goshbench: unknown suite %q", name)
		}
	}
	return nil
}

// Environ encodes the configuration for the PEs.
func (c Config) Environ() (string, error) {
	b, err := json.Marshal(c)
	return EnvConfig + "=" + string(b), err
}

func configFromEnv() (Config, error) {
	var c Config
	v := os.Getenv(EnvConfig)
	if v == "" {
		return c, fmt.Errorf("goshbench PE: %s is not set (PE mode is started by goshbench itself)", EnvConfig)
	}
	if err := json.Unmarshal([]byte(v), &c); err != nil {
		return c, fmt.Errorf("goshbench PE: %s: %w", EnvConfig, err)
	}
	return c, c.Validate()
}
