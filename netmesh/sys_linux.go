package netmesh

// The package's unsafe corner: socket options, the segment alignment
// check, and the one raw system call. The raw
// writev lets a reader goroutine try to send its responses without ever
// blocking (see sendQueue.tryFlush); everything else goes through package
// net. Assumptions: the descriptor is a connected TCP socket that package
// net has put in non-blocking mode, and every slice in vec stays alive
// and unchanged for the duration of the call (the caller's batch holds
// them).

import (
	"net"
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
}

func newNBWriter(raw syscall.RawConn) *nbWriter {
	w := &nbWriter{raw: raw}
	w.fn = w.call
	return w
}

func (w *nbWriter) call(fd uintptr) bool {
	for {
		w.n, _, w.errno = unix.Syscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&w.iov[0])), uintptr(len(w.iov)))
		if w.errno != unix.EINTR {
			return true // never wait: the caller hands the rest to the writer goroutine
		}
	}
}

// writev writes as much of vec as the socket takes now and returns the
// bytes written (0 when the send buffer is full).
func (w *nbWriter) writev(vec [][]byte) (int, error) {
	v := w.iov[:0]
	for _, b := range vec[:min(len(vec), iovMax)] {
		var e unix.Iovec
		e.Base = unsafe.SliceData(b)
		e.SetLen(len(b))
		v = append(v, e)
	}
	w.iov = v
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
