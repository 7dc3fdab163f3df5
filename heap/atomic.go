// Atomics on words of mapped segments: the one audited place where
// goshmem reads and writes shared words that other PEs (other goroutines
// of this process, other processes, or the netmesh reader applying a
// remote PE's request) touch at the same time.
//
// Assumptions: the caller has checked that off+width is inside the
// segment and that off is a multiple of width (the allocator aligns every
// block to the cache line, and element offsets are multiples of the
// element size). sync/atomic operations are sequentially consistent, so a
// same-host atomic and a remote atomic applied by the netmesh reader on
// the same word are coherent: both are hardware atomics on the mapping.
// The race detector does not instrument this memory.

package heap

import (
	"sync/atomic"
	"unsafe"
)

// AtomicOp names an atomic operation on a mapped word. The wire has its
// own op codes (netmesh.AtomicOp, which must not depend on heap); shmem
// maps one to the other by name, and netmesh's tests check that the
// numbers agree too.
type AtomicOp uint8

const (
	OpFetch    AtomicOp = 0x01 // return the word
	OpSet      AtomicOp = 0x02 // store v
	OpSwap     AtomicOp = 0x03 // store v, return the old word
	OpCSwap    AtomicOp = 0x04 // if word == cond store v; return the old word
	OpFetchAdd AtomicOp = 0x05 // add v, return the old word
	OpFetchAnd AtomicOp = 0x06 // and v, return the old word
	OpFetchOr  AtomicOp = 0x07 // or v, return the old word
	OpFetchXor AtomicOp = 0x08 // xor v, return the old word
)

// Valid reports whether op is one of the defined operations.
func (op AtomicOp) Valid() bool { return op >= OpFetch && op <= OpFetchXor }

func (op AtomicOp) String() string {
	switch op {
	case OpFetch:
		return "fetch"
	case OpSet:
		return "set"
	case OpSwap:
		return "swap"
	case OpCSwap:
		return "compare-swap"
	case OpFetchAdd:
		return "fetch-add"
	case OpFetchAnd:
		return "fetch-and"
	case OpFetchOr:
		return "fetch-or"
	case OpFetchXor:
		return "fetch-xor"
	}
	return "unknown-op"
}

// Word64 returns the 8-byte word at off.
func (s *Segment) Word64(off uint64) *uint64 { return (*uint64)(s.addr(off)) }

// Word32 returns the 4-byte word at off.
func (s *Segment) Word32(off uint64) *uint32 { return (*uint32)(s.addr(off)) }

// Atomic64 applies op to the 8-byte word at p and returns the old value
// (for OpSet, the value is undefined and callers ignore it).
func Atomic64(p *uint64, op AtomicOp, v, cond uint64) uint64 {
	switch op {
	case OpFetch:
		return atomic.LoadUint64(p)
	case OpSet:
		atomic.StoreUint64(p, v)
		return 0
	case OpSwap:
		return atomic.SwapUint64(p, v)
	case OpCSwap:
		for {
			old := atomic.LoadUint64(p)
			if old != cond {
				return old
			}
			if atomic.CompareAndSwapUint64(p, cond, v) {
				return old
			}
		}
	case OpFetchAdd:
		return atomic.AddUint64(p, v) - v
	case OpFetchAnd:
		return atomic.AndUint64(p, v)
	case OpFetchOr:
		return atomic.OrUint64(p, v)
	case OpFetchXor:
		for {
			old := atomic.LoadUint64(p)
			if atomic.CompareAndSwapUint64(p, old, old^v) {
				return old
			}
		}
	}
	panic("heap: Atomic64 with invalid op " + op.String() + " (callers check Valid)")
}

