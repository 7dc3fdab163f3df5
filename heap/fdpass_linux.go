// Passing a segment's descriptor to a same-host peer over a Unix socket
// (SCM_RIGHTS).

package heap

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/internal/errs"
)

// SendFD sends msg with fd attached as SCM_RIGHTS in one message.
func SendFD(c *net.UnixConn, fd int, msg []byte) error {
	n, oobn, err := c.WriteMsgUnix(msg, unix.UnixRights(fd), nil)
	if err != nil {
		return fmt.Errorf("heap: sending segment descriptor: %w", err)
	}
	if n != len(msg) || oobn == 0 {
		return fmt.Errorf("heap: short write sending segment descriptor (%d of %d bytes)", n, len(msg))
	}
	return nil
}

// RecvFD receives one message of at most len(buf) bytes carrying exactly
// one descriptor. It returns the descriptor (owned by the caller) and the
// message length. Any other number of descriptors is a protocol error and
// every received descriptor is closed.
func RecvFD(c *net.UnixConn, buf []byte) (int, int, error) {
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return -1, 0, fmt.Errorf("heap: receiving segment descriptor: %w", err)
	}
	var fds []int
	if oobn > 0 {
		msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
		if perr == nil {
			for _, m := range msgs {
				got, rerr := unix.ParseUnixRights(&m)
				if rerr == nil {
					fds = append(fds, got...)
				}
			}
		}
	}
	if len(fds) != 1 || flags&unix.MSG_CTRUNC != 0 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return -1, 0, fmt.Errorf("heap: expected one segment descriptor, got %d: %w", len(fds), errs.Protocol)
	}
	return fds[0], n, nil
}

// CloseFD closes a descriptor received with RecvFD that will not be mapped.
func CloseFD(fd int) { unix.Close(fd) }
