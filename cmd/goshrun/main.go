// Command goshrun starts a goshmem job: N processing elements (PEs) on
// this machine, each a process running the same program.
//
// Usage:
//
//	goshrun -n N [--tag-output] [--timeout DURATION] [--host-list a,b,...]
//	        [--env K=V]... [--grace DURATION] PROGRAM [args...]
//	goshrun --hosts h1:2,h2:2 [--rsh CMD] [flags] PROGRAM [args...]
//
// PROGRAM is a binary (a path, or a command name looked up in PATH) or a
// Go package — a directory such as ./examples/pi, a pattern, a .go file
// or an import path — which goshrun first builds with `go build` into a
// temporary directory and removes afterwards. Flags are read up to
// PROGRAM; everything after it is PROGRAM's own arguments. Flags take one
// or two dashes.
//
//	-n, -np N           number of PEs (required)
//	--tag-output        prefix each line of output with "[rank] "
//	--timeout D         kill the job after D (e.g. 30s, 5m); exit 124
//	--host-list a,b     per-rank host identity (GOSHMEM_HOST); N names,
//	                    or a divisor of N names spread in blocks
//	                    (a,b with -n 4: a a b b)
//	--env K=V           add K=V to every PE's environment (repeatable)
//	--grace D           time between SIGTERM and SIGKILL (default 2s; 0s:
//	                    SIGKILL right after SIGTERM)
//	--rendezvous ADDR   where the boot server listens (default 127.0.0.1:0;
//	                    with --hosts, this machine's address and port 0);
//	                    PEs on other hosts need an address they can reach,
//	                    and it must be a specific address, not a wildcard
//	--hosts h1:2,h2:2   run across hosts: COUNT PEs on each (-n may be left
//	                    out); goshrun runs the rendezvous and starts, through
//	                    the remote shell, a goshrun on each host that starts
//	                    that host's PEs
//	--rsh CMD           with --hosts, the remote shell (default ssh): CMD
//	                    HOST goshrun ... is run for each host
//
// # Environment contract
//
// Every PE inherits goshrun's environment (plus --env entries) and gets:
//
//	GOSHMEM_RANK        the PE's rank, 0 .. N-1
//	GOSHMEM_SIZE        N
//	GOSHMEM_JOBID       the job's id
//	GOSHMEM_KEY         the job key, 64 hex digits (32 bytes)
//	GOSHMEM_RENDEZVOUS  host:port of the job's boot server (--rendezvous)
//	GOSHMEM_LAUNCHER    "goshrun"
//	GOSHMEM_HOST        the PE's host identity (only with --host-list)
//
// shmem.Init reads these; package boot defines the names.
//
// # Exit status and signals
//
// goshrun exits 0 when every PE exits 0. When a PE exits non-zero, is
// killed by a signal, or drops its boot connection without saying
// goodbye, goshrun prints one line naming it, sends SIGTERM to every
// other PE's process group, SIGKILL after the grace, and exits with that
// PE's status (128 + the signal number if it was killed). A PE's
// GlobalExit(code) ends the job the same way with code. On --timeout the
// exit status is 124. SIGINT, SIGTERM and SIGHUP sent to goshrun are
// forwarded to every PE; PEs still running after the grace are killed,
// and goshrun exits 128 + the signal number. A second signal kills every
// PE at once. PEs also die if goshrun itself is killed (they have a
// parent-death signal). Exit codes outside 0..255 become 1. Usage errors
// exit 2; a job that cannot start exits 1.
//
// PEs get no standard input. The job key is in the PEs' environment, so
// other processes of the same user can read it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/goshmem/goshmem/internal/launch"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// envFlag collects repeated --env K=V flags.
type envFlag []string

func (e *envFlag) String() string { return strings.Join(*e, " ") }

func (e *envFlag) Set(kv string) error {
	if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
		return errors.New("want K=V")
	}
	*e = append(*e, kv)
	return nil
}

