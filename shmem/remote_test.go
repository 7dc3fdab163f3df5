package shmem_test

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// 100k non-blocking puts and fetch-adds in flight to one peer, completed
// by one Quiet, with exact results.
var _ = register("many-nbi", func(pe *shmem.PE) error {
	const k = 100_000
	me, np := pe.MyPE(), pe.NPEs()
	if np < 2 {
		return nil
	}
	s, err := shmem.Malloc[uint64](pe, k)
	if err != nil {
		return err
	}
	ctr, err := shmem.Malloc[uint64](pe, 1)
	if err != nil {
		return err
	}
	right, left := (me+1)%np, (me-1+np)%np
	var one [1]uint64
	for i := 0; i < k; i++ {
		one[0] = uint64(me)<<32 | uint64(i)
		if err := shmem.PutNBI(s.Slice(i, i+1), one[:], right); err != nil {
			return err
		}
	}
	for i := 0; i < k/10; i++ {
		if err := shmem.AtomicAdd(ctr, 0, 1, right); err != nil {
			return err
		}
	}
	if err := pe.Quiet(); err != nil {
		return err
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	for i, v := range s.Local() {
		if v != uint64(left)<<32|uint64(i) {
			return fmt.Errorf("slot %d holds %x after %d NBI puts from PE %d", i, v, k, left)
		}
	}
	if got := ctr.Local()[0]; got != k/10 {
		return fmt.Errorf("counter %d, want %d", got, k/10)
	}
	return pe.BarrierAll()
})

func TestManyNBI(t *testing.T) { each(t, "many-nbi", 2, 4) }

func openFDs() int {
	fds, _ := os.ReadDir("/proc/self/fd")
	return len(fds)
}

// Jobs with TCP links leave no goroutine and no file descriptor behind.
func TestNoLeaksAfterFinalize(t *testing.T) {
	job := func() {
		err := shmem.Run(4, func(pe *shmem.PE) error {
			s, err := shmem.Malloc[int64](pe, 16)
			if err != nil {
				return err
			}
			if err := shmem.AtomicAdd(s, 0, 1, (pe.MyPE()+1)%4); err != nil {
				return err
			}
			return pe.BarrierAll()
		}, shmem.WithHosts(pretendHosts("mixed", 4)), shmem.WithHeapSize(1<<20))
		if err != nil {
			t.Fatal(err)
		}
	}
	job() // warm up: lazily started runtime goroutines and fds
	time.Sleep(50 * time.Millisecond)
	g0, f0 := runtime.NumGoroutine(), openFDs()
	for i := 0; i < 5; i++ {
		job()
	}
	var g, f int
	for try := 0; try < 100; try++ { // goroutines end just after Run returns
		g, f = runtime.NumGoroutine(), openFDs()
		if g <= g0 && f <= f0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	buf := make([]byte, 1<<16)
	t.Fatalf("after 5 jobs: %d goroutines (was %d), %d fds (was %d)\n%s", g, g0, f, f0, buf[:runtime.Stack(buf, true)])
}

// Fetching non-blocking atomics: every result lands by the next Quiet.
var _ = register("nbi-fetch", func(pe *shmem.PE) error {
	const k = 2000
	me, np := pe.MyPE(), pe.NPEs()
	ctr, err := shmem.Malloc[int64](pe, 1)
	if err != nil {
		return err
	}
	ctr32, err := shmem.Malloc[uint32](pe, 1)
	if err != nil {
		return err
	}
	right := (me + 1) % np
	got := make([]int64, k)
	got32 := make([]uint32, k)
	for i := range got {
		if err := shmem.AtomicFetchIncNBI(&got[i], ctr, 0, right); err != nil {
			return err
		}
		if err := shmem.AtomicFetchAddNBI(&got32[i], ctr32, 0, 3, right); err != nil {
			return err
		}
	}
	if err := pe.Quiet(); err != nil {
		return err
	}
	// Only this PE adds to its right neighbour's counters, in order.
	for i := range got {
		if got[i] != int64(i) || got32[i] != uint32(3*i) {
			return fmt.Errorf("fetch %d returned %d and %d, want %d and %d", i, got[i], got32[i], i, 3*i)
		}
	}
	return pe.BarrierAll()
})

func TestNBIFetch(t *testing.T) { each(t, "nbi-fetch", 1, 2, 3) }
