package ring

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"

	"github.com/goshmem/goshmem/shmem"
)

// Limits on a lane. They keep every size computation far from overflow
// and a length inside the slot's 31-bit length field.
const (
	MaxDepth    = 1 << 20 // slots per lane
	MaxCapacity = 1 << 30 // bytes per message
)

// The ring's symmetric memory is two objects, allocated by New on every
// PE with the same sizes (the largest any PE needs):
//
// words (uint64 elements), per PE p, in entries of one cache line each
// so that words written by different PEs never share a line:
//
//	entry 0                  doorbell: every sender to p adds one per message,
//	                         when p has more than one incoming lane (Recv sleeps on it)
//	entry 1+i                pub of p's i-th incoming lane: the sender sets it to
//	                         seq after each message's put (the signal of PutSignal)
//	entry 1+in(p)+j          ack of p's j-th outgoing lane: the receiver adds to it;
//	                         it holds the highest seq acknowledged (Safe mode)
//
// data (bytes), per PE p, for each incoming lane in the order of the
// lanes slice: Depth slots of slotSize bytes, then, when the lane's
// Capacity is above its inline capacity, B bulk areas of Capacity
// bytes rounded up to the cache line. B is Depth (bulk area k belongs
// to slot k) unless the ring was made with fewer bulk areas (a Comm's
// ring, Safe mode only): then bulk message seq uses area (seq-1) mod B,
// and its sender waits until message seq-B, the area's previous user,
// is acknowledged.
//
// i and j count a PE's incoming and outgoing lanes in the order of the
// lanes slice, so every PE computes every other PE's layout alike.

// laneLayout is where one lane lives.
type laneLayout struct {
	inline   int // largest payload carried in the slot itself
	slotSize int
	slotsOff int // byte offset of slot 0 in the receiver's data object
	bulkSize int // bytes per bulk area; 0 when the lane has none
	bulkOff  int // byte offset of bulk area 0 in the receiver's data object
	bulks    int // bulk areas: Depth, or fewer (see above)
	pubIdx   int // element of the pub word in the receiver's words object
	ackIdx   int // element of the ack word in the sender's words object
	inLanes  int // the receiver's number of incoming lanes
}

// layout is the whole ring's.
type layout struct {
	line      int // cache line: entry and slot alignment
	wordsLen  int // elements of the words object
	dataLen   int // bytes of the data object
	lanes     []laneLayout
	perPEData []uint64 // data bytes each PE needs (for error messages)
}

// computeLayout lays out validated lanes for npes PEs, with bulks bulk
// areas per lane (0: Depth; else at most Depth). It fails with
// ErrHeapExhausted when the ring cannot fit in a heap of heapSize bytes.
func computeLayout(lanes []Lane, npes, line, inlineMax, bulks int, heapSize uint64) (*layout, error) {
	lw := line / 8 // words per entry
	in := make([]int, npes)
	out := make([]int, npes)
	data := make([]uint64, npes)
	lay := &layout{line: line, lanes: make([]laneLayout, len(lanes)), perPEData: data}
	for i, l := range lanes {
		ll := &lay.lanes[i]
		ll.inline = min(l.Capacity, inlineMax)
		ll.slotSize = slotSize(max(ll.inline, bulkInline), line)
		ll.slotsOff = int(data[l.To])
		data[l.To] += uint64(l.Depth) * uint64(ll.slotSize)
		ll.bulks = l.Depth
		if bulks > 0 {
			ll.bulks = min(bulks, l.Depth)
		}
		if l.Capacity > ll.inline {
			ll.bulkSize = (l.Capacity + line - 1) &^ (line - 1)
			ll.bulkOff = int(data[l.To])
			data[l.To] += uint64(ll.bulks) * uint64(ll.bulkSize)
		}
		if data[l.To] > heapSize {
			return nil, fmt.Errorf("ring: the lanes into PE %d need more than %d bytes (lane %d: %d→%d, depth %d, capacity %d), more than the %d-byte symmetric heap: %w",
				l.To, data[l.To], i, l.From, l.To, l.Depth, l.Capacity, heapSize, shmem.ErrHeapExhausted)
		}
		ll.pubIdx = (1 + in[l.To]) * lw
		in[l.To]++
		out[l.From]++
	}
	entries := 0
	for p := 0; p < npes; p++ {
		entries = max(entries, 1+in[p]+out[p])
		lay.dataLen = max(lay.dataLen, int(data[p]))
	}
	lay.wordsLen = entries * lw
	// Ack entries follow each sender's pub entries.
	seen := make([]int, npes)
	for i, l := range lanes {
		lay.lanes[i].ackIdx = (1 + in[l.From] + seen[l.From]) * lw
		lay.lanes[i].inLanes = in[l.To]
		seen[l.From]++
	}
	if need := uint64(lay.dataLen) + 8*uint64(lay.wordsLen); need > heapSize {
		return nil, fmt.Errorf("ring: needs %d bytes of every PE's symmetric heap (%d of slots and bulk areas, %d of words), more than the %d-byte heap: %w",
			need, lay.dataLen, 8*lay.wordsLen, heapSize, shmem.ErrHeapExhausted)
	}
	return lay, nil
}

