// Hello is the OpenSHMEM "hello world". Every PE says where it runs and
// how it reaches PE 0, then checks in by atomically incrementing a
// counter that lives in PE 0's symmetric heap. After a barrier PE 0
// checks that the counter equals the number of PEs.
//
// Run it as a job of four PEs with
//
//	go run ./cmd/goshrun -n 4 ./examples/hello
//
// or as a job of one PE with `go run ./examples/hello`.
package main

import (
	"fmt"
	"os"

	"github.com/goshmem/goshmem/shmem"
)

func main() {
	pe, err := shmem.Init()
	if err != nil {
		fmt.Fprintln(os.Stderr, "hello:", err)
		os.Exit(1)
	}
	if err := run(pe); err != nil {
		fmt.Fprintf(os.Stderr, "hello: PE %d: %v\n", pe.MyPE(), err)
		pe.GlobalExit(1) // ends every PE of the job, not just this one
	}
	if err := pe.Finalize(); err != nil {
		fmt.Fprintln(os.Stderr, "hello:", err)
		os.Exit(1)
	}
}

func run(pe *shmem.PE) error {
	me, n := pe.MyPE(), pe.NPEs()

	// Info describes this PE: its host, and the route to every PE
	// ("self" for itself, "shm" when the peer's heap is mapped here).
	info := pe.Info()
	fmt.Printf("hello from PE %d of %d on host %s (route to PE 0: %s)\n",
		me, n, info.Host, info.Routes[0].Kind)

	// Malloc is collective: every PE allocates the counter, at the same
	// offset of its symmetric heap, zeroed. Only PE 0's copy is used.
	count, err := shmem.Malloc[int64](pe, 1)
	if err != nil {
		return err
	}
	// Each PE increments element 0 of the counter on PE 0. Atomics on the
	// same word never lose an update, whatever the PEs' timing.
	if err := shmem.AtomicInc(count, 0, 0); err != nil {
		return err
	}
	// BarrierAll completes this PE's operations and waits for every PE, so
	// afterwards all n increments have landed on PE 0.
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	if me == 0 {
		// PE 0 reads its own copy directly.
		if got := count.Local()[0]; got != int64(n) {
			return fmt.Errorf("counter on PE 0 is %d, want %d", got, n)
		}
		fmt.Printf("all %d PEs checked in\n", n)
	}
	// Free is collective too; Finalize would release the heap anyway.
	return shmem.Free(count)
}
