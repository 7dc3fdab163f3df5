// Command enginejob is the PE program of internal/engine's engine tests:
// it runs under mpirun, mpiexec.hydra and srun and checks the job from
// inside. Usage: enginejob MODE, MODE one of
//
//	ok      RMA, atomics and a barrier across every PE; prints one line per PE
//	kill    prints "pid P" per PE, then every PE waits for a word no one sets
//	        (the test kills one PE with SIGKILL)
//	exit7   PE 1 calls GlobalExit(7); the others wait for a word no one sets
//	badkey  PE 2 uses another job key; every PE tries to Init
package main

import (
	"fmt"
	"os"

	"github.com/goshmem/goshmem/internal/engine"
	"github.com/goshmem/goshmem/shmem"
)

func main() {
	mode := "ok"
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	if mode == "badkey" {
		if e, ok, _ := engine.Detect(os.LookupEnv); ok && e.Rank == 2 {
			os.Setenv("GOSHMEM_KEY", "0000000000000000000000000000000000000000000000000000000000000000")
		}
	}
	pe, err := shmem.Init()
	if err != nil {
		fmt.Fprintf(os.Stderr, "enginejob: Init: %v\n", err)
		os.Exit(3)
	}
	me, n := pe.MyPE(), pe.NPEs()
	word, err := shmem.Malloc[int64](pe, n+1)
	if err != nil {
		fail(me, "Malloc", err)
	}
	switch mode {
	case "ok", "badkey":
		// Each PE puts its rank+1 into slot me of the next PE, and adds
		// to a counter on PE 0.
		next := (me + 1) % n
		if err := shmem.P(word, me, int64(me+1), next); err != nil {
			fail(me, "P", err)
		}
		if err := shmem.AtomicAdd(word, n, int64(me+1), 0); err != nil {
			fail(me, "AtomicAdd", err)
		}
		if err := pe.BarrierAll(); err != nil {
			fail(me, "BarrierAll", err)
		}
		prev := (me + n - 1) % n
		if got := word.Local()[prev]; got != int64(prev+1) {
			fail(me, "check", fmt.Errorf("slot %d holds %d, want %d", prev, got, prev+1))
		}
		if me == 0 {
			if got, want := word.Local()[n], int64(n*(n+1)/2); got != want {
				fail(me, "check", fmt.Errorf("counter %d, want %d", got, want))
			}
		}
		in := pe.Info()
		fmt.Printf("PE %d of %d OK launcher=%s shm=%d\n", me, n, in.Launcher, in.SameHostPEs)
		if err := pe.Finalize(); err != nil {
			fail(me, "Finalize", err)
		}
	case "kill":
		fmt.Printf("PE %d pid %d\n", me, os.Getpid())
		if err := pe.BarrierAll(); err != nil {
			fail(me, "BarrierAll", err)
		}
		fmt.Printf("PE %d waiting\n", me)
		err := shmem.WaitUntil(word, 0, shmem.CmpEQ, 42)
		fail(me, "WaitUntil", err)
	case "exit7":
		if err := pe.BarrierAll(); err != nil {
			fail(me, "BarrierAll", err)
		}
		if me == 1 {
			pe.GlobalExit(7)
		}
		err := shmem.WaitUntil(word, 0, shmem.CmpEQ, 42)
		fail(me, "WaitUntil", err)
	default:
		fail(me, "mode", fmt.Errorf("unknown mode %q", mode))
	}
}

func fail(me int, what string, err error) {
	fmt.Fprintf(os.Stderr, "enginejob: PE %d: %s: %v\n", me, what, err)
	os.Exit(4)
}