// run is goshrun with its arguments and output streams; it returns the
// exit status.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("goshrun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		n        int
		tag      bool
		timeout  time.Duration
		hostList string
		grace    time.Duration
		env      envFlag
		rdv      string
		hostsArg string
		rsh      string
		agentJob string
		first    int
		size     int
	)
	fs.IntVar(&n, "n", 0, "number of PEs")
	fs.IntVar(&n, "np", 0, "same as -n")
	fs.BoolVar(&tag, "tag-output", false, `prefix each output line with "[rank] "`)
	fs.DurationVar(&timeout, "timeout", 0, "kill the job after this long (exit 124); 0 for no limit")
	fs.StringVar(&hostList, "host-list", "", "comma-separated host identities (GOSHMEM_HOST), N or a divisor of N")
	fs.DurationVar(&grace, "grace", launch.DefaultGrace, "time between SIGTERM and SIGKILL")
	fs.Var(&env, "env", "K=V added to every PE's environment (repeatable)")
	fs.StringVar(&rdv, "rendezvous", "", "address the launcher's rendezvous listens on (default 127.0.0.1:0; with --hosts this machine's address); PEs on other hosts must reach it")
	fs.StringVar(&hostsArg, "hosts", "", "run across hosts: NAME:COUNT,... (the counts add up to -n, which may then be left out)")
	fs.StringVar(&rsh, "rsh", "ssh", "with --hosts: the remote shell command that runs goshrun on each host (the host name is appended)")
	fs.StringVar(&agentJob, launch.AgentFlag, "", "internal: run one host's PEs of a job across hosts (the key comes on standard input)")
	fs.IntVar(&first, launch.AgentFirstArg, 0, "internal: with --"+launch.AgentFlag+", this host's first rank")
	fs.IntVar(&size, launch.AgentSizeArg, 0, "internal: with --"+launch.AgentFlag+", the job's size")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: goshrun -n N [flags] PROGRAM [args...]\n\nPROGRAM is a binary or a Go package (built first).\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "goshrun: "+format+"\n", a...)
		fs.Usage()
		return 2
	}
	if fs.NArg() == 0 {
		return usage("no PROGRAM")
	}
	var remote []launch.Host
	if hostsArg != "" {
		hs, err := launch.ParseHosts(hostsArg)
		if err != nil {
			return usage("--hosts: %v", err)
		}
		total := 0
		for _, h := range hs {
			total += h.N
		}
		if n == 0 {
			n = total
		}
		if n != total {
			return usage("-n %d, but --hosts adds up to %d PEs", n, total)
		}
		if hostList != "" {
			return usage("--hosts and --host-list do not go together")
		}
		remote = hs
	}
	if n < 1 {
		return usage("-n must be at least 1")
	}
	if timeout < 0 || grace < 0 {
		return usage("durations must not be negative")
	}
	if grace == 0 {
		grace = launch.NoGrace // --grace 0s: SIGKILL at once, not the default
	}
	hosts, err := spreadHosts(hostList, n)
	if err != nil {
		return usage("--host-list: %v", err)
	}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	var join *launch.Join
	if agentJob != "" {
		key, lost, err := launch.ReadAgentKey(os.Stdin)
		if err != nil {
			fmt.Fprintf(stderr, "goshrun: %v\n", err)
			return 1
		}
		join = &launch.Join{First: first, Size: size, JobID: agentJob, Key: key, Rendezvous: rdv, Lost: lost}
	}
	job := &launch.Job{
		N:         n,
		Program:   fs.Arg(0),
		Args:      fs.Args()[1:],
		TagOutput: tag,
		Timeout:   timeout,
		Env:       env,
		Hosts:     hosts,
		Stdout:    stdout,
		Stderr:    stderr,
		Signals:   sigs,
		Grace:     grace,
		Listen:    rdv,
		Remote:    remote,
		Rsh:       strings.Fields(rsh),
		Join:      join,
	}
	code, err := job.Run(context.Background())
	if err != nil {
		fmt.Fprintf(stderr, "goshrun: %v\n", err)
	}
	if code < 0 || code > 255 {
		code = 1 // the kernel keeps 8 bits; a failure must not read as 0
	}
	return code
}

// spreadHosts turns --host-list into one host per rank: n names as
// given, or k names (k divides n) in blocks of n/k ranks.
func spreadHosts(list string, n int) ([]string, error) {
	if list == "" {
		return nil, nil
	}
	names := strings.Split(list, ",")
	for _, h := range names {
		if h == "" {
			return nil, fmt.Errorf("empty host name in %q", list)
		}
	}
	if n%len(names) != 0 {
		return nil, fmt.Errorf("%d hosts do not divide %d PEs", len(names), n)
	}
	per := n / len(names)
	hosts := make([]string, 0, n)
	for _, h := range names {
		for range per {
			hosts = append(hosts, h)
		}
	}
	return hosts, nil
}
