package shmem

import (
	"context"
	"fmt"
	"io"
	"math/bits"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goshmem/goshmem/heap"
	"github.com/goshmem/goshmem/netmesh"
)

// The remote path: PEs on other hosts are reached through a netmesh
// mesh, one authenticated TCP connection per pair of PEs.

// Bounds on the lines the mesh's log prints (refused strangers, lost
// links): a burst of logBurst, then one per logEvery; what is dropped
// is counted in the next line printed.
const (
	logBurst = 5
	logEvery = time.Second
)

// logLimiter rate-limits a PE's mesh log: a flood of strangers'
// connections must not flood stderr.
type logLimiter struct {
	mu         sync.Mutex
	w          io.Writer
	rank       int
	now        func() time.Time
	tokens     int
	last       time.Time
	suppressed int
}

func newLogLimiter(w io.Writer, rank int, now func() time.Time) *logLimiter {
	return &logLimiter{w: w, rank: rank, now: now, tokens: logBurst, last: now()}
}

func (l *logLimiter) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.now()
	if earned := int(t.Sub(l.last) / logEvery); earned > 0 {
		l.tokens = min(logBurst, l.tokens+earned)
		l.last = l.last.Add(time.Duration(earned) * logEvery)
	}
	if l.tokens == 0 {
		l.suppressed++
		return
	}
	l.tokens--
	msg := fmt.Sprintf(format, args...)
	if l.suppressed > 0 {
		msg += fmt.Sprintf(" (%d similar lines suppressed)", l.suppressed)
		l.suppressed = 0
	}
	fmt.Fprintf(l.w, "goshmem: PE %d: %s\n", l.rank, msg)
}

// listenAddr chooses the address this PE's mesh listens on:
// GOSHMEM_ADDR (an address, or a CIDR that one of this host's addresses
// falls in), else GOSHMEM_IFACE (the first address of that interface,
// IPv4 first), else the local address this host uses to reach the
// rendezvous (which is loopback when the whole job runs on one machine).
func listenAddr(rendezvous string) (string, error) {
	if v := strings.TrimSpace(os.Getenv("GOSHMEM_ADDR")); v != "" {
		if ip := net.ParseIP(v); ip != nil {
			return net.JoinHostPort(ip.String(), "0"), nil
		}
		_, cidr, err := net.ParseCIDR(v)
		if err != nil {
			return "", fmt.Errorf("shmem: GOSHMEM_ADDR=%q is neither an address nor a CIDR: %w", v, ErrInvalid)
		}
		addrs, err := net.InterfaceAddrs()
		if err != nil {
			return "", fmt.Errorf("shmem: GOSHMEM_ADDR: listing addresses: %w", err)
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && cidr.Contains(ipn.IP) {
				return net.JoinHostPort(ipn.IP.String(), "0"), nil
			}
		}
		return "", fmt.Errorf("shmem: GOSHMEM_ADDR=%q: no address of this host is in it: %w", v, ErrInvalid)
	}
	if name := strings.TrimSpace(os.Getenv("GOSHMEM_IFACE")); name != "" {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			return "", fmt.Errorf("shmem: GOSHMEM_IFACE=%q: %v: %w", name, err, ErrInvalid)
		}
		addrs, err := ifi.Addrs()
		if err != nil || len(addrs) == 0 {
			return "", fmt.Errorf("shmem: GOSHMEM_IFACE=%q has no address: %w", name, ErrInvalid)
		}
		best := ""
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			if ipn.IP.To4() != nil {
				return net.JoinHostPort(ipn.IP.String(), "0"), nil
			}
			if best == "" {
				best = ipn.IP.String()
				if ipn.IP.IsLinkLocalUnicast() {
					best += "%" + name
				}
			}
		}
		if best == "" {
			return "", fmt.Errorf("shmem: GOSHMEM_IFACE=%q has no IP address: %w", name, ErrInvalid)
		}
		return net.JoinHostPort(best, "0"), nil
	}
	// A UDP "connection" sends nothing; it only asks the kernel which
	// local address routes to the rendezvous.
	c, err := net.Dial("udp", rendezvous)
	if err != nil {
		return "127.0.0.1:0", nil
	}
	defer c.Close()
	ip := c.LocalAddr().(*net.UDPAddr).IP
	return net.JoinHostPort(ip.String(), "0"), nil
}

