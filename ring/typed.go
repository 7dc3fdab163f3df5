package ring

import (
	"fmt"
	"slices"

	"github.com/goshmem/goshmem/shmem"
)

// Typed helpers, for programs that move values rather than bytes. A
// message carries the values' in-memory bytes in the sender's byte order,
// as shmem.Put does; the receiver must read it with the same T.

// SendT sends the elements of v as one message on the lane to PE to.
// Like Send it allocates nothing; len(v) times T's size must fit the
// lane's Capacity.
func SendT[T shmem.Elem](r *Ring, to int, v []T) (uint64, error) {
	return r.Send(to, asBytes(v))
}

// AppendT appends the elements m carries to dst and returns the
// extended slice. The values are copied, so the result stays valid after
// m is acknowledged. A payload that is not a whole number of T is an
// error (ErrProtocol): the sender used another type.
func AppendT[T shmem.Elem](dst []T, m Message) ([]T, error) {
	size := sizeOf[T]()
	if len(m.Data)%size != 0 {
		return dst, fmt.Errorf("ring: message %d from PE %d has %d bytes, not a whole number of %d-byte %T: %w",
			m.Seq, m.Origin, len(m.Data), size, *new(T), shmem.ErrProtocol)
	}
	n := len(m.Data) / size
	dst = slices.Grow(dst, n)
	copy(asBytes(dst[len(dst):len(dst)+n]), m.Data)
	return dst[:len(dst)+n], nil
}

// RecvT waits for the next message (as Recv) and appends its elements to
// dst. It returns the message too: in Safe mode acknowledge m.Seq from
// m.Origin when convenient; the values in dst do not depend on it.
func RecvT[T shmem.Elem](r *Ring, dst []T) ([]T, Message, error) {
	m, err := r.Recv()
	if err != nil {
		return dst, m, err
	}
	dst, err = AppendT(dst, m)
	return dst, m, err
}
