package ring

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goshmem/goshmem/shmem"
)

// sendLane is the sending end of a lane, on its From PE.
type sendLane struct {
	mu sync.Mutex // guards next, acked and stage: one Send at a time per lane

	lane  Lane
	depth uint64
	bulks uint64 // bulk areas: depth, or fewer (layout.go)
	lay   laneLayout
	data  shmem.Sym[byte]   // the ring's data object (slots and bulk areas live in To's copy)
	pub   shmem.Sym[uint64] // To's pub word for this lane
	bell  shmem.Sym[uint64] // To's doorbell; rung only when ringBell
	ack   shmem.Sym[uint64] // this PE's ack word for this lane
	// ackWord is this PE's copy of the ack word, read with atomic loads.
	// The receiver advances it with remote atomic adds.
	ackWord  *uint64
	ringBell bool // To has more than one incoming lane: Recv there sleeps on the doorbell
	// cork: To is on another host, and a message of up to corkMax bytes
	// sent with no wait for a message since the lane's previous one
	// (*waits still equal to lastWaits) is published with a Put and an
	// AtomicSet rather than a PutSignal, so that it waits in the link's
	// send queue for company (see publish). Set by a Comm for its lanes
	// to remote PEs, waits pointing at the Comm's count of waits.
	cork      bool
	waits     *atomic.Uint64
	lastWaits uint64 // *waits at the previous message

	next  uint64   // sequence number of the next message; starts at 1
	acked uint64   // last value read from ackWord (Safe mode)
	stage []byte   // the slot image being built: one slot, reused by every Send
	hbuf  []byte   // sendv's copy of its hdr (so the caller's, on its stack, does not escape to the heap)
	early []uint64 // sequence numbers of the early messages (sendvEarly) not known acknowledged
}

// slot is the handle on slot k in To's heap.
func (l *sendLane) slot(k int) shmem.Sym[byte] {
	off := l.lay.slotsOff + k*l.lay.slotSize
	return l.data.Slice(off, off+l.lay.slotSize)
}

// send writes data as the lane's next message. Over shared memory it
// allocates nothing unless it has to wait for an acknowledgement.
func (l *sendLane) send(r *Ring, data []byte) (uint64, error) {
	seq, _, err := l.sendv(r, nil, data, true)
	return seq, err
}

// sendv writes hdr followed by data as the lane's next message (one
// message: the receiver sees the two concatenated). When wait is false
// and the lane holds Depth unacknowledged messages (Safe mode), it sends
// nothing and returns sent == false at once.
func (l *sendLane) sendv(r *Ring, hdr, data []byte, wait bool) (seq uint64, sent bool, err error) {
	return l.sendvEarly(r, hdr, data, wait, 0)
}