// Atomic32 is Atomic64 for a 4-byte word.
func Atomic32(p *uint32, op AtomicOp, v, cond uint32) uint32 {
	switch op {
	case OpFetch:
		return atomic.LoadUint32(p)
	case OpSet:
		atomic.StoreUint32(p, v)
		return 0
	case OpSwap:
		return atomic.SwapUint32(p, v)
	case OpCSwap:
		for {
			old := atomic.LoadUint32(p)
			if old != cond {
				return old
			}
			if atomic.CompareAndSwapUint32(p, cond, v) {
				return old
			}
		}
	case OpFetchAdd:
		return atomic.AddUint32(p, v) - v
	case OpFetchAnd:
		return atomic.AndUint32(p, v)
	case OpFetchOr:
		return atomic.OrUint32(p, v)
	case OpFetchXor:
		for {
			old := atomic.LoadUint32(p)
			if atomic.CompareAndSwapUint32(p, old, old^v) {
				return old
			}
		}
	}
	panic("heap: Atomic32 with invalid op " + op.String() + " (callers check Valid)")
}

// AtomicAt applies op to the width-byte word at off of mem (width 4 or 8).
func AtomicAt(mem []byte, off uint64, width int, op AtomicOp, v, cond uint64) uint64 {
	p := unsafe.Pointer(unsafe.SliceData(mem[off:]))
	if width == 4 {
		return uint64(Atomic32((*uint32)(p), op, uint32(v), uint32(cond)))
	}
	return Atomic64((*uint64)(p), op, v, cond)
}

// Load64 is an atomic load of the 8-byte word at off of mem.
func Load64(mem []byte, off uint64) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(unsafe.SliceData(mem[off:]))))
}

// Load32 is an atomic load of the 4-byte word at off of mem.
func Load32(mem []byte, off uint64) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(unsafe.SliceData(mem[off:]))))
}

// Store64 is an atomic store to the 8-byte word at off of mem.
func Store64(mem []byte, off uint64, v uint64) {
	atomic.StoreUint64((*uint64)(unsafe.Pointer(unsafe.SliceData(mem[off:]))), v)
}

// Ptr32 returns the 4-byte word at off of mem, for the header's words,
// the wake word and the lock words.
func Ptr32(mem []byte, off uint64) *uint32 {
	return (*uint32)(unsafe.Pointer(unsafe.SliceData(mem[off:])))
}

// sleepTable is the sleep table of the segment mem.
func sleepTable(mem []byte) *[SleepSlots]uint64 {
	return (*[SleepSlots]uint64)(unsafe.Pointer(unsafe.SliceData(mem[TableOff : TableOff+8*SleepSlots])))
}

// BeginSleep announces that a goroutine of the segment's owner is about
// to sleep until the n bytes at off change. It records the range in a
// free sleep-table slot and then sets the slot's bit in the sleep word
// (a full fence), so a writer that stores first and then reads the sleep
// word after a fence either sees the sleeper or is seen by its next check.
// The token goes to EndSleep.
func BeginSleep(mem []byte, off, n uint64) uint64 {
	word := (*uint64)(unsafe.Pointer(unsafe.SliceData(mem[SleepOff : SleepOff+8])))
	tbl := sleepTable(mem)
	e := SleepEntry(off, n)
	for i := range tbl {
		if atomic.LoadUint64(&tbl[i]) == 0 && atomic.CompareAndSwapUint64(&tbl[i], 0, e) {
			atomic.OrUint64(word, 1<<i)
			return uint64(i) + 1
		}
	}
	atomic.AddUint64(word, 1<<32) // no room: watch everything
	return 0
}

// EndSleep withdraws what BeginSleep announced.
func EndSleep(mem []byte, token uint64) {
	word := (*uint64)(unsafe.Pointer(unsafe.SliceData(mem[SleepOff : SleepOff+8])))
	if token == 0 {
		atomic.AddUint64(word, ^uint64(1<<32-1)) // minus 1<<32
		return
	}
	atomic.AndUint64(word, ^(uint64(1) << (token - 1)))
	atomic.StoreUint64(&sleepTable(mem)[token-1], 0)
}
