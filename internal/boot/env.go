package boot

import (
	"encoding/hex"
	"fmt"
	"math"
	"strconv"

	"github.com/goshmem/goshmem/internal/errs"
)

// The environment a launcher gives every PE. These names are the contract
// between goshrun (package launch) and the runtime (package shmem); they
// live here so that shmem can read them without importing launch.
const (
	// EnvRank is the PE's rank, a decimal integer in [0, size).
	EnvRank = "GOSHMEM_RANK"
	// EnvSize is the number of PEs in the job, a decimal integer >= 1.
	EnvSize = "GOSHMEM_SIZE"
	// EnvJobID names the job; it is checked in the boot handshake.
	EnvJobID = "GOSHMEM_JOBID"
	// EnvKey is the job key: 64 lowercase hex digits (32 bytes). It never
	// goes on the wire; both handshakes prove knowledge of it with HMACs.
	EnvKey = "GOSHMEM_KEY"
	// EnvRendezvous is the host:port of the boot server.
	EnvRendezvous = "GOSHMEM_RENDEZVOUS"
	// EnvLauncher names the launcher that started the PE ("goshrun").
	EnvLauncher = "GOSHMEM_LAUNCHER"
	// EnvHost is the PE's host identity. Optional: when unset, the runtime
	// uses the machine's own host name. PEs with equal host identities
	// share memory directly.
	EnvHost = "GOSHMEM_HOST"
	// EnvMachinePEs is the number of PEs the launcher started on this
	// machine, whatever their host identities or network namespaces:
	// they share its CPUs. Optional (a decimal integer in [1, size]);
	// the runtime uses it to tell whether the machine is oversubscribed.
	EnvMachinePEs = "GOSHMEM_MACHINE_PES"
)

// UnixPrefix marks a rendezvous address that is a Unix socket: "unix:"
// then the socket name, "@name" for an abstract one (Linux). Dial
// accepts it; a Server serves whatever listener it is given.
const UnixPrefix = "unix:"

// LauncherGoshrun is the value of EnvLauncher under goshrun.
const LauncherGoshrun = "goshrun"

// KeySize is the length of a job key in bytes.
const KeySize = 32

// Env is the parsed launcher environment of one PE.
type Env struct {
	Rank       int
	Size       int
	JobID      string
	Key        []byte // KeySize bytes
	Rendezvous string
	Launcher   string // may be empty
	Host       string // may be empty
	MachinePEs int    // PEs the launcher started on this machine; 0 when unknown
}

// ParseEnv reads the launcher environment through lookup (os.LookupEnv in
// a real PE). It reports ok=false with a nil error when EnvRank is not
// set at all (the process was not started by a goshmem launcher), and an
// error wrapping errs.Invalid when a variable is missing or malformed.
func ParseEnv(lookup func(string) (string, bool)) (env Env, ok bool, err error) {
	rs, set := lookup(EnvRank)
	if !set {
		return Env{}, false, nil
	}
	get := func(name string) (string, error) {
		v, set := lookup(name)
		if !set || v == "" {
			return "", fmt.Errorf("boot: %s is set but %s is missing: %w", EnvRank, name, errs.Invalid)
		}
		return v, nil
	}
	num := func(name, s string) (int, error) {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil || n < 0 || n > math.MaxInt32 {
			return 0, fmt.Errorf("boot: %s=%q is not a non-negative integer: %w", name, s, errs.Invalid)
		}
		return int(n), nil
	}
	if env.Rank, err = num(EnvRank, rs); err != nil {
		return Env{}, true, err
	}
	ss, err := get(EnvSize)
	if err != nil {
		return Env{}, true, err
	}
	if env.Size, err = num(EnvSize, ss); err != nil {
		return Env{}, true, err
	}
	if env.Size < 1 || env.Rank >= env.Size {
		return Env{}, true, fmt.Errorf("boot: rank %d outside a job of %d PEs: %w", env.Rank, env.Size, errs.Invalid)
	}
	if env.JobID, err = get(EnvJobID); err != nil {
		return Env{}, true, err
	}
	ks, err := get(EnvKey)
	if err != nil {
		return Env{}, true, err
	}
	env.Key, err = hex.DecodeString(ks)
	if err != nil || len(env.Key) != KeySize {
		// The value is secret: do not echo it.
		return Env{}, true, fmt.Errorf("boot: %s is not %d hex-encoded bytes: %w", EnvKey, KeySize, errs.Invalid)
	}
	if env.Rendezvous, err = get(EnvRendezvous); err != nil {
		return Env{}, true, err
	}
	env.Launcher, _ = lookup(EnvLauncher)
	env.Host, _ = lookup(EnvHost)
	if v, set := lookup(EnvMachinePEs); set && v != "" {
		n, err := num(EnvMachinePEs, v)
		if err == nil && (n < 1 || n > env.Size) {
			err = fmt.Errorf("boot: %s=%d in a job of %d PEs: %w", EnvMachinePEs, n, env.Size, errs.Invalid)
		}
		if err != nil {
			return Env{}, true, err
		}
		env.MachinePEs = n
	}
	return env, true, nil
}
