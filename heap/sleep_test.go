package heap

import "testing"

func TestSleepTable(t *testing.T) {
	mem := make([]byte, HeapBase+4096)
	if Watched(mem, HeapBase, 8) {
		t.Fatal("an empty table watches something")
	}
	tok := BeginSleep(mem, HeapBase+64, 8)
	for _, c := range []struct {
		off, n uint64
		want   bool
	}{
		{HeapBase + 64, 8, true}, {HeapBase + 60, 8, true}, {HeapBase + 71, 1, true},
		{HeapBase + 72, 8, false}, {HeapBase + 56, 8, false}, {HeapBase, 4096, true},
	} {
		if got := Watched(mem, c.off, c.n); got != c.want {
			t.Errorf("write of %d bytes at %d: watched %v, want %v", c.n, c.off, got, c.want)
		}
	}
	EndSleep(mem, tok)
	if Watched(mem, HeapBase+64, 8) || Load64(mem, SleepOff) != 0 {
		t.Fatal("EndSleep left the range watched")
	}
	// A full table: the next sleeper watches everything.
	var toks []uint64
	for i := 0; i < SleepSlots; i++ {
		toks = append(toks, BeginSleep(mem, HeapBase+uint64(i)*8, 8))
	}
	wild := BeginSleep(mem, HeapBase+4000, 8)
	if wild != 0 || !Watched(mem, 0, 1) {
		t.Fatalf("overflow sleeper: token %d, watched %v", wild, Watched(mem, 0, 1))
	}
	EndSleep(mem, wild)
	if Watched(mem, HeapBase+4000, 8) {
		t.Fatal("overflow sleeper still counted")
	}
	for _, tk := range toks {
		EndSleep(mem, tk)
	}
	if Load64(mem, SleepOff) != 0 {
		t.Fatalf("sleep word %x after every sleeper left", Load64(mem, SleepOff))
	}
}
