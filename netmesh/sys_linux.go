package netmesh

// The package's unsafe corner: socket options, the segment alignment
// check, the raw system calls and the one copy hidden from the race
// detector. The raw write lets a stream's reader try to send its
// responses without ever blocking (see sendQueue.tryFlush); the raw read
// lets it look for bytes without waiting, once or, while the spin policy allows,
// over and over (lead.go); the stream's epoll set is in watch.go;
// everything else goes through package net. Assumptions: the descriptor
// is a connected TCP socket that package net has put in non-blocking
// mode, and every slice in vec stays alive and unchanged for the
// duration of the call (the caller's batch holds them).

import (
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// iovMax is the most iovecs one writev takes on Linux (IOV_MAX).
const iovMax = 1024

// tuneConn sets TCP_NODELAY, the socket buffer sizes when sockBuf > 0
// (0 keeps the kernel's autotuning), and TCP_USER_TIMEOUT, so that data
// the peer never acknowledges fails the connection after userTimeout
// instead of the kernel's many minutes.
func tuneConn(c *net.TCPConn, sockBuf int, userTimeout time.Duration) error {
	if err := c.SetNoDelay(true); err != nil {
		return err
	}
	if sockBuf > 0 {
		if err := c.SetReadBuffer(sockBuf); err != nil {
			return err
		}
		if err := c.SetWriteBuffer(sockBuf); err != nil {
			return err
		}
	}
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	ms := int(min(userTimeout.Milliseconds(), 1<<31-1))
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, ms)
	}); err != nil {
		return err
	}
	return serr
}

// sockBufControl returns a Control function that sets the socket buffer
// sizes before listen or connect, so the TCP window scale fits them. It
// returns nil for sockBuf 0.
func sockBufControl(sockBuf int) func(network, address string, c syscall.RawConn) error {
	if sockBuf <= 0 {
		return nil
	}
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, sockBuf); serr == nil {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, sockBuf)
			}
		})
		if err != nil {
			return err
		}
		return serr
	}
}

// nbWriter writes iovecs to a socket without waiting. Its state lives in
// the struct and its callback is bound once, so a write allocates nothing.
// Only the owner of the stream's socket (sendQueue.busy) uses it.
type nbWriter struct {
	raw   syscall.RawConn
	iov   []unix.Iovec
	n     uintptr
	errno syscall.Errno
	fn    func(fd uintptr) bool
	gfn   func(fd uintptr) bool // guarded
	vec   *net.Buffers          // what guarded writes
	mu    *sync.Mutex           // held by guarded around each system call
	rawOK *atomic.Bool          // call makes raw system calls (rawSyscalls); nil: never
}

func newNBWriter(raw syscall.RawConn, mu *sync.Mutex) *nbWriter {
	w := &nbWriter{raw: raw, mu: mu}
	w.fn = w.call
	w.gfn = w.callGuarded
	return w
}

// setIov points w.iov at the first iovMax slices of vec.
func (w *nbWriter) setIov(vec [][]byte) {
	v := w.iov[:0]
	for _, b := range vec[:min(len(vec), iovMax)] {
		var e unix.Iovec
		e.Base = unsafe.SliceData(b)
		e.SetLen(len(b))
		v = append(v, e)
	}
	w.iov = v
}

// guarded writes all of vec, consuming it, and waits in the netpoller
// while the socket is full, like net.Buffers.WriteTo; but it builds the
// iovecs and makes each system call holding w.mu, and consumes what was
// written before it lets go. So a goroutine that holds w.mu sees vec as
// the kernel will read it next, and may swap a piece for a copy
// (sendQueue.detach); nobody reads vec's slices outside w.mu.
func (w *nbWriter) guarded(vec *net.Buffers) error {
	w.vec, w.errno = vec, 0
	err := w.raw.Write(w.gfn)
	w.vec = nil
	if err != nil {
		return err
	}
	if w.errno != 0 {
		return w.errno
	}
	return nil
}

