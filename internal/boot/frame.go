package boot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/goshmem/goshmem/internal/errs"
)

// Frame layout. Every boot message, in both directions, is one frame:
//
//	offset  width  meaning
//	0       4      L, big-endian uint32: the number of bytes that follow
//	               (kind + body); 1 <= L <= MaxFrame
//	4       1      kind (kindHello ... kindBye, see msg.go)
//	5       L-1    body: the message struct, msgpack-encoded as a map
//	               keyed by the codec names in msg.go (the encoder
//	               writes keys in sorted order; a decoder accepts any
//	               order and ignores unknown keys)
//
// There is no checksum: TCP carries the frames, and the handshake
// authenticates the peer, not each frame.
const (
	frameHeaderLen = 4
	// MaxFrame bounds L. A longer frame is a protocol violation, refused
	// before anything is allocated for it.
	MaxFrame = 16 << 20
	// maxHandshakeFrame bounds frames before a peer has authenticated, so
	// that a stranger cannot make the server allocate much.
	maxHandshakeFrame = 4 << 10
	// readChunk is how much readFrame allocates up front; it grows the
	// buffer only as bytes actually arrive.
	readChunk = 64 << 10
)

// appendFrame appends the frame for kind and an already encoded body.
func appendFrame(dst []byte, kind byte, body []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(1+len(body)))
	dst = append(dst, kind)
	return append(dst, body...)
}

// frameLen reports the encoded length of a frame with a body of n bytes.
func frameLen(n int) int { return frameHeaderLen + 1 + n }

// readFrame reads one frame of at most limit bytes after the length word
// (limit <= MaxFrame). It returns the kind and the body. A length outside
// [1, limit] is an error wrapping errs.Protocol; a short read returns the
// reader's error (io.ErrUnexpectedEOF for a frame cut short, io.EOF for a
// clean end between frames).
func readFrame(r io.Reader, limit int) (kind byte, body []byte, err error) {
	var hdr [frameHeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < 1 || uint64(n) > uint64(limit) {
		return 0, nil, fmt.Errorf("boot: frame of %d bytes, limit %d: %w", n, limit, errs.Protocol)
	}
	buf := bytes.NewBuffer(make([]byte, 0, min(int(n), readChunk)))
	got, err := buf.ReadFrom(io.LimitReader(r, int64(n)))
	if got < int64(n) {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	b := buf.Bytes()
	return b[0], b[1:], nil
}
