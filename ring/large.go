package ring

import (
	"fmt"
	"hash/crc32"

	"github.com/goshmem/goshmem/shmem"
)

// InlineMax is the largest payload a slot carries itself. A lane whose
// Capacity is above it gets, besides its slots, one bulk area of
// Capacity bytes per slot, and Send moves a message longer than
// InlineMax in two steps: a put of the payload, straight from the
// caller's slice, into bulk area (seq-1) mod Depth, then the slot image
// with the bulk flag and the length (no inline payload). The lane's
// sequence, acknowledgement and overwrite rules cover the bulk area
// exactly as they cover its slot.
//
// Why: an inline message costs a copy into the staging slot, a CRC32C
// pass on each side and the put; a bulk message costs the put alone
// (plus a small slot). The benchmarks (docs/ring.md) put the crossover
// between 512 B and 4 KiB on this machine; 1 KiB keeps a
// bulk lane's slots at 1088 bytes.
const InlineMax = 1 << 10

// putBulk sends bulk message seq, hdr then data, through slot k and bulk
// area b in To's heap: first the slot image (with the bulk flag and the length,
// and in Raw mode the payload's CRC32C, which tells the receiver whether
// its copy of the area was overwritten meanwhile), then the payload,
// straight from the caller's slices, its last piece with the signal
// that publishes seq (publish). The receiver reads nothing before the signal, so
// the slot may go first; over TCP the slot, the header and the signal's
// frame then leave with the payload in one write.
func (l *sendLane) putBulk(r *Ring, k, b int, seq uint64, hdr, data []byte) error {
	off := l.lay.bulkOff + b*l.lay.bulkSize
	n := len(hdr) + len(data)
	var sum uint32
	if r.mode == Raw {
		sum = crc32.Update(crc32.Checksum(hdr, castagnoli), castagnoli, data)
	}
	encodeBulkSlot(l.stage, seq, n, sum)
	if err := l.putSlot(k, seq, offPayload+bulkInline, false); err != nil {
		return err
	}
	parts := [2][]byte{hdr, data}
	last := 1
	if len(data) == 0 {
		last = 0
	}
	for i, part := range parts[:last+1] {
		if len(part) == 0 {
			continue
		}
		at := off + i*len(hdr)
		dst := l.data.Slice(at, at+len(part))
		var err error
		if i == last {
			err = l.publish(dst, part, seq, n)
		} else {
			err = shmem.Put(dst, part, l.lane.To)
		}
		if err != nil {
			return fmt.Errorf("bulk area %d: %w", b, err)
		}
	}
	return nil
}

// takeBulk returns the payload of bulk message e, n bytes in bulk area
// k. In Safe mode it is the area itself: the sender does not reuse it
// before e is acknowledged. In Raw mode it is a copy, delivered only if
// its CRC32C is sum, the one the slot carries: the message that reuses
// the area may have begun to overwrite it. take then tells overwriting
// (lost) from corruption.
func (l *recvLane) takeBulk(k, n int, sum uint32) ([]byte, bool) {
	area := l.bulkArea(k)[:n:n]
	if l.mode == Safe {
		return area, true
	}
	data := append([]byte(nil), area...)
	if crc32.Checksum(data, castagnoli) != sum {
		return nil, false
	}
	return data, true
}
