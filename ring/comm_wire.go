package ring

import (
	"encoding/binary"
	"fmt"
	"reflect"

	"github.com/goshmem/goshmem/internal/elemkind"
	"github.com/goshmem/goshmem/shmem"
)

// The Comm header: the first bytes of every lane message a Comm sends.
// docs/ring.md ("Comm protocol") holds the normative copy of this table.
// All integers are little-endian.
//
//	offset  width  field
//	0       1      type: 1 eager (the payload follows), 2 rts (announces a
//	               rendezvous message), 3 frag (a piece of one), 4 abort
//	               (its sender withdrew an announced rendezvous message)
//	1       1      kind: the element kind (reflect.Kind of the element type)
//	2       2      zero
//	4       4      comm: the Comm's id (0 for NewComm's, else a sub-Comm's: see Sub)
//	8       4      tag (eager, rts); zero (frag, abort)
//	12      4      eager: the payload's length in bytes (it must equal the
//	               lane message's length minus 16). Others: zero
//	16      8      rts: the message's length in bytes. frag: the offset of
//	               this piece in the message. abort: zero
//	24      4      rts, frag, abort: the message's id (the sender's
//	               rendezvous number, never 0)
//	28      4      rts, abort: zero. frag: the match epoch it belongs to
//
// An eager header is 16 bytes, the others 32; the payload (of
// an eager message or a frag) follows the header in the same lane message.
const (
	msgEager = 1
	msgRTS   = 2
	msgFrag  = 3
	msgAbort = 4

	hdrEager = 16
	hdrLong  = 32
)

// header is a parsed Comm header.
type header struct {
	typ   uint8
	kind  uint8
	comm  uint32
	tag   int
	n     uint64 // eager, rts: length; frag: offset
	id    uint32 // rts, frag, abort: the rendezvous message's id
	epoch uint32
}

// putEager writes the header of an eager message of n payload bytes
// (n is at most the eager limit, far below 4 GiB).
func putEager(b []byte, kind uint8, comm uint32, tag int, n int) {
	clear(b[:hdrEager])
	b[0], b[1] = msgEager, kind
	binary.LittleEndian.PutUint32(b[4:], comm)
	binary.LittleEndian.PutUint32(b[8:], uint32(tag))
	binary.LittleEndian.PutUint32(b[12:], uint32(n))
}

func putLong(b []byte, typ, kind uint8, comm uint32, tag int, n uint64, id, epoch uint32) {
	clear(b[:hdrLong])
	b[0], b[1] = typ, kind
	binary.LittleEndian.PutUint32(b[4:], comm)
	binary.LittleEndian.PutUint32(b[8:], uint32(tag))
	binary.LittleEndian.PutUint64(b[16:], n)
	binary.LittleEndian.PutUint32(b[24:], id)
	binary.LittleEndian.PutUint32(b[28:], epoch)
}

// parseHeader reads the header of lane message b and returns it with the
// payload. It never panics: a message too short for its type, of an
// unknown type, with a field the table above says is zero set, or eager
// with a length that is not its payload's, is ErrProtocol; so a header
// it accepts is the one put* writes for the same fields
// (FuzzParseHeader).
func parseHeader(b []byte) (header, []byte, error) {
	if len(b) < hdrEager {
		return header{}, nil, fmt.Errorf("ring: Comm message of %d bytes, shorter than a header: %w", len(b), shmem.ErrProtocol)
	}
	h := header{typ: b[0], kind: b[1], comm: binary.LittleEndian.Uint32(b[4:]),
		tag: int(binary.LittleEndian.Uint32(b[8:]))}
	if b[2] != 0 || b[3] != 0 {
		return h, nil, fmt.Errorf("ring: Comm message with non-zero bytes 2-3: %w", shmem.ErrProtocol)
	}
	switch h.typ {
	case msgEager:
		if h.tag > MaxTag {
			return h, nil, fmt.Errorf("ring: Comm message with tag %d: %w", h.tag, shmem.ErrProtocol)
		}
		h.n = uint64(binary.LittleEndian.Uint32(b[12:]))
		if h.n != uint64(len(b)-hdrEager) {
			return h, nil, fmt.Errorf("ring: eager Comm message says %d payload bytes, carries %d: %w", h.n, len(b)-hdrEager, shmem.ErrProtocol)
		}
		return h, b[hdrEager:], nil
	case msgRTS, msgFrag, msgAbort:
		if len(b) < hdrLong {
			return h, nil, fmt.Errorf("ring: Comm message of type %d and %d bytes, shorter than its header: %w", h.typ, len(b), shmem.ErrProtocol)
		}
		h.n = binary.LittleEndian.Uint64(b[16:])
		h.id = binary.LittleEndian.Uint32(b[24:])
		h.epoch = binary.LittleEndian.Uint32(b[28:])
		if h.id == 0 || (h.typ == msgRTS && (h.tag > MaxTag || h.n > maxMessage)) {
			return h, nil, fmt.Errorf("ring: Comm message of type %d: id %d, tag %d, length %d out of range: %w", h.typ, h.id, h.tag, h.n, shmem.ErrProtocol)
		}
		if h.typ != msgFrag && len(b) != hdrLong {
			return h, nil, fmt.Errorf("ring: Comm rts of %d bytes: %w", len(b), shmem.ErrProtocol)
		}
		if binary.LittleEndian.Uint32(b[12:]) != 0 || (h.typ != msgRTS && h.tag != 0) || (h.typ != msgFrag && h.epoch != 0) || (h.typ == msgAbort && h.n != 0) {
			return h, nil, fmt.Errorf("ring: Comm message of type %d with a field set that its type leaves zero: %w", h.typ, shmem.ErrProtocol)
		}
		return h, b[hdrLong:], nil
	}
	return h, nil, fmt.Errorf("ring: Comm message of unknown type %d: %w", h.typ, shmem.ErrProtocol)
}

// The claim word: a receiver's hold on one rendezvous message. Every PE
// has claimsPer words for each receiver (world PE r's are r*claimsPer..
// r*claimsPer+claimsPer-1); receiver r takes a free one of its own at a
// match and sets it, the sender reads them in place (docs/ring.md
// "Rendezvous"):
//
//	bits 0..7    state: 0 free, 1 matched, 2 given back, 3 done
//	bits 8..31   epoch: how many times a receiver has matched the message
//	bits 32..63  the message's id (its rts's)
const (
	rdvFree    = 0
	rdvMatched = 1
	rdvGiven   = 2
	rdvDone    = 3
)

func rdvWord(id, epoch uint32, st uint8) uint64 {
	return uint64(id)<<32 | uint64(epoch&0xFFFFFF)<<8 | uint64(st)
}

func rdvSplit(w uint64) (id, epoch uint32, st uint8) {
	return uint32(w >> 32), uint32(w>>8) & 0xFFFFFF, uint8(w)
}

// kindOf is T's element kind as the header carries it: its
// reflect.Kind (internal/elemkind).
func kindOf[T shmem.Elem]() uint8 { return uint8(elemkind.Of[T]()) }

// kindName names a header kind for error messages.
func kindName(k uint8) string { return reflect.Kind(k).String() }