// spinEnv reads GOSHMEM_BUSYPOLL, whether waits on the TCP links poll
// their sockets before they sleep: unset, empty or "auto" lets netmesh
// decide (it polls unless this machine's PEs outnumber its CPUs, and
// pauses while polling does not pay); 1/on/true/yes polls even then;
// 0/off/false/no never polls.
func spinEnv() (netmesh.SpinMode, error) {
	v := strings.ToLower(strings.TrimSpace(os.Getenv("GOSHMEM_BUSYPOLL")))
	switch v {
	case "", "auto":
		return netmesh.SpinAuto, nil
	case "1", "on", "true", "yes":
		return netmesh.SpinOn, nil
	case "0", "off", "false", "no":
		return netmesh.SpinOff, nil
	}
	return 0, fmt.Errorf("shmem: GOSHMEM_BUSYPOLL=%q: want auto, 1 (on) or 0 (off): %w", v, ErrInvalid)
}

// meshEnv reads the netmesh tuning variables: GOSHMEM_STREAMS
// (connections per pair for striping large transfers), GOSHMEM_SOCKBUF
// (socket buffer bytes, with K/M suffixes) and GOSHMEM_HEARTBEAT (idle
// interval between heartbeats; a peer silent for five is lost).
func meshEnv() (streams, sockbuf int, heartbeat time.Duration, err error) {
	if v := strings.TrimSpace(os.Getenv("GOSHMEM_STREAMS")); v != "" {
		n, perr := strconv.Atoi(v)
		if perr != nil || n < 1 || n > 16 {
			return 0, 0, 0, fmt.Errorf("shmem: GOSHMEM_STREAMS=%q: want 1..16: %w", v, ErrInvalid)
		}
		streams = n
	}
	if v := strings.TrimSpace(os.Getenv("GOSHMEM_SOCKBUF")); v != "" {
		n, perr := heap.ParseSize(v)
		if perr != nil || n < 4096 || n > 1<<30 {
			return 0, 0, 0, fmt.Errorf("shmem: GOSHMEM_SOCKBUF=%q: want 4K..1G: %w", v, ErrInvalid)
		}
		sockbuf = int(n)
	}
	if d, ok, herr := envDuration("GOSHMEM_HEARTBEAT", minHeartbeat, maxHeartbeat); herr != nil {
		return 0, 0, 0, herr
	} else if ok {
		heartbeat = d
	}
	return streams, sockbuf, heartbeat, nil
}

// startMesh listens for this PE's remote peers.
func (pe *PE) startMesh(jobID string, key []byte, listen string) error {
	streams, sockbuf, heartbeat, err := meshEnv()
	if err != nil {
		return err
	}
	spin, err := spinEnv()
	if err != nil {
		return err
	}
	self := &pe.peers[pe.rank]
	m, err := netmesh.Listen(netmesh.Config{
		Streams: streams, SockBuf: sockbuf, Heartbeat: heartbeat,
		Spin: spin, InProcess: pe.job != nil,
		Rank: pe.rank, Size: pe.npes, JobID: jobID, Key: key, Mem: pe.mem, Atomics: segAtomics(pe.mem),
		Notify: func(off, n uint64) {
			if inFinalizing(off, n) {
				pe.wakeSelf()
				return
			}
			pe.notify(self, off, n)
		},
		Listen:  listen,
		Timeout: pe.cfg.Timeout,
		Logf:    newLogLimiter(os.Stderr, pe.rank, time.Now).logf,
		OnLost: func(rank int, err error) {
			pe.markLost(fmt.Errorf("shmem: PE %d (remote): %v: %w", rank, err, ErrPeerLost))
		},
		// A peer that finalized while this PE still runs breaks every
		// later collective with it: checkRemoteGone decides, and wakes the
		// waits if so, now rather than at a wait's next nap.
		OnGoodbye: func(int) { pe.checkRemoteGone() },
	})
	if err != nil {
		return fmt.Errorf("shmem: PE %d: %w", pe.rank, err)
	}
	pe.mesh = m
	// Set before any link exists: the links' readers read it (through
	// notify) from their own goroutines.
	pe.hasRemote = true
	return nil
}

