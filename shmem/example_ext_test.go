package shmem_test

import (
	"fmt"

	"github.com/goshmem/goshmem/shmem"
)

// Each PE waits until every other PE has raised its own flag past a
// per-flag threshold: element i is compared with thresholds[i].
func ExampleWaitUntilAllVector() {
	err := shmem.Run(4, func(pe *shmem.PE) error {
		me, np := pe.MyPE(), pe.NPEs()
		flags, err := shmem.Malloc[int64](pe, np) // flags[i] is written by PE i
		if err != nil {
			return err
		}
		thresholds := make([]int64, np)
		for i := range thresholds {
			thresholds[i] = int64(10 * (i + 1))
		}
		for t := 0; t < np; t++ {
			if err := shmem.AtomicSet(flags, me, int64(10*(me+1)), t); err != nil {
				return err
			}
		}
		mask := make([]bool, np) // true: watched (C's status array is the opposite)
		for i := range mask {
			mask[i] = i != me
		}
		if err := shmem.WaitUntilAllVector(flags, mask, shmem.CmpGE, thresholds); err != nil {
			return err
		}
		if me == 0 {
			fmt.Println("PE 0 saw", flags.Local()[1:])
		}
		return pe.BarrierAll()
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: PE 0 saw [20 30 40]
}

// A producer streams chunks with PutSignalNBI, each adding one to the
// consumer's signal; the chunks' buffers stay untouched until Quiet. The
// consumer waits for the count, and then sees every chunk.
func ExamplePutSignalNBI() {
	err := shmem.Run(2, func(pe *shmem.PE) error {
		const chunks, n = 4, 3
		data, err := shmem.Malloc[int32](pe, chunks*n)
		if err != nil {
			return err
		}
		sig, err := shmem.Malloc[uint64](pe, 1)
		if err != nil {
			return err
		}
		if pe.MyPE() == 0 {
			bufs := make([][]int32, chunks) // not reused before Quiet
			for c := range bufs {
				bufs[c] = []int32{int32(c), int32(c), int32(c)}
				if err := shmem.PutSignalNBI(data.Slice(c*n, (c+1)*n), bufs[c], sig, 1, shmem.SignalAdd, 1); err != nil {
					return err
				}
			}
			if err := pe.Quiet(); err != nil { // data and signals complete at PE 1
				return err
			}
		} else {
			if _, err := shmem.SignalWaitUntil(sig, shmem.CmpEQ, chunks); err != nil {
				return err
			}
			fmt.Println("PE 1 got", data.Local())
		}
		return pe.BarrierAll()
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: PE 1 got [0 0 0 1 1 1 2 2 2 3 3 3]
}