func (w *nbWriter) callGuarded(fd uintptr) bool {
	for {
		w.mu.Lock()
		if len(*w.vec) == 0 {
			w.mu.Unlock()
			return true
		}
		w.setIov(*w.vec)
		n, _, errno := unix.Syscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&w.iov[0])), uintptr(len(w.iov)))
		clear(w.iov)
		if errno == 0 {
			consume(w.vec, int(n))
		}
		w.mu.Unlock()
		switch errno {
		case 0, unix.EINTR:
		case unix.EAGAIN:
			return false // wait until the socket takes more
		default:
			w.errno = errno
			return true
		}
	}
}

func (w *nbWriter) call(fd uintptr) bool {
	sc := syscallFn(w.rawOK != nil && w.rawOK.Load()) // see rawSyscalls: the socket is non-blocking
	for {
		if len(w.iov) == 1 { // write(2) is cheaper than a writev(2) of one iovec
			w.n, _, w.errno = sc(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(w.iov[0].Base)), uintptr(w.iov[0].Len))
		} else {
			w.n, _, w.errno = sc(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&w.iov[0])), uintptr(len(w.iov)))
		}
		if w.errno != unix.EINTR {
			return true // never wait: the caller hands the rest to the writer goroutine
		}
	}
}

// writev writes as much of vec as the socket takes now and returns the
// bytes written (0 when the send buffer is full).
func (w *nbWriter) writev(vec [][]byte) (int, error) {
	w.setIov(vec)
	v := w.iov
	if len(v) == 0 {
		return 0, nil
	}
	err := w.raw.Write(w.fn)
	clear(v) // drop the pointers into the batch
	switch {
	case err != nil:
		return 0, err
	case w.errno == unix.EAGAIN:
		return 0, nil
	case w.errno != 0:
		return 0, w.errno
	}
	return int(w.n), nil
}

// aligned reports whether p starts on an n-byte boundary.
func aligned(p []byte, n uintptr) bool {
	return uintptr(unsafe.Pointer(unsafe.SliceData(p)))%n == 0
}

// spinState is a stream's non-blocking reader (lead.go, stream.poll):
// poll reads the socket without waiting, once (budget -1) or over and
// over (spin.go) until bytes arrive, the read fails or the stream
// is kicked; every spinCheck polls it also gives up when the link is down
// or the budget passed, and every spinYield polls it yields the
// processor, so that goroutines queued behind it run. With yield (an
// oversubscribed machine) it gives the processor away after every read
// that finds nothing, as Mesh.Poll does, and looks at the clock every
// time. Like nbWriter, its state lives in the struct and its callback is
// bound once.
type spinState struct {
	st     *stream
	p      []byte
	budget int64 // -1: one read; else a mono() limit
	yield  bool  // give the processor away after every empty read
	n      int
	err    error
	fn     func(fd uintptr) bool
}

func (s *spinState) poll(fd uintptr) bool {
	last := int64(0)
	if s.budget >= 0 {
		last = mono()
	}
	for i := 1; ; i++ {
		n, err := read(fd, s.p, s.st.l.m.oversub.Load())
		switch {
		case err == 0 && n > 0:
			s.n = n
			return true
		case err == 0:
			s.err = io.EOF
			return true
		case err == unix.EINTR:
			continue
		case err != unix.EAGAIN:
			s.err = os.NewSyscallError("read", err)
			return true
		}
		if s.budget < 0 || s.st.kick.Load() {
			return true
		}
		if s.yield {
			if s.st.l.m.cfg.InProcess {
				runtime.Gosched()
			} else {
				yieldCPU()
			}
			if now := mono(); s.st.l.err.Load() != nil || now > s.budget || now < spinOff.Load() {
				return true
			}
			continue
		}
		if i%spinCheck == 0 {
			now := mono()
			if now-last > spinSlow {
				// The poller was off its processor for most of the last
				// spinCheck polls: more threads want to run than there
				// are cores, and polling only makes it worse.
				spinMissed(now)
				return true
			}
			if s.st.l.err.Load() != nil || now > s.budget {
				return true
			}
			last = now
		}
		if i%spinYield == 0 {
			runtime.Gosched()
			last = mono() // time given away is not time lost
		}
	}
}

