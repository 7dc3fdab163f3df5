package heap

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"
)

// The segment layout is shared between processes of one job (and must
// match docs/shared-memory.md): every constant is pinned here, and a
// written header is checked byte by byte.
func TestLayoutConstants(t *testing.T) {
	pins := []struct {
		name      string
		got, want uint64
	}{
		{"HeaderMagic", HeaderMagic, 0x314D454D48534F47},
		{"LayoutVersion", LayoutVersion, 2},
		{"HdrMagicOff", HdrMagicOff, 0},
		{"HdrVersionOff", HdrVersionOff, 8},
		{"HdrRankOff", HdrRankOff, 12},
		{"HdrSizeOff", HdrSizeOff, 16},
		{"HdrHeapOff", HdrHeapOff, 24},
		{"HdrPidOff", HdrPidOff, 32},
		{"WakeOff", WakeOff, 64},
		{"SleepOff", SleepOff, 128},
		{"AgreeOff", AgreeOff, 192},
		{"TableOff", TableOff, 256},
		{"SleepSlots", SleepSlots, 16},
		{"TeamsOff", TeamsOff, 4096},
		{"MaxTeams", MaxTeams, 256},
		{"TeamSlotSize", TeamSlotSize, 131072},
		{"MaxRounds", MaxRounds, 32},
		{"FlagStride", FlagStride, 64},
		{"TeamScratchOff", TeamScratchOff, 2048},
		{"TeamScratchLen", TeamScratchLen, 512},
		{"DebugEnteredOff", DebugEnteredOff, 8},
		{"HeapBase", HeapBase, 33619968},
		{"FlagOff(3, 5)", FlagOff(3, 5), 4096 + 3*131072 + 5*64},
		{"ScratchOff(2)", ScratchOff(2), 4096 + 2*131072 + 2048},
	}
	for _, p := range pins {
		if p.got != p.want {
			t.Errorf("%s = %d, want %d", p.name, p.got, p.want)
		}
	}
	var magic [8]byte
	binary.LittleEndian.PutUint64(magic[:], HeaderMagic)
	if string(magic[:]) != "GOSHMEM1" {
		t.Errorf("HeaderMagic reads %q, want GOSHMEM1", magic[:])
	}
	// The sleep table fits between TableOff and the team slots.
	if TableOff+SleepSlots*8 > TeamsOff || AgreeOff+64 > TableOff {
		t.Error("reserved words overlap")
	}

	seg, err := Create(HeapBase + 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	seg.WriteHeader(7, 12345)
	b := seg.Bytes()
	le := binary.LittleEndian
	if string(b[0:8]) != "GOSHMEM1" || le.Uint32(b[8:]) != 2 || le.Uint32(b[12:]) != 7 ||
		le.Uint64(b[16:]) != uint64(len(b)) || le.Uint64(b[24:]) != HeapBase || le.Uint32(b[32:]) != 12345 {
		t.Fatalf("header bytes % x", b[:40])
	}
	if m, want := CPUMask(b), affinity(); m != want || m == ([CPUWords]uint64{}) {
		t.Fatalf("CPU mask %x, want %x (this thread's affinity, not empty)", m, want)
	}
	if !seg.CheckHeader(7) || seg.CheckHeader(6) {
		t.Fatal("CheckHeader")
	}
}

// A retired segment's old slice stays usable, and no longer shares
// memory with the segment's other mappings.
func TestRetire(t *testing.T) {
	seg, err := Create(HeapBase + 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	other, err := Map(dupFD(t, seg.FD()), seg.Size())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	b := seg.Bytes()
	b[HeapBase] = 7
	if other.Bytes()[HeapBase] != 7 {
		t.Fatal("the two mappings do not share memory")
	}
	if err := seg.Retire(); err != nil {
		t.Fatal(err)
	}
	if seg.Bytes() != nil || seg.FD() != -1 || seg.Close() != nil {
		t.Fatal("a retired segment still has its mapping or descriptor")
	}
	if b[HeapBase] != 0 {
		t.Fatalf("the retired slice reads %d, want the zero of fresh private memory", b[HeapBase])
	}
	b[HeapBase+1] = 9 // a store through the old slice: no fault, not shared
	if other.Bytes()[HeapBase] != 7 || other.Bytes()[HeapBase+1] != 0 {
		t.Fatal("a store through the retired slice reached the shared memory")
	}
}

func dupFD(t *testing.T, fd int) int {
	t.Helper()
	d, err := unix.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
