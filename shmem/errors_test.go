package shmem_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// Every user mistake gets its sentinel, changes nothing, and the next
// correct operation works.
var _ = register("error-paths", func(pe *shmem.PE) error {
	me, np := pe.MyPE(), pe.NPEs()
	s, err := shmem.Malloc[int64](pe, 4)
	if err != nil {
		return err
	}
	for i := range s.Local() {
		s.Local()[i] = 7
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	expect := func(err, want error, what string) error {
		if !errors.Is(err, want) {
			return fmt.Errorf("%s: got %v, want %v", what, err, want)
		}
		// Then a good operation on the same object.
		if err := shmem.P(s, 0, 7, me); err != nil {
			return fmt.Errorf("after %s: %v", what, err)
		}
		return nil
	}
	checks := []struct {
		err  error
		want error
		what string
	}{
		{shmem.Put(s, []int64{1}, np), shmem.ErrBadPE, "put to PE npes"},
		{shmem.Put(s, []int64{1}, -1), shmem.ErrBadPE, "put to PE -1"},
		{shmem.Put(s, make([]int64, 5), me), shmem.ErrOutOfBounds, "put past the object"},
		{shmem.Get(make([]int64, 5), s, me), shmem.ErrOutOfBounds, "get past the object"},
		{shmem.P(s, 4, 1, me), shmem.ErrOutOfBounds, "P at index len"},
		{shmem.P(s, -1, 1, me), shmem.ErrOutOfBounds, "P at index -1"},
		{shmem.AtomicAdd(s, 4, 1, me), shmem.ErrOutOfBounds, "atomic past the object"},
		{shmem.AtomicAdd(s, 0, 1, 1<<20), shmem.ErrBadPE, "atomic on a bad PE"},
		{shmem.Put(shmem.Sym[int64]{}, []int64{1}, me), shmem.ErrInvalid, "put to a zero Sym"},
		{shmem.IGet(make([]int64, 2), 1, s, 2, 3, me), shmem.ErrOutOfBounds, "IGet into a short slice"},
		{pe.PEQuiet(np), shmem.ErrBadPE, "PEQuiet of a bad PE"},
	}
	for _, c := range checks {
		if err := expect(c.err, c.want, c.what); err != nil {
			return err
		}
	}
	if _, err := shmem.Malloc[int64](pe, -1); !errors.Is(err, shmem.ErrInvalid) {
		return fmt.Errorf("Malloc(-1): %v", err)
	}
	if _, err := shmem.Align[int64](pe, 3, 1); !errors.Is(err, shmem.ErrInvalid) {
		return fmt.Errorf("Align(3): %v", err)
	}
	_, err = shmem.Malloc[byte](pe, math.MaxInt/2)
	if !errors.Is(err, shmem.ErrHeapExhausted) || !strings.Contains(err.Error(), "SHMEM_SYMMETRIC_SIZE") {
		return fmt.Errorf("huge Malloc: %v", err)
	}
	// A request that fits the heap's size but not its free space.
	big, err := shmem.Malloc[byte](pe, 10<<20)
	if err != nil {
		return err
	}
	_, err = shmem.Malloc[byte](pe, 10<<20)
	if !errors.Is(err, shmem.ErrHeapExhausted) || !strings.Contains(err.Error(), "SHMEM_SYMMETRIC_SIZE") {
		return fmt.Errorf("Malloc past the free space: %v", err)
	}
	if err := shmem.Free(big); err != nil {
		return err
	}
	for i, v := range s.Local() {
		if v != 7 {
			return fmt.Errorf("element %d changed to %d by refused operations", i, v)
		}
	}
	// Realloc keeps contents, and the old handle dies.
	s2, err := shmem.Realloc(s, 1000)
	if err != nil {
		return err
	}
	if s2.Len() != 1000 || s2.Local()[3] != 7 || s2.Local()[999] != 0 {
		return fmt.Errorf("Realloc: len %d, [3]=%d [999]=%d", s2.Len(), s2.Local()[3], s2.Local()[999])
	}
	if err := shmem.Put(s, []int64{1}, me); !errors.Is(err, shmem.ErrOutOfBounds) {
		return fmt.Errorf("put through the handle Realloc replaced: %v", err)
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	if err := shmem.P(s2, 999, int64(me), (me+1)%np); err != nil {
		return err
	}
	if err := shmem.Free(s2); err != nil {
		return err
	}
	if err := shmem.Free(s2); !errors.Is(err, shmem.ErrOutOfBounds) {
		return fmt.Errorf("double Free: %v", err)
	}
	if err := shmem.P(s2, 0, 1, me); !errors.Is(err, shmem.ErrOutOfBounds) {
		return fmt.Errorf("put after Free: %v", err)
	}
	if shmem.Ptr(s2, me) != nil || s2.Local() != nil {
		return fmt.Errorf("Ptr/Local of a freed object are not nil")
	}
	// Heap is whole again: one big block fits.
	again, err := shmem.Malloc[byte](pe, 12<<20)
	if err != nil {
		return fmt.Errorf("heap not whole after frees: %v", err)
	}
	if p := shmem.Ptr(again, me); len(p) != 12<<20 {
		return fmt.Errorf("Ptr to self: len %d", len(p))
	}
	return shmem.Free(again)
})

func TestErrorPaths(t *testing.T) { each(t, "error-paths", 1, 2, 3) }

func TestRunFailureEndsWaits(t *testing.T) {
	boom := errors.New("boom")
	start := time.Now()
	err := shmem.Run(4, func(pe *shmem.PE) error {
		if pe.MyPE() == 2 {
			time.Sleep(50 * time.Millisecond)
			return boom
		}
		s, err := shmem.Malloc[int64](pe, 1) // PE 2 never allocates: the others wait in Malloc's barrier
		if err == nil {
			err = shmem.WaitUntil(s, 0, shmem.CmpEQ, 1)
		}
		if !errors.Is(err, shmem.ErrPeerLost) {
			return fmt.Errorf("PE %d: want ErrPeerLost, got %v", pe.MyPE(), err)
		}
		return nil
	}, shmem.WithTimeout(time.Minute), shmem.WithHeapSize(1<<20))
	if !errors.Is(err, boom) {
		t.Fatalf("Run returned %v, want boom", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("took %v", el)
	}
}

func TestTimeout(t *testing.T) {
	err := shmem.Run(1, func(pe *shmem.PE) error {
		s, err := shmem.Malloc[int64](pe, 1)
		if err != nil {
			return err
		}
		if pe.MyPE() == 0 {
			err := shmem.WaitUntil(s, 0, shmem.CmpEQ, 1) // nobody ever writes it
			if !errors.Is(err, shmem.ErrTimeout) || !strings.Contains(err.Error(), "element 0") {
				return fmt.Errorf("want ErrTimeout naming the element, got %v", err)
			}
		}
		return nil
	}, shmem.WithTimeout(300*time.Millisecond), shmem.WithHeapSize(1<<20))
	if err != nil {
		t.Fatal(err)
	}
}

func TestGlobalExitUnderRun(t *testing.T) {
	err := shmem.Run(3, func(pe *shmem.PE) error {
		if pe.MyPE() == 1 {
			pe.GlobalExit(5)
		}
		err := pe.BarrierAll()
		if !errors.Is(err, shmem.ErrPeerLost) {
			return fmt.Errorf("want ErrPeerLost after GlobalExit, got %v", err)
		}
		return nil
	}, shmem.WithHeapSize(1<<20))
	var ee *shmem.ExitError
	if !errors.As(err, &ee) || ee.Code != 5 || ee.PE != 1 {
		t.Fatalf("Run returned %v, want ExitError{PE 1, code 5}", err)
	}
}

func TestDebugAgreement(t *testing.T) {
	err := shmem.Run(3, func(pe *shmem.PE) error {
		_, err := shmem.Malloc[int64](pe, 10+pe.MyPE()%2)
		if !errors.Is(err, shmem.ErrAsymmetric) {
			return fmt.Errorf("PE %d: want ErrAsymmetric, got %v", pe.MyPE(), err)
		}
		// The same call everywhere still works afterwards.
		s, err := shmem.Malloc[int64](pe, 10)
		if err != nil {
			return err
		}
		return shmem.Free(s)
	}, shmem.WithDebug(true), shmem.WithHeapSize(1<<20))
	if err != nil {
		t.Fatal(err)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Setenv("SHMEM_SYMMETRIC_SIZE", "12X")
	err := shmem.Run(1, func(pe *shmem.PE) error { return nil })
	if !errors.Is(err, shmem.ErrInvalid) || !strings.Contains(err.Error(), "SHMEM_SYMMETRIC_SIZE") {
		t.Fatalf("bad SHMEM_SYMMETRIC_SIZE: %v", err)
	}
	t.Setenv("SHMEM_SYMMETRIC_SIZE", ".5G")
	err = shmem.Run(1, func(pe *shmem.PE) error {
		if got := pe.Info().HeapSize; got != 512<<20 {
			return fmt.Errorf("heap %d, want 512 MiB", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SHMEM_SYMMETRIC_SIZE", "")
	t.Setenv("GOSHMEM_TIMEOUT", "soon")
	if err := shmem.Run(1, func(pe *shmem.PE) error { return nil }); !errors.Is(err, shmem.ErrInvalid) || !strings.Contains(err.Error(), "GOSHMEM_TIMEOUT") {
		t.Fatalf("bad GOSHMEM_TIMEOUT: %v", err)
	}
}

func TestReallocKeepsAlignment(t *testing.T) {
	err := shmem.Run(2, func(pe *shmem.PE) error {
		a, err := shmem.Align[int64](pe, 4096, 10)
		if err != nil {
			return err
		}
		blocker, err := shmem.Malloc[int64](pe, 10) // stops a from growing in place
		if err != nil {
			return err
		}
		a.Local()[9] = int64(pe.MyPE() + 100)
		b, err := shmem.Realloc(a, 10000)
		if err != nil {
			return err
		}
		if b.Offset()%4096 != 0 || b.Offset() == a.Offset() {
			return fmt.Errorf("moved Realloc of a 4096-aligned object landed at %d (from %d)", b.Offset(), a.Offset())
		}
		if b.Local()[9] != int64(pe.MyPE()+100) {
			return fmt.Errorf("Realloc lost the contents")
		}
		if err := shmem.Free(blocker); err != nil {
			return err
		}
		return shmem.Free(b)
	}, shmem.WithHeapSize(1<<20))
	if err != nil {
		t.Fatal(err)
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A PE blocked for a second sleeps: the process uses a small fraction
// of that second of CPU.
func TestBlockedWaitSleeps(t *testing.T) {
	var used time.Duration
	err := shmem.Run(3, func(pe *shmem.PE) error {
		s, err := shmem.Malloc[int64](pe, 1)
		if err != nil {
			return err
		}
		if err := pe.BarrierAll(); err != nil {
			return err
		}
		switch pe.MyPE() {
		case 0:
			start := cpuTime()
			err = shmem.WaitUntil(s, 0, shmem.CmpEQ, 1)
			used = cpuTime() - start
		case 1:
			time.Sleep(time.Second)
			err = shmem.AtomicSet(s, 0, 1, 0)
		}
		if err != nil {
			return err
		}
		return pe.BarrierAll() // PE 2 waits here the whole second
	}, shmem.WithHeapSize(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("CPU used during a 1 s wait by 2 waiting PEs: %v", used)
	if used > 300*time.Millisecond {
		t.Fatalf("waiting PEs used %v of CPU in one second", used)
	}
}