// cloneSegment returns a copy of src, a range of this PE's segment: a
// queued large GET reply that must not see a later frame's write
// (sendQueue.detach). Hidden from the race detector like appendSegment.
//
//go:norace
func cloneSegment(src []byte) []byte {
	p := make([]byte, len(src))
	copy(p, src)
	return p
}

// appendSegment appends src, a range of this PE's segment, to b: the copy
// of a small GET reply. The race detector is not told about the read:
// like the kernel's read of a large reply, it is ordered with the
// writes of other goroutines, other meshes and the peer by the protocol
// (frames applied in stream order, Notify, Flush), which the detector
// cannot see through a socket. The copy is made 8 bytes at a time.
//
//go:norace
func appendSegment(b, src []byte) []byte {
	n := len(b)
	b = slices.Grow(b, len(src))[:n+len(src)]
	d := b[n:]
	i := 0
	for ; i+8 <= len(src); i += 8 {
		le.PutUint64(d[i:], le.Uint64(src[i:]))
	}
	for ; i < len(src); i++ {
		d[i] = src[i]
	}
	return b
}

// read is read(2) on the non-blocking socket fd, as a raw system call
// when raw (rawSyscalls).
func read(fd uintptr, p []byte, raw bool) (int, syscall.Errno) {
	n, _, e := syscallFn(raw)(unix.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	return int(n), e
}

// syscallFn is unix.RawSyscall when raw (rawSyscalls), else
// unix.Syscall.
func syscallFn(raw bool) func(trap, a1, a2, a3 uintptr) (uintptr, uintptr, syscall.Errno) {
	if raw {
		return unix.RawSyscall
	}
	return unix.Syscall
}

// rawSyscalls: on an oversubscribed machine (Mesh.SetOversubscribed) the
// polling reads (spinState.poll) and the non-blocking writes
// (nbWriter.call, which a small batch tries before a blocking
// conn.Write: sendQueue.write) are raw system calls, like yieldCPU.
// Through syscall.Syscall a call during which the OS descheduled the
// thread, as it does there, lasted past sysmon's 20 µs, and with
// GOMAXPROCS 1 (shmem's share for a PE on such a machine) sysmon then
// took the goroutine's only Go processor and started another thread
// with it, even with nothing else to run; the goroutine, back from the
// call, found no processor and waited on the run queue until the OS ran
// that thread: a Go execution trace of a 4-PE barrier on two CPUs showed
// a wait of 7.1 ms. None of these calls waits (the sockets are
// non-blocking), so the runtime loses nothing by not knowing of them.
// Elsewhere they stay ordinary system calls, as measured before.

// yieldCPU gives the processor to other threads and processes
// (sched_yield): a Poll on an oversubscribed machine calls it between
// looks. It is a raw system call, so the goroutine keeps its thread and
// its Go processor: through syscall.Syscall a yield that lasts while the
// PE sharing the core runs looks like a blocking call to the runtime,
// which hands the processor to another thread, and the goroutine then
// resumes on a thread that must be woken first (heap.Yield, which shmem's
// waits use, measured it: docs/performance.md).
func yieldCPU() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// peerHostAcks reports whether the peer's host acknowledged bytes this
// side sent on st within the last within (TCP_INFO's
// tcpi_last_ack_recv) and the connection is open: its kernel runs and
// its process still holds the socket (a process that ended would have
// closed it). This side sends at least a HEARTBEAT per interval, so a
// host that is alive acknowledges something in every interval (some
// bytes may be unacknowledged at any moment: the peer's kernel delays
// its ACKs up to 40 ms). Any error reading it says no.
func (st *stream) peerHostAcks(within time.Duration) bool {
	raw, err := st.conn.SyscallConn()
	if err != nil {
		return false
	}
	var info *unix.TCPInfo
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || gerr != nil {
		return false
	}
	return info.State == tcpEstablished && time.Duration(info.Last_ack_recv)*time.Millisecond < within
}

// tcpEstablished is TCP_ESTABLISHED (include/net/tcp_states.h), TCP_INFO's
// state of an open connection.
const tcpEstablished = 1
