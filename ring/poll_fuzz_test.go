package ring

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// FuzzPoll: the receiver's whole poll (take, accept, snapshot,
// decodeSlot) over slot memory and a pub word holding any bytes, as a
// faulty or hostile sender on the same host could leave them. Poll never
// panics and never reads outside the lane; what it delivers is in
// order, within what pub announced, within the lane's capacity; every
// sequence number it passes is delivered, lost (Raw) or counted
// corrupt; an error wraps ErrProtocol.
func FuzzPoll(f *testing.F) {
	img := make([]byte, 2*64)
	encodeSlot(img[:64], 1, []byte("hello"))
	encodeSlot(img[64:], 2, []byte("world!!!"))
	f.Add(img, uint64(2), uint64(1), uint8(2), false, uint8(8))
	f.Add(img, uint64(5), uint64(1), uint8(2), true, uint8(8))
	f.Add(make([]byte, 64), uint64(1), uint64(1), uint8(1), true, uint8(1))
	f.Add(img, ^uint64(0), uint64(3), uint8(3), false, uint8(0))
	f.Fuzz(func(t *testing.T, mem []byte, pub, next uint64, depth uint8, raw bool, limit uint8) {
		d := int(depth%4) + 1
		lane := Lane{From: 0, To: 1, Depth: d, Capacity: 8}
		lay, err := computeLayout([]Lane{lane}, 2, 64, InlineMax, 0, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		ll := lay.lanes[0]
		data := make([]byte, lay.dataLen)
		copy(data, mem)
		mode := Safe
		if raw {
			mode = Raw
		}
		if next == 0 {
			next = 1
		}
		if pub > next+64 {
			pub = next + 64 // a poll walks at most pub-next sequence numbers
		}
		l := &recvLane{lane: lane, depth: uint64(d), lay: ll, mode: mode, mem: data, pubWord: &pub, next: next, given: next - 1}
		if raw {
			l.scratch = make([]byte, ll.slotSize)
		}
		r := &Ring{mode: mode}
		n := int(limit%8) + 1
		got, err := l.poll(r, nil, n)
		if err != nil && !errors.Is(err, shmem.ErrProtocol) {
			t.Fatalf("poll error %v does not wrap ErrProtocol", err)
		}
		if len(got) > n {
			t.Fatalf("poll with limit %d delivered %d", n, len(got))
		}
		prev := next - 1
		for _, m := range got {
			if m.Seq <= prev || m.Seq > pub {
				t.Fatalf("delivered %d after %d, pub %d", m.Seq, prev, pub)
			}
			if len(m.Data) > lane.Capacity {
				t.Fatalf("delivered %d bytes on a lane of capacity %d", len(m.Data), lane.Capacity)
			}
			k := slotOf(m.Seq, uint64(d))
			slot := data[ll.slotsOff+k*ll.slotSize : ll.slotsOff+(k+1)*ll.slotSize]
			if binary.LittleEndian.Uint64(slot) != m.Seq {
				t.Fatalf("delivered %d from slot %d holding %d", m.Seq, k, binary.LittleEndian.Uint64(slot))
			}
			prev = m.Seq
		}
		if l.next < next || l.next > max(pub+1, next) {
			t.Fatalf("poll moved next from %d to %d with pub %d", next, l.next, pub)
		}
		if l.broken == nil && uint64(len(got))+r.lost.Load()+r.corrupt.Load() != l.next-next {
			t.Fatalf("passed %d, delivered %d, lost %d, corrupt %d", l.next-next, len(got), r.lost.Load(), r.corrupt.Load())
		}
		if !raw && r.lost.Load() != 0 {
			t.Fatalf("a Safe lane counted %d lost", r.lost.Load())
		}
	})
}
