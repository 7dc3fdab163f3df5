package shmem

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"time"
	"unicode"

	"github.com/klauspost/cpuid/v2"
)

// Version is goshmem's version. The API follows OpenSHMEM 1.5 (with the
// 1.6 PEQuiet and scans).
const (
	Version          = "0.1.0"
	SpecVersionMajor = 1
	SpecVersionMinor = 5
	VendorString     = "goshmem"
)

// Route describes how this PE reaches one PE of the job.
type Route struct {
	PE   int
	Kind string // "self", "shm" (heap mapped here), "tcp" (a netmesh link) or "none" (no route yet)
	Host string
	Addr string // tcp: the peer's address
	// Thunderbolt: the route runs over a link-local (169.254/16) address
	// on a bridge or Thunderbolt interface: IP over Thunderbolt.
	Thunderbolt bool
}

// Info describes a PE's configuration, for SHMEM_INFO and for programs.
type Info struct {
	Version string
	// Launcher names the engine that started the job: "goshrun",
	// "openmpi", "hydra", "pmi" (another PMI-1 server), "slurm",
	// "slurm-pmi2", "run" (shmem.Run) or "none" (a lone PE).
	Launcher       string
	PE, NPEs       int
	Host           string
	Pid            int
	HeapSize       uint64 // bytes per PE (SHMEM_SYMMETRIC_SIZE)
	HeapUsed       uint64
	HeapFree       uint64
	LargestFree    uint64
	Timeout        time.Duration
	Debug          bool
	Routes         []Route
	CPU            string
	CacheLine      int // the allocator's alignment, agreed by all PEs
	Cores          int // physical cores
	Threads        int // logical CPUs
	GoVersion      string
	SameHostPEs    int
	Oversubscribed bool // more PEs on this host than the CPUs they may run on (docs/memory-model.md)
}

// Info reports this PE's configuration.
func (pe *PE) Info() Info {
	if pe == nil {
		return Info{Version: Version, PE: -1}
	}
	in := Info{
		Version: Version, Launcher: pe.launcher, PE: pe.rank, NPEs: pe.npes, Host: pe.host, Pid: os.Getpid(),
		HeapSize: pe.cfg.HeapSize, Timeout: pe.cfg.Timeout, Debug: pe.cfg.Debug,
		CPU: cpuid.CPU.BrandName, CacheLine: pe.cacheLine,
		Cores: cpuid.CPU.PhysicalCores, Threads: runtime.NumCPU(), GoVersion: runtime.Version(),
	}
	if in.Launcher == "" && pe.job != nil {
		in.Launcher = "run"
	}
	pe.allocMu.Lock()
	in.HeapUsed, in.HeapFree, in.LargestFree = pe.alloc.Stats()
	// Team blocks lie in space the world allocator counts free.
	tb := pe.teamBytesLocked()
	in.HeapUsed, in.HeapFree = in.HeapUsed+tb, in.HeapFree-tb
	in.LargestFree = min(in.LargestFree, in.HeapFree)
	pe.allocMu.Unlock()
	for r := range pe.peers {
		p := &pe.peers[r]
		rt := Route{PE: r, Host: p.host}
		switch {
		case r == pe.rank:
			rt.Kind = "self"
		case p.mem != nil:
			rt.Kind = "shm"
		case p.link != nil:
			rt.Kind, rt.Addr = "tcp", p.addr
			if h, _, err := net.SplitHostPort(p.addr); err == nil {
				rt.Thunderbolt = thunderboltBridge(net.ParseIP(h))
			}
		default:
			rt.Kind = "none"
		}
		if p.mem != nil {
			in.SameHostPEs++
		}
		in.Routes = append(in.Routes, rt)
	}
	in.Oversubscribed = pe.oversub
	return in
}

// String is a readable multi-line report, as SHMEM_INFO prints it.
func (in Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "goshmem %s (OpenSHMEM %d.%d API), %s\n", in.Version, SpecVersionMajor, SpecVersionMinor, in.GoVersion)
	fmt.Fprintf(&b, "  PE %d of %d on host %q (pid %d), launched by %s\n", in.PE, in.NPEs, in.Host, in.Pid, in.Launcher)
	fmt.Fprintf(&b, "  symmetric heap: %d bytes per PE (%d used, %d free, largest free block %d)\n",
		in.HeapSize, in.HeapUsed, in.HeapFree, in.LargestFree)
	fmt.Fprintf(&b, "  timeout %v, debug checks %v\n", in.Timeout, in.Debug)
	fmt.Fprintf(&b, "  CPU: %s; %d cores, %d logical CPUs; cache line %d bytes\n", in.CPU, in.Cores, in.Threads, in.CacheLine)
	if in.Oversubscribed {
		fmt.Fprintf(&b, "  %d PEs on this host outnumber the CPUs they may run on: waits yield and sleep\n", in.SameHostPEs)
	}
	for _, r := range in.Routes {
		fmt.Fprintf(&b, "  route to PE %d: %s (host %q)", r.PE, r.Kind, r.Host)
		if r.Addr != "" {
			fmt.Fprintf(&b, " %s", r.Addr)
		}
		if r.Thunderbolt {
			b.WriteString(" (IP over Thunderbolt)")
		}
		b.WriteByte('\n')
	}
	return strings.TrimRight(b.String(), "\n")
}

// hostIdentity names this machine for the same-host decision:
// GOSHMEM_HOST when set, else the host name and the kernel's boot id
// (two machines may share a host name; namespaces on one machine share
// the boot id but not, in a UTS namespace, the host name). A set
// GOSHMEM_HOST must be at most maxHostLen bytes of printable text.
func hostIdentity() (string, error) {
	if h := os.Getenv("GOSHMEM_HOST"); h != "" {
		if len(h) > maxHostLen || strings.IndexFunc(h, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			return "", fmt.Errorf("shmem: GOSHMEM_HOST=%.40q: want at most %d bytes of printable text: %w", h, maxHostLen, ErrInvalid)
		}
		return h, nil
	}
	name, err := os.Hostname()
	if err != nil {
		name = "unknown"
	}
	if id, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		s := strings.TrimSpace(string(id))
		if len(s) > 8 {
			s = s[:8]
		}
		return name + "/" + s, nil
	}
	return name, nil
}

// maxHostLen bounds GOSHMEM_HOST: it travels in every PE's endpoint.
const maxHostLen = 255
