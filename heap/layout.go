package heap

import (
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// The layout of a segment. Every PE's segment has the same layout, so a
// reserved word has the same offset on every PE, like any symmetric
// object. docs/shared-memory.md holds the normative version of this table.
//
// All words are little-endian (the byte order of the hosts goshmem
// runs on), written and read with the atomic helpers of atomic.go.
//
//	offset            width   meaning
//	0                 8       magic "GOSHMEM1" (HeaderMagic), written by the owner at creation
//	8                 4       layout version (LayoutVersion)
//	12                4       owner's rank in the job
//	16                8       segment size in bytes
//	24                8       HeapBase: where the user heap starts
//	32                4       owner's process id
//	36                28      zero
//	WakeOff  = 64     4       wake word: incremented by every waker of the
//	                          owner's sleepers before it writes the owner's
//	                          eventfd (Waker.Wake, Sleeper.Sleep)
//	SleepOff = 128    8       sleep word: bits 0..15, the sleep-table slots in
//	                          use; bits 32..63, sleepers the table had no room
//	                          for (they watch everything). Zero: nobody sleeps.
//	AgreeOff = 192    64      collective-call descriptor checked under SHMEM_DEBUG
//	TableOff = 256    16*8    sleep table: what each sleeper watches, as
//	                          offset<<20 | length (length 0xFFFFF: to the end
//	                          of the segment; 0: an empty entry)
//	HdrCPUsOff = 384  128     the owner's CPU affinity when it created the
//	                          segment: bit i of word i/64 set when it may
//	                          run on CPU i (CPUs 0..1023); all zero: unknown
//	FloorMaxOff       32*8    the floor exchange of world allocations
//	= 512                     (shmem/teamheap.go): round r's word, written
//	                          only by the PE 2^r below the owner (mod
//	                          NPEs): exchange number mod 2^16 << 48 | the
//	                          most bytes any PE it has heard of has in
//	                          team blocks at the top of its heap
//	FinalizingOff     3328    the finalizing bitmap: bit r%64 of word r/64
//	= 768                     set (atomic or) by PE r once it has begun
//	                          Finalize, after every store it made in its
//	                          earlier collective calls (shmem/lifecycle.go);
//	                          PEs from FinalizingMax on have no bit
//	TeamsOff = 4096   MaxTeams * TeamSlotSize: team slots, see below
//	HeapBase          heap    the symmetric heap managed by the Allocator
//
// A team slot (TeamSlotSize bytes, at TeamsOff + slot*TeamSlotSize):
//
//	offset            width   meaning
//	0                 32*64   barrier flags: an 8-byte word at r*64. A team
//	                          that syncs flat (shmem: one host, at most 16
//	                          members): flag j, written only by member j.
//	                          Otherwise round r's flag of the dissemination
//	                          barrier, written only by the member that
//	                          signals this member in round r. Writers store
//	                          the barrier epoch; waits are for flag >= epoch
//	8                 8       in flag 0's line, under SHMEM_DEBUG: the member's
//	                          count of collective calls entered on the team
//	                          (DebugEnteredOff), written only by the member
//	TeamScratchOff    512     split/agreement scratch: the member's call
//	                          descriptor and its free-slot bitmap
//	2560              128512  the collective area (shmem.Team.CollectiveArea:
//	                          40 control words, then 128192 bytes of message
//	                          buffers; laid out by package collective, zeroed with the
//	                          flags when the team is destroyed)
const (
	HeaderMagic   = 0x314D454D48534F47 // "GOSHMEM1" read as a little-endian uint64
	LayoutVersion = 2                  // 2: 256 team slots of 128 KiB (1: 1024 of 4 KiB)

	HdrMagicOff   = 0
	HdrVersionOff = 8
	HdrRankOff    = 12
	HdrSizeOff    = 16
	HdrHeapOff    = 24
	HdrPidOff     = 32
	HdrCPUsOff    = 384 // CPUWords little-endian words: the owner's affinity mask
	CPUWords      = 16  // 1024 CPUs

	FloorMaxOff   = 512            // MaxRounds words
	FinalizingOff = 768            // the finalizing bitmap
	FinalizingLen = TeamsOff - 768 // its bytes
	FinalizingMax = FinalizingLen * 8

	WakeOff      = 64
	SleepOff     = 128
	AgreeOff     = 192
	TableOff     = 256
	SleepSlots   = 16
	tableLenBits = 20

	TeamsOff = 4096
	// MaxTeams live team slots per PE, including the world and shared
	// teams (api.md asks for at least 64).
	MaxTeams = 256
	// TeamSlotSize is 128 KiB so that the collective area holds a
	// message of many KiB per member: a small collective is then one
	// exchange (over TCP up to 15960 bytes on 4 members, on one host up
	// to 2 KiB: docs/collectives.md). The slots cost address space, and
	// memory only where a team has written.
	TeamSlotSize   = 131072
	MaxRounds      = 32 // dissemination rounds: teams of up to 2^32 PEs
	FlagStride     = 64
	TeamScratchOff = MaxRounds * FlagStride // 2048
	TeamScratchLen = 512

	// In a team slot, in the otherwise unused rest of flag 0's line.
	DebugEnteredOff = 8

	// HeapBase is where the user heap starts: after the team slots, on a
	// 64 KiB boundary.
	HeapBase = (TeamsOff + MaxTeams*TeamSlotSize + 0xFFFF) &^ 0xFFFF
)

// TeamSlotOff is the offset of team slot i.
func TeamSlotOff(i int) uint64 { return TeamsOff + uint64(i)*TeamSlotSize }

// FlagOff is the offset of round r's barrier flag in team slot i.
func FlagOff(slot, round int) uint64 { return TeamSlotOff(slot) + uint64(round)*FlagStride }

// ScratchOff is the offset of team slot i's scratch area.
func ScratchOff(slot int) uint64 { return TeamSlotOff(slot) + TeamScratchOff }

// WriteHeader fills the header of a freshly created segment.
func (s *Segment) WriteHeader(rank int, pid int) {
	Store64(s.mem, HdrSizeOff, uint64(len(s.mem)))
	Store64(s.mem, HdrHeapOff, HeapBase)
	*Ptr32(s.mem, HdrVersionOff) = LayoutVersion
	*Ptr32(s.mem, HdrRankOff) = uint32(rank)
	*Ptr32(s.mem, HdrPidOff) = uint32(pid)
	for i, w := range affinity() {
		Store64(s.mem, HdrCPUsOff+8*uint64(i), w)
	}
	Store64(s.mem, HdrMagicOff, HeaderMagic) // last: a reader that sees the magic sees the rest
}

// CPUMask is the affinity mask the owner of segment memory mem (its
// whole mapping, header included) published at creation: bit i of word
// i/64 set when the owner could run on CPU i; all zero when it could not
// tell (or mem is too short to hold it).
func CPUMask(mem []byte) (m [CPUWords]uint64) {
	if len(mem) < HdrCPUsOff+8*CPUWords {
		return m
	}
	for i := range m {
		m[i] = Load64(mem, HdrCPUsOff+8*uint64(i))
	}
	return m
}

// CheckHeader verifies a peer's segment header: magic, version, rank and
// size must be what the bootstrap table said.
func (s *Segment) CheckHeader(rank int) bool {
	return len(s.mem) > HeapBase &&
		Load64(s.mem, HdrMagicOff) == HeaderMagic &&
		*Ptr32(s.mem, HdrVersionOff) == LayoutVersion &&
		*Ptr32(s.mem, HdrRankOff) == uint32(rank) &&
		Load64(s.mem, HdrSizeOff) == uint64(len(s.mem)) &&
		Load64(s.mem, HdrHeapOff) == HeapBase
}

// SleepEntry packs a watched byte range into a sleep-table entry.
func SleepEntry(off, n uint64) uint64 {
	const maxLen = 1<<tableLenBits - 1
	return off<<tableLenBits | min(max(n, 1), maxLen)
}

// Watched reports whether a write of n bytes at off of the segment mem
// touches a range one of its owner's sleepers watches. Writers call it
// after their store and a full fence; when nobody sleeps it is one load.
func Watched(mem []byte, off, n uint64) bool {
	v := atomic.LoadUint64((*uint64)(unsafe.Pointer(unsafe.SliceData(mem[SleepOff : SleepOff+8]))))
	if v == 0 {
		return false
	}
	if v>>32 != 0 {
		return true
	}
	const maxLen = 1<<tableLenBits - 1
	tbl := sleepTable(mem)
	for m := uint32(v); m != 0; m &= m - 1 {
		e := atomic.LoadUint64(&tbl[bits.TrailingZeros32(m)])
		if e == 0 {
			continue
		}
		eo, el := e>>tableLenBits, e&maxLen
		if eo < off+n && (el == maxLen || off < eo+el) {
			return true
		}
	}
	return false
}
