// Pi estimates π by Monte Carlo: every PE throws darts at the unit
// square and counts those inside the quarter circle. The counts meet on
// PE 0 in two ways, to check each other: an atomic sum (AtomicAdd into one
// word) and a gather (P into slot i of an array, one slot per PE).
//
// Run it as a job of four PEs with
//
//	go run ./cmd/goshrun -n 4 ./examples/pi [-n darts-per-PE] [-seed s]
//
// or as a job of one PE with `go run ./examples/pi`.
package main

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"

	"github.com/goshmem/goshmem/shmem"
)

func main() {
	darts := flag.Int64("n", 2_000_000, "darts thrown by each PE")
	seed := flag.Uint64("seed", 1, "random seed (each PE also mixes in its number)")
	flag.Parse()
	if *darts < 1 {
		fmt.Fprintln(os.Stderr, "pi: -n must be at least 1")
		os.Exit(2)
	}
	pe, err := shmem.Init()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pi:", err)
		os.Exit(1)
	}
	if err := run(pe, *darts, *seed); err != nil {
		fmt.Fprintf(os.Stderr, "pi: PE %d: %v\n", pe.MyPE(), err)
		pe.GlobalExit(1) // ends every PE of the job, not just this one
	}
	if err := pe.Finalize(); err != nil {
		fmt.Fprintln(os.Stderr, "pi:", err)
		os.Exit(1)
	}
}

func run(pe *shmem.PE, darts int64, seed uint64) error {
	me, n := pe.MyPE(), pe.NPEs()

	// Symmetric objects (collective allocations): the atomic total, and
	// one slot per PE for the gathered counts. Only PE 0's copies are used.
	total, err := shmem.Malloc[int64](pe, 1)
	if err != nil {
		return err
	}
	perPE, err := shmem.Malloc[int64](pe, n)
	if err != nil {
		return err
	}

	// The work itself is purely local: a PCG stream per PE.
	r := rand.New(rand.NewPCG(seed, uint64(me)))
	var hits int64
	for range darts {
		x, y := r.Float64(), r.Float64()
		if x*x+y*y < 1 {
			hits++
		}
	}

	// One-sided communication into PE 0's heap: PE 0 takes no part.
	if err := shmem.AtomicAdd(total, 0, hits, 0); err != nil {
		return err
	}
	if err := shmem.P(perPE, me, hits, 0); err != nil {
		return err
	}
	// BarrierAll = Quiet (every put and atomic is complete at its target)
	// plus a meeting of all PEs: after it PE 0's copies are final.
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	if me != 0 {
		return nil
	}

	var sum int64
	for _, h := range perPE.Local() {
		sum += h
	}
	got := total.Local()[0]
	if got != sum {
		return fmt.Errorf("atomic total %d differs from the gathered sum %d", got, sum)
	}
	thrown := darts * int64(n)
	pi := 4 * float64(got) / float64(thrown)
	// Each dart hits with p = π/4, so the estimate's standard deviation is
	// 4·sqrt(p(1-p)/N) ≈ 1.64/√N; 7/√N is more than four of them.
	tol := 7 / math.Sqrt(float64(thrown))
	diff := math.Abs(pi - math.Pi)
	if diff > tol {
		return fmt.Errorf("pi = %.6f from %d darts is %.2g off, beyond the tolerance %.2g", pi, thrown, diff, tol)
	}
	fmt.Printf("pi ≈ %.6f from %d darts on %d PEs (off by %.2g, tolerance %.2g)\n", pi, thrown, n, diff, tol)
	return nil
}
