// Passing a segment's descriptors (its memfd and its owner's wake
// eventfd) to a same-host peer over a Unix socket (SCM_RIGHTS).

package heap

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/internal/errs"
)

// SendFDs sends msg with fds attached as SCM_RIGHTS in one message.
func SendFDs(c *net.UnixConn, msg []byte, fds ...int) error {
	n, oobn, err := c.WriteMsgUnix(msg, unix.UnixRights(fds...), nil)
	if err != nil {
		return fmt.Errorf("heap: sending segment descriptors: %w", err)
	}
	if n != len(msg) || oobn == 0 {
		return fmt.Errorf("heap: short write sending segment descriptors (%d of %d bytes)", n, len(msg))
	}
	return nil
}

// maxRecvFDs bounds the descriptors one message may carry here: room for
// more than any sender sends, so that a message with too many is seen
// (and all of them closed) rather than truncated.
const maxRecvFDs = 4

// RecvFDs receives one message of at most len(buf) bytes carrying
// exactly want descriptors (want <= maxRecvFDs). It returns the
// descriptors (owned by the caller), in the order sent, and the message
// length. Any other number of descriptors is a protocol error and every
// received descriptor is closed.
func RecvFDs(c *net.UnixConn, buf []byte, want int) ([]int, int, error) {
	oob := make([]byte, unix.CmsgSpace(4*maxRecvFDs))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, 0, fmt.Errorf("heap: receiving segment descriptors: %w", err)
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
	if len(fds) != want || flags&unix.MSG_CTRUNC != 0 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, 0, fmt.Errorf("heap: expected %d segment descriptors, got %d: %w", want, len(fds), errs.Protocol)
	}
	return fds, n, nil
}

// CloseFD closes a descriptor received with RecvFDs that will not be used.
func CloseFD(fd int) { unix.Close(fd) }