// connectMesh connects to every remote peer (addrs by rank, "" for the
// same-host ones) and installs the links.
func (pe *PE) connectMesh(ctx context.Context, addrs []string) error {
	peers := map[int]string{}
	for r, a := range addrs {
		if r != pe.rank && pe.peers[r].mem == nil {
			if a == "" {
				return fmt.Errorf("shmem: PE %d on another host published no address: %w", r, ErrProtocol)
			}
			peers[r] = a
		}
	}
	if len(peers) == 0 {
		return nil
	}
	if err := pe.mesh.Connect(ctx, peers); err != nil {
		return fmt.Errorf("shmem: PE %d connecting to remote PEs: %w", pe.rank, err)
	}
	for r := range peers {
		l := pe.mesh.Link(r)
		if l == nil {
			return fmt.Errorf("shmem: PE %d has no link to PE %d after connecting: %w", pe.rank, r, ErrPeerLost)
		}
		pe.peers[r].link = tcpLink{l}
		pe.peers[r].addr = peers[r] // the address it listens on
	}
	pes, cpus := max(onThisMachine(pe, addrs), pe.machinePEs), pe.machineCPUs()
	pe.mesh.SetOversubscribed(pes > cpus)
	if pe.job == nil && os.Getenv("GOMAXPROCS") == "" {
		if n := procsFor(pes, cpus, runtime.GOMAXPROCS(0)); n < runtime.GOMAXPROCS(0) {
			runtime.GOMAXPROCS(n)
		}
	}
	return nil
}

// procsFor is the GOMAXPROCS of a PE process with TCP links when pes PEs
// share this machine's cpus CPUs, and the runtime has procs: its share
// of the CPUs, at least 1, when the PEs outnumber them; procs otherwise.
//
// Each Go processor beyond a PE's share is a thread that the runtime
// wakes to run whatever becomes ready (a stream's reader goroutine that
// an arrival woke, finding the read token held; a timer) while the PE's
// own goroutine runs or polls: two context switches each time, on a
// CPU that another PE needed. 4 PEs over TCP on 2 CPUs, 520 AllReduces
// of 1 MiB: 62,000 context switches and 2.08 s of CPU with GOMAXPROCS 2,
// 13,000 and 1.68 s with 1 (docs/performance.md). Only launched PEs
// (Init) take it, never the goroutine PEs of Run, which share one
// process, and not when the environment sets GOMAXPROCS. PEs that only
// share memory keep the runtime's count: for 4 of them on 2 CPUs, one
// processor each was no faster in two interleaved sets of 5 rounds, and
// made the back-to-back FCollect of 1 MiB 1.5x slower.
func procsFor(pes, cpus, procs int) int {
	if pes <= cpus || cpus <= 0 || pes <= 0 {
		return procs
	}
	return max(1, min(procs, cpus/pes))
}

// machineCPUs is how many CPUs this machine's PEs may run on, as far as
// this PE can tell: the CPUs in the union of the affinity masks that it
// and the PEs whose heaps it maps published in their segment headers
// (heap.CPUMask), and at least runtime.NumCPU(). A launcher that binds
// each PE to a core of its own (mpirun --bind-to core, srun
// --cpu-bind=cores) leaves every PE one CPU, which runtime.NumCPU()
// alone would count as the whole machine; PEs all confined to the same
// CPUs (taskset around the launcher) still count as sharing them.
func (pe *PE) machineCPUs() int {
	masks := [][heap.CPUWords]uint64{heap.CPUMask(pe.mem)}
	for r := range pe.peers {
		if m := pe.peers[r].mem; m != nil && r != pe.rank {
			masks = append(masks, heap.CPUMask(m))
		}
	}
	return max(cpuUnion(masks), runtime.NumCPU())
}

// cpuUnion counts the CPUs set in any of masks.
func cpuUnion(masks [][heap.CPUWords]uint64) int {
	var u [heap.CPUWords]uint64
	for _, m := range masks {
		for i, w := range m {
			u[i] |= w
		}
	}
	n := 0
	for _, w := range u {
		n += bits.OnesCount64(w)
	}
	return n
}