// sendvEarly is sendv that, when early is positive (and wait false),
// sends the message as an early one: only while fewer than early of the
// lane's early messages are unacknowledged. A Comm's early rendezvous
// frags (which may sit unreceived in the lane) thus never take more
// than early of its slots, whoever sends them: the others stay the
// eager messages'.
func (l *sendLane) sendvEarly(r *Ring, hdr, data []byte, wait bool, early int) (seq uint64, sent bool, err error) {
	n := len(hdr) + len(data)
	if n > l.lane.Capacity {
		return 0, false, fmt.Errorf("ring: Send of %d bytes on lane %d→%d, whose capacity is %d bytes: %w",
			n, l.lane.From, l.lane.To, l.lane.Capacity, shmem.ErrInvalid)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	seq = l.next
	if early > 0 && len(l.early) >= early {
		l.acked = atomic.LoadUint64(l.ackWord)
		k := 0
		for _, s := range l.early {
			if s > l.acked {
				l.early[k] = s
				k++
			}
		}
		if l.early = l.early[:k]; k >= early {
			return 0, false, nil
		}
	}
	if r.mode == Safe {
		need := safeNeed(seq, l.depth)
		if n > l.lay.inline {
			// A bulk message reuses area slotOf(seq, bulks), whose
			// previous user is message seq-bulks.
			need = safeNeed(seq, l.bulks)
		}
		if l.acked < need {
			if !wait {
				if l.acked = atomic.LoadUint64(l.ackWord); l.acked < need {
					return 0, false, nil
				}
			} else if err := l.waitAck(r, need); err != nil {
				return 0, false, err
			}
		}
	}
	k := slotOf(seq, l.depth)
	if n > l.lay.inline {
		if cap(l.hbuf) < len(hdr) {
			l.hbuf = make([]byte, len(hdr))
		}
		h := append(l.hbuf[:0], hdr...)
		err = l.putBulk(r, k, slotOf(seq, l.bulks), seq, h, data)
	} else {
		encodeSlot2(l.stage, seq, hdr, data)
		err = l.putSlot(k, seq, offPayload+n, true)
	}
	if err != nil {
		return 0, false, fmt.Errorf("ring: Send of message %d (%d bytes) on lane %d→%d: %w", seq, n, l.lane.From, l.lane.To, err)
	}
	if l.ringBell {
		if err := ringDoorbell(l.bell, l.lane.To); err != nil {
			return 0, false, fmt.Errorf("ring: Send of message %d on lane %d→%d: doorbell: %w", seq, l.lane.From, l.lane.To, err)
		}
	}
	if early > 0 {
		l.early = append(l.early, seq)
	}
	l.next++
	return seq, true, nil
}

// ringDoorbell adds one to PE to's doorbell word bell, after whatever
// this PE sent to it before (the message whose arrival it announces). It
// is a PutSignal of no data whose signal is the add: over TCP netmesh
// writes it at once, in order after the message, without a round trip.
// (A non-fetching AtomicAdd also asks for no reply, but netmesh corks it
// like a small put, so it would leave only with this PE's next frame or
// wait, or after netmesh's corkDelay, while the receiver sleeps on the
// doorbell.)
func ringDoorbell(bell shmem.Sym[uint64], to int) error {
	return shmem.PutSignal(bell.Slice(0, 0), nil, bell, 1, shmem.SignalAdd, to)
}

// putSlot puts the slot image in the staging slot, whose header and
// inline bytes are its first used bytes, into slot k in To's heap: the
// head (or the whole slot), after the tail alone when slotPut says so.
// With signal, the head's put is a PutSignal that publishes seq in the
// lane's pub word, after the data (PutSignal orders them).
func (l *sendLane) putSlot(k int, seq uint64, used int, signal bool) error {
	slot := l.slot(k)
	head, tail := slotPut(l.lay.slotSize, used)
	if tail {
		t := l.lay.slotSize - tailSize
		if err := shmem.Put(slot.Slice(t, l.lay.slotSize), l.stage[t:], l.lane.To); err != nil {
			return err
		}
	}
	if signal {
		return l.publish(slot.Slice(0, head), l.stage[:head], seq, used)
	}
	return shmem.Put(slot.Slice(0, head), l.stage[:head], l.lane.To)
}

// corkNext says whether publish corks the lane's next message, of n
// bytes, and records that it is sent. The lane's mutex is held.
func (l *sendLane) corkNext(n int) bool {
	if !l.cork || n > corkMax {
		return false
	}
	w := l.waits.Load()
	corked := w == l.lastWaits
	l.lastWaits = w
	return corked
}

// corkMax is the largest message a corked lane publishes corked: up to
// it netmesh copies a blocking Put and leaves it in the send queue
// (its copyMax, docs/memory-model.md "Puts over TCP"); a longer Put is
// written before it returns, and a signal corked after it would only
// lag behind its data.
const corkMax = 2 << 10

// publish puts src (the last part of message seq, whose slot image and
// payload are n bytes) into dst on To and then sets the lane's pub word
// to seq, the signal that the message is complete. Normally that is one
// PutSignal, which netmesh writes to the socket at once: one system call
// per message. On a corked lane (cork) a message of up to corkMax bytes
// that follows the lane's previous message with no wait of the sender
// for a message between them (a Send in a run of Sends: a wait for
// room in the lane does not count) is a blocking Put and a
// non-fetching AtomicSet instead, in that order to one target, so
// applied in that order (docs/memory-model.md, "Ordering over TCP").
// Both are copied into the link's send queue and leave together with
// the next frame this PE writes to To (such as the next uncorked
// message), with this PE's next wait (shmem's waits over TCP begin with
// netmesh's Mesh.Push), or after netmesh's corkDelay. So a window of
// eager Sends leaves in a few writes, not one each, while a message
// sent after a receive's wait (the reply of a ping-pong, the first of a
// window) is written at once, as before.
func (l *sendLane) publish(dst shmem.Sym[byte], src []byte, seq uint64, n int) error {
	if !l.corkNext(n) {
		return shmem.PutSignal(dst, src, l.pub, seq, shmem.SignalSet, l.lane.To)
	}
	if err := shmem.Put(dst, src, l.lane.To); err != nil {
		return err
	}
	return shmem.AtomicSet(l.pub, 0, seq, l.lane.To)
}

// splitMin is the least padding between a slot image's head and its
// tail for which Send puts the two apart rather than the whole slot: a
// second put costs about what copying a few cache lines does.
const splitMin = 256

// slotPut says how Send puts the image of a slot of size bytes whose
// header and inline bytes are its first used bytes: the first head bytes
// with the signal, and, when tail is set, the tail word apart before
// them (the padding between is stale and never read). A small message in
// a large slot (a Comm's 8 bytes in a 1088-byte slot) thus moves two
// cache lines' worth, not the whole slot.
func slotPut(size, used int) (head int, tail bool) {
	if size-used-tailSize >= splitMin {
		return used, true
	}
	return size, false
}

// waitAck waits until the receiver has acknowledged message need. It
// gives up with ErrPeerLost once the receiver has begun Finalize
// without that acknowledgement (shmem's PE.Departed, read before the
// ack word: every acknowledgement made before its Finalize is here).
func (l *sendLane) waitAck(r *Ring, need uint64) error {
	gone := r.pe.Departed(l.lane.To)
	l.acked = atomic.LoadUint64(l.ackWord)
	for waited := false; l.acked < need; {
		if gone {
			return fmt.Errorf("ring: Send on lane %d→%d waiting for PE %d to acknowledge message %d: PE %d has begun Finalize: %w",
				l.lane.From, l.lane.To, l.lane.To, need, l.lane.To, shmem.ErrPeerLost)
		}
		if !waited {
			r.waits.Add(1)
			waited = true
		}
		start := time.Now()
		want := [1]uint64{need}
		_, err := shmem.WaitUntilAnyVectorFrom(l.ack, nil, shmem.CmpGE, want[:], l.lane.To)
		r.waitNs.Add(int64(time.Since(start)))
		if err != nil {
			return fmt.Errorf("ring: Send on lane %d→%d waiting for PE %d to acknowledge message %d: %w",
				l.lane.From, l.lane.To, l.lane.To, need, err)
		}
		gone = r.pe.Departed(l.lane.To)
		l.acked = atomic.LoadUint64(l.ackWord)
	}
	if l.acked >= l.next {
		return fmt.Errorf("ring: lane %d→%d: PE %d acknowledged message %d, but only %d were sent: %w",
			l.lane.From, l.lane.To, l.lane.To, l.acked, l.next-1, shmem.ErrProtocol)
	}
	return nil
}

// recvLane is the receiving end of a lane, on its To PE. Its fields
// after the layout are guarded by Ring.rmu.
type recvLane struct {
	lane  Lane
	depth uint64
	bulks uint64 // bulk areas: depth, or fewer (layout.go)
	lay   laneLayout
	mode  Mode
	// mem is this PE's data object; slot k is mem[slotsOff+k*slotSize:]
	// and bulk area k mem[bulkOff+k*bulkSize:].
	mem     []byte
	pubWord *uint64           // this PE's copy of the lane's pub word
	pub     shmem.Sym[uint64] // the same word, for WaitUntil
	ack     shmem.Sym[uint64] // the sender's ack word for this lane
	scratch []byte            // Raw mode: a copy of a slot, validated before delivery

	next   uint64 // the next expected sequence number
	given  uint64 // highest sequence number handed to the user or skipped
	acked  uint64 // highest sequence number acknowledged
	broken error  // set once a Safe lane was found lapped: every later poll fails
}

func (l *recvLane) slot(k int) []byte {
	off := l.lay.slotsOff + k*l.lay.slotSize
	return l.mem[off : off+l.lay.slotSize : off+l.lay.slotSize]
}

// slotWords are the first and the last word of the slot message seq
// lands in: its seq and its tail, the first and last cache lines a
// message's reader loads (one line when the slot is one line long).
// The waits load them while they spin (spinFor, engine.spinFor).
func (l *recvLane) slotWords(seq uint64) [2]*uint64 {
	s := l.slot(slotOf(seq, l.depth))
	return [2]*uint64{(*uint64)(unsafe.Pointer(&s[0])), (*uint64)(unsafe.Pointer(&s[len(s)-tailSize]))}
}

func (l *recvLane) bulkArea(k int) []byte {
	off := l.lay.bulkOff + k*l.lay.bulkSize
	return l.mem[off : off+l.lay.bulkSize : off+l.lay.bulkSize]
}

// What take found for the expected message.
type outcome uint8

const (
	tookIt  outcome = iota // the message was delivered
	skipped                // lost (Raw, lapped) or corrupt: next advanced past it
	failed                 // the lane is broken
)

// poll appends up to limit of the lane's next messages to out, in
// order. It reads only this PE's memory: first the lane's pub word,
// which the sender sets to seq after message seq's put is complete
// (PutSignal), then the slots of the messages pub says are complete.
// A slot whose put may still be in progress is not looked at: it is
// not ready. It returns the messages it could deliver together with an
// error when it met corruption or a broken lane.
func (l *recvLane) poll(r *Ring, out []Message, limit int) ([]Message, error) {
	if l.broken != nil {
		return out, l.broken
	}
	start := l.next
	p := atomic.LoadUint64(l.pubWord)
	for taken := 0; taken < limit && l.next <= p; {
		e := l.next
		m, oc, err := l.take(r, e, p)
		switch oc {
		case tookIt:
			out = append(out, m)
			l.next = e + 1
			taken++
		case skipped:
			if err != nil {
				l.polled(r, start)
				return out, err
			}
		case failed:
			l.polled(r, start)
			return out, err
		}
	}
	l.polled(r, start)
	return out, nil
}

// polled ends a poll that began at sequence number start: what it
// advanced counts as given, and towards Stats().MaxLag. (Not a deferred
// closure: a poll is on every message's path.)
func (l *recvLane) polled(r *Ring, start uint64) {
	l.given = l.next - 1
	if adv := l.next - start; adv > 0 {
		for {
			old := r.maxLag.Load()
			if adv <= old || r.maxLag.CompareAndSwap(old, adv) {
				break
			}
		}
	}
}

// take delivers message e, which pub (loaded before the slot is read)
// says was put completely. A slot that then does not hold a valid image
// of e within the lane's bounds is judged:
//
//   - Safe mode: nothing can have overwritten it, since the sender waits
//     for an ack of e first. Holding a later message, the lane was
//     lapped: the lane is broken. Otherwise it is corrupt: counted,
//     reported, skipped.
//   - Raw mode: it was overwritten (or is being) if pub, loaded after the
//     read, has reached e+Depth-1, after which the sender starts the
//     message that reuses the slot: e and every message up to the newest
//     Depth are lost. Otherwise it is corrupt.
func (l *recvLane) take(r *Ring, e, p uint64) (Message, outcome, error) {
	k := slotOf(e, l.depth)
	live := l.slot(k)
	if m, ok := l.accept(e, k, live); ok {
		return m, tookIt, nil
	}
	v, st := decodeSlot(live)
	if l.mode == Raw {
		if p2 := atomic.LoadUint64(l.pubWord); p2 >= e+l.depth-1 {
			// Messages up to p2 are complete; the newest Depth of them
			// are p2-Depth+1..p2, and e, whose slot is being or was
			// reused, is gone in any case.
			nxt := max(e+1, p2-l.depth+1)
			r.lost.Add(nxt - e)
			l.next = nxt
			return Message{}, skipped, nil
		}
	} else if st == slotOK && v.seq > e && (v.seq-e)%l.depth == 0 {
		l.broken = fmt.Errorf("ring: Safe lane %d→%d was lapped: slot %d holds message %d while message %d was never delivered (unacknowledged slots were overwritten): %w",
			l.lane.From, l.lane.To, k, v.seq, e, shmem.ErrProtocol)
		return Message{}, failed, l.broken
	}
	r.corrupt.Add(1)
	l.next = e + 1
	why := st.String()
	if st == slotOK {
		switch {
		case v.seq != e:
			why = fmt.Sprintf("holds message %d", v.seq)
		case v.bulk && l.mode == Raw && l.lay.bulkSize > 0 && v.n <= l.lane.Capacity:
			why = "its bulk payload does not match the CRC in the slot"
		default:
			why = fmt.Sprintf("length %d (bulk %v) out of the lane's bounds", v.n, v.bulk)
		}
	}
	return Message{}, skipped, fmt.Errorf("ring: lane %d→%d: message %d in slot %d is corrupt (%s) although its put completed (pub %d); it is skipped: %w",
		l.lane.From, l.lane.To, e, k, why, p, shmem.ErrProtocol)
}

// accept delivers message e if slot k holds a valid image of it whose
// length is within the lane's bounds. In Safe mode the message's Data
// aliases the slot (or bulk area), which the sender does not reuse until
// it is acknowledged. In Raw mode the sender may overwrite at any time,
// so the slot is copied first and the copy is what is checked and
// delivered.
func (l *recvLane) accept(e uint64, k int, live []byte) (Message, bool) {
	img := live
	if l.mode == Raw {
		img = l.snapshot(live)
	}
	v, st := decodeSlot(img)
	if st != slotOK || v.seq != e {
		return Message{}, false
	}
	m := Message{Origin: l.lane.From, Seq: e}
	switch {
	case !v.bulk && v.n <= l.lay.inline:
		m.Data = v.payload
		if l.mode == Raw {
			m.Data = append([]byte(nil), v.payload...)
		}
	case v.bulk && l.lay.bulkSize > 0 && v.n <= l.lane.Capacity:
		data, ok := l.takeBulk(slotOf(e, l.bulks), v.n, binary.LittleEndian.Uint32(v.payload))
		if !ok {
			return Message{}, false
		}
		m.Data = data
	default:
		return Message{}, false
	}
	return m, true
}

// snapshot copies the parts of a live slot that decodeSlot reads into
// the lane's scratch slot: the header, the inline payload its length
// word claims (bounded by the slot), and the tail.
func (l *recvLane) snapshot(live []byte) []byte {
	s := l.scratch
	copy(s[:offPayload], live[:offPayload])
	n := bulkInline
	if w := binary.LittleEndian.Uint32(s[offWord:]); w&bulkFlag == 0 {
		n = min(int(w), len(s)-slotFixed)
	}
	copy(s[offPayload:offPayload+n], live[offPayload:offPayload+n])
	copy(s[len(s)-tailSize:], live[len(live)-tailSize:])
	return s
}