// validate checks lanes and mode for a job of npes PEs. Every PE that
// passes the same arguments gets the same answer.
func validate(lanes []Lane, mode Mode, npes int) error {
	if mode != Safe && mode != Raw {
		return fmt.Errorf("ring: mode %d is neither Safe (%d) nor Raw (%d): %w", int(mode), int(Safe), int(Raw), shmem.ErrInvalid)
	}
	seen := make(map[[2]int]int, len(lanes))
	for i, l := range lanes {
		if uint(l.From) >= uint(npes) || uint(l.To) >= uint(npes) {
			return fmt.Errorf("ring: lane %d (%d→%d): the job has PEs 0..%d: %w", i, l.From, l.To, npes-1, shmem.ErrBadPE)
		}
		if l.From == l.To {
			return fmt.Errorf("ring: lane %d (%d→%d) goes from a PE to itself: %w", i, l.From, l.To, shmem.ErrInvalid)
		}
		if l.Depth < 1 || l.Depth > MaxDepth {
			return fmt.Errorf("ring: lane %d (%d→%d) has depth %d, want 1..%d: %w", i, l.From, l.To, l.Depth, MaxDepth, shmem.ErrInvalid)
		}
		if l.Capacity < 1 || l.Capacity > MaxCapacity {
			return fmt.Errorf("ring: lane %d (%d→%d) has capacity %d bytes, want 1..%d: %w", i, l.From, l.To, l.Capacity, MaxCapacity, shmem.ErrInvalid)
		}
		k := [2]int{l.From, l.To}
		if j, dup := seen[k]; dup {
			return fmt.Errorf("ring: lanes %d and %d are both %d→%d (a pair of PEs has at most one lane each way): %w", j, i, l.From, l.To, shmem.ErrInvalid)
		}
		seen[k] = i
	}
	return nil
}

// validateMembers checks that every lane joins two members of team t.
func validateMembers(lanes []Lane, t *shmem.Team) error {
	member := make(map[int]bool, t.NPEs())
	for i := range t.NPEs() {
		member[t.WorldPE(i)] = true
	}
	for i, l := range lanes {
		if !member[l.From] || !member[l.To] {
			return fmt.Errorf("ring: lane %d (%d→%d) joins a PE outside the %d-PE team: %w", i, l.From, l.To, t.NPEs(), shmem.ErrBadPE)
		}
	}
	return nil
}

// The agreement descriptor each PE publishes in New.
//
//	word  meaning
//	0     descMagic: "ring" and layout version 1
//	1     FNV-1a 64 of mode, inline limit, bulk areas per lane and every lane's four fields (LE u64 each)
//	2     number of lanes
//	3     mode
//	4     inline limit
const (
	descMagic = 0x676e6972_00000001 // "ring" v1
	descWords = 5
)

func descriptor(lanes []Lane, mode Mode, inlineMax, bulks int) [descWords]uint64 {
	h := fnv.New64a()
	var b [8]byte
	put := func(v int) {
		binary.LittleEndian.PutUint64(b[:], uint64(v))
		h.Write(b[:])
	}
	put(int(mode))
	put(inlineMax)
	put(bulks)
	for _, l := range lanes {
		put(l.From)
		put(l.To)
		put(l.Depth)
		put(l.Capacity)
	}
	return [descWords]uint64{descMagic, h.Sum64(), uint64(len(lanes)), uint64(mode), uint64(inlineMax)}
}

// agree checks that every member of t passed the same lanes and mode.
// Each writes its descriptor into a small object allocated over t, all
// meet, each reads every member's, and Free (which meets again) releases
// the object. Every member reads the same set of descriptors, so either
// all succeed or all fail with ErrAsymmetric; nothing stays allocated.
func agree(t *shmem.Team, desc [descWords]uint64) error {
	pe := t.PE()
	obj, err := shmem.TeamMalloc[uint64](t, descWords)
	if err != nil {
		return err
	}
	copy(obj.Local(), desc[:])
	meet := pe.BarrierAll
	if t.NPEs() != pe.NPEs() {
		meet = t.Sync // the stores above are this PE's own: nothing to complete
	}
	if err := meet(); err != nil {
		return err
	}
	var bad error
	var got [descWords]uint64
	for i := 0; i < t.NPEs() && bad == nil; i++ {
		r := t.WorldPE(i)
		if err := shmem.Get(got[:], obj, r); err != nil {
			bad = err
			break
		}
		if got != desc {
			bad = fmt.Errorf("ring: New on PE %d has %d lanes in mode %v (lanes hash %#x), but PE %d has %d lanes in mode %v (hash %#x): %w",
				pe.MyPE(), desc[2], Mode(desc[3]), desc[1], r, got[2], Mode(got[3]), got[1], shmem.ErrAsymmetric)
		}
	}
	if err := shmem.Free(obj); err != nil && bad == nil {
		bad = err
	}
	return bad
}
