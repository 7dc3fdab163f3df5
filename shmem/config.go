package shmem

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/goshmem/goshmem/heap"
	"github.com/goshmem/goshmem/internal/errs"
)

// Config is a PE's configuration. Init and Run read it from the
// environment (docs/env.md lists every variable) and then apply the
// options, which win over the environment.
type Config struct {
	// HeapSize is the symmetric heap's size in bytes, per PE
	// (SHMEM_SYMMETRIC_SIZE). Default DefaultHeapSize.
	HeapSize uint64
	// Timeout bounds every wait on other PEs: barriers, WaitUntil, locks,
	// bootstrap (GOSHMEM_TIMEOUT). Default DefaultTimeout.
	Timeout time.Duration
	// Hosts gives Run's PEs pretend host names, one per PE: PEs with
	// different names do not map each other's heaps and talk over
	// loopback TCP through netmesh, as PEs on different machines do.
	Hosts []string
	// Debug enables extra checks, such as agreement of all PEs on every
	// collective allocation (SHMEM_DEBUG).
	Debug bool
	// Info makes PE 0 print the configuration at start (SHMEM_INFO).
	Info bool

	version bool // SHMEM_VERSION: PE 0 prints the version line at start
	// writerFence (GOSHMEM_WRITER_FENCE) keeps the store-load fence after
	// every put to a same-host PE even where sleepers fence for the
	// writers (PE.chooseFence).
	writerFence bool
}

// Option changes a Config.
type Option func(*Config)

// Defaults.
const (
	DefaultHeapSize = 128 << 20
	DefaultTimeout  = 120 * time.Second
)

// WithHeapSize sets the symmetric heap size in bytes.
func WithHeapSize(bytes uint64) Option { return func(c *Config) { c.HeapSize = bytes } }

// WithTimeout sets the bound on waits for other PEs.
func WithTimeout(d time.Duration) Option { return func(c *Config) { c.Timeout = d } }

// WithHosts gives Run's PEs pretend hosts (one name per PE).
func WithHosts(names []string) Option {
	return func(c *Config) { c.Hosts = append([]string(nil), names...) }
}

// WithDebug turns the SHMEM_DEBUG checks on or off.
func WithDebug(on bool) Option { return func(c *Config) { c.Debug = on } }

// envBool reads a boolean variable: unset is false; set, it is true
// for "1", "y", "yes", "true", "on" and the empty string (a variable set
// to nothing, as OpenSHMEM implementations take it), false for "0", "n",
// "no", "false", "off" (any case, spaces ignored), and anything else is
// an error that names the variable.
func envBool(name string) (bool, error) {
	v, ok := os.LookupEnv(name)
	if !ok {
		return false, nil
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "1", "y", "yes", "true", "on":
		return true, nil
	case "0", "n", "no", "false", "off":
		return false, nil
	}
	return false, fmt.Errorf("shmem: %s=%q: want 1, yes, true or on, or 0, no, false or off: %w", name, v, errs.Invalid)
}

// loadConfig builds the configuration from the environment and options.
// A malformed variable is an error naming it.
func loadConfig(opts []Option) (Config, error) {
	c := Config{HeapSize: DefaultHeapSize, Timeout: DefaultTimeout}
	if v := os.Getenv("SHMEM_SYMMETRIC_SIZE"); v != "" {
		n, err := heap.ParseSize(v)
		if err != nil {
			return c, fmt.Errorf("shmem: SHMEM_SYMMETRIC_SIZE: %w", err)
		}
		c.HeapSize = n
	}
	if d, ok, err := envDuration("GOSHMEM_TIMEOUT", minTimeout, maxTimeout); err != nil {
		return c, err
	} else if ok {
		c.Timeout = d
	}
	for _, b := range []struct {
		name string
		v    *bool
	}{{"SHMEM_DEBUG", &c.Debug}, {"SHMEM_INFO", &c.Info}, {"SHMEM_VERSION", &c.version}, {"GOSHMEM_WRITER_FENCE", &c.writerFence}} {
		on, err := envBool(b.name)
		if err != nil {
			return c, err
		}
		*b.v = on
	}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.HeapSize < 1<<20 {
		// A heap smaller than 1 MiB is always a mistake (a forgotten suffix).
		return c, fmt.Errorf("shmem: symmetric heap of %d bytes is below the 1 MiB minimum (SHMEM_SYMMETRIC_SIZE takes K, M, G suffixes): %w", c.HeapSize, errs.Invalid)
	}
	if c.HeapSize > 1<<43 {
		// Sleep-table entries hold offsets below 2^44 (heap/layout.go).
		return c, fmt.Errorf("shmem: symmetric heap of %d bytes is above the 8 TiB maximum: %w", c.HeapSize, errs.Invalid)
	}
	if c.Timeout <= 0 {
		return c, fmt.Errorf("shmem: timeout %v must be positive: %w", c.Timeout, errs.Invalid)
	}
	return c, nil
}

// The ranges of the duration variables (docs/env.md). A timeout below
// a millisecond fails every wait at once; the heartbeat's peer is lost
// after five silent intervals, which below 50 ms a scheduling or GC
// pause on a loaded machine can reach.
const (
	minTimeout   = time.Millisecond
	maxTimeout   = 1e9 * time.Second
	minHeartbeat = 50 * time.Millisecond
	maxHeartbeat = time.Hour
)

// envDuration reads the duration variable name (parseDuration's format)
// and checks lo <= d <= hi. ok is false when it is unset or empty. The
// error names the variable and the range, and wraps ErrInvalid.
func envDuration(name string, lo, hi time.Duration) (d time.Duration, ok bool, err error) {
	v := strings.TrimSpace(os.Getenv(name))
	if v == "" {
		return 0, false, nil
	}
	d, err = parseDuration(v)
	if err != nil || d < lo || d > hi {
		return 0, false, fmt.Errorf("shmem: %s=%q: want a duration from %v to %v, like 30s, or a number of seconds: %w",
			name, v, lo, hi, errs.Invalid)
	}
	return d, true, nil
}

func parseDuration(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if !(f > 0 && f <= 1e9) || time.Duration(f*float64(time.Second)) <= 0 {
			return 0, errs.Invalid // also NaN and below a nanosecond
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, errs.Invalid
	}
	return d, nil
}