// onThisMachine counts the PEs that run on this machine and so share its
// CPUs: the PEs whose heaps this PE maps (itself included), and the
// remote ones that listen on a loopback address or on one of this
// machine's own addresses (pretend hosts, or several hosts' worth of PEs
// started on one machine). PEs in other network namespaces of the same
// machine are not seen: the launcher's count (boot.EnvMachinePEs) covers
// them.
func onThisMachine(pe *PE, addrs []string) int {
	local := map[string]bool{}
	if ifAddrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range ifAddrs {
			if ipn, ok := a.(*net.IPNet); ok {
				local[ipn.IP.String()] = true
			}
		}
	}
	n := 0
	for r, a := range addrs {
		if r == pe.rank || pe.peers[r].mem != nil {
			n++
			continue
		}
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			continue
		}
		if ip := net.ParseIP(host); ip != nil && (ip.IsLoopback() || local[ip.String()]) {
			n++
		}
	}
	return n
}

// thunderboltBridge reports whether ip is a link-local IPv4 address
// (169.254/16, what Thunderbolt networking uses without DHCP) on a local
// interface that is a bridge or a Thunderbolt network device.
func thunderboltBridge(ip net.IP) bool {
	if ip == nil || ip.To4() == nil || !ip.IsLinkLocalUnicast() {
		return false
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return false
	}
	for _, ifi := range ifs {
		addrs, _ := ifi.Addrs()
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || !ipn.Contains(ip) {
				continue
			}
			if _, err := os.Stat("/sys/class/net/" + ifi.Name + "/bridge"); err == nil {
				return true
			}
			if l, err := os.Readlink("/sys/class/net/" + ifi.Name + "/device/driver"); err == nil && strings.Contains(l, "thunderbolt") {
				return true
			}
			if strings.HasPrefix(ifi.Name, "thunderbolt") {
				return true
			}
		}
	}
	return false
}

// segAtomics applies the mesh's ATOMIC and PUT_SIGNAL operations to this
// PE's segment with heap's atomics, the ones same-host PEs use on the
// same words, so that both routes are coherent on one word.
type segAtomics []byte

func (m segAtomics) Atomic(off uint64, width int, op netmesh.AtomicOp, v, cond uint64) uint64 {
	return heap.AtomicAt(m, off, width, heapOp(op), v, cond)
}

// tcpLink is the route to a PE on another host: a netmesh link, whose
// atomics take the wire's op codes.
type tcpLink struct{ *netmesh.Link }

func (l tcpLink) Atomic(width int, op heap.AtomicOp, off, v, cond uint64) (uint64, error) {
	return l.Link.Atomic(width, wireOp(op), off, v, cond)
}

func (l tcpLink) AtomicNBI(width int, op heap.AtomicOp, off, v, cond uint64, dst *uint64) error {
	return l.Link.AtomicNBI(width, wireOp(op), off, v, cond, dst)
}

// The atomic operations of heap and of the wire, mapped by name (an
// unknown op maps to 0, which both refuse).
var opPairs = [...]struct {
	heap heap.AtomicOp
	wire netmesh.AtomicOp
}{
	{heap.OpFetch, netmesh.OpFetch}, {heap.OpSet, netmesh.OpSet}, {heap.OpSwap, netmesh.OpSwap},
	{heap.OpCSwap, netmesh.OpCSwap}, {heap.OpFetchAdd, netmesh.OpFetchAdd}, {heap.OpFetchAnd, netmesh.OpFetchAnd},
	{heap.OpFetchOr, netmesh.OpFetchOr}, {heap.OpFetchXor, netmesh.OpFetchXor},
}

func wireOp(op heap.AtomicOp) netmesh.AtomicOp {
	for _, p := range opPairs {
		if p.heap == op {
			return p.wire
		}
	}
	return 0
}

func heapOp(op netmesh.AtomicOp) heap.AtomicOp {
	for _, p := range opPairs {
		if p.wire == op {
			return p.heap
		}
	}
	return 0
}
