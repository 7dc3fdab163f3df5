// Heat solves the 1-D heat equation u' = u + α(u[j-1] - 2u[j] + u[j+1])
// on a rod with fixed end temperatures, split into one chunk per PE. Each
// step a PE puts its edge cells into its neighbours' halo slots with
// PutSignal (signal = step number) and waits for its own halos with
// SignalWaitUntil: point-to-point synchronisation, no barrier per step.
// Halo slots alternate by step parity, so a neighbour one step ahead never
// overwrites a halo still in use. PE 0 then gathers the rod with Get and
// compares it with a serial run of the same float operations in the same
// order: the two must be identical.
//
// Run it as a job of four PEs with
//
//	go run ./cmd/goshrun -n 4 ./examples/heat [-cells 4096] [-steps 200]
//
// or as a job of one PE with `go run ./examples/heat`.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"

	"github.com/goshmem/goshmem/shmem"
)

const (
	alpha       = 0.25       // stable for alpha <= 0.5
	left, right = 100.0, 0.0 // the fixed end temperatures
)

// initial is the starting temperature of cell j: rough, so that every
// chunk edge carries real data from the first step.
func initial(j int) float64 { return float64(j * 37 % 101) }

// update does one step: u[j] from w[j..j+2], where w is the old u with a
// halo cell at each end. The explicit conversions forbid fused
// multiply-adds, so every PE and the serial check round alike.
func update(u, w []float64) {
	for j := range u {
		u[j] = w[j+1] + float64(alpha*(w[j]-float64(2*w[j+1])+w[j+2]))
	}
}

func main() {
	cells := flag.Int("cells", 4096, "cells in the rod")
	steps := flag.Int("steps", 200, "time steps")
	flag.Parse()
	if *cells < 1 || *steps < 0 {
		fmt.Fprintln(os.Stderr, "heat: need -cells >= 1 and -steps >= 0")
		os.Exit(2)
	}
	pe, err := shmem.Init()
	if err != nil {
		fmt.Fprintln(os.Stderr, "heat:", err)
		os.Exit(1)
	}
	if err := run(pe, *cells, *steps); err != nil {
		fmt.Fprintf(os.Stderr, "heat: PE %d: %v\n", pe.MyPE(), err)
		pe.GlobalExit(1) // ends every PE of the job, not just this one
	}
	if err := pe.Finalize(); err != nil {
		fmt.Fprintln(os.Stderr, "heat:", err)
		os.Exit(1)
	}
}

func run(pe *shmem.PE, cells, steps int) error {
	me, n := pe.MyPE(), pe.NPEs()
	if cells < n {
		return fmt.Errorf("%d cells cannot be split over %d PEs", cells, n)
	}
	// PE p owns cells lo(p)..lo(p+1)-1; chunk sizes differ by at most one.
	lo := func(p int) int { return p * cells / n }
	mine := lo(me+1) - lo(me)

	// Symmetric objects: the chunk (for the final gather), the halo slots
	// [parity][side] with side 0 = left, 1 = right, and a signal per side.
	rod, err := shmem.Malloc[float64](pe, (cells+n-1)/n)
	if err != nil {
		return err
	}
	halo, err := shmem.Malloc[float64](pe, 4)
	if err != nil {
		return err
	}
	sig, err := shmem.Malloc[uint64](pe, 2)
	if err != nil {
		return err
	}
	sigLeft, sigRight := sig.Slice(0, 1), sig.Slice(1, 2) // PutSignal's signal is element 0
	u := rod.Local()[:mine]
	for j := range u {
		u[j] = initial(lo(me) + j)
	}

	w := make([]float64, mine+2) // this step's input, halos included
	for s := 1; s <= steps; s++ {
		par := 2 * (s % 2)
		// Send my edges: my first cell is my left neighbour's right halo,
		// my last cell my right neighbour's left halo. The signal lands
		// after the data, so seeing it means the halo is there.
		if me > 0 {
			if err := shmem.PutSignal(halo.Slice(par+1, par+2), u[:1], sigRight, uint64(s), shmem.SignalSet, me-1); err != nil {
				return err
			}
		}
		if me < n-1 {
			if err := shmem.PutSignal(halo.Slice(par, par+1), u[mine-1:], sigLeft, uint64(s), shmem.SignalSet, me+1); err != nil {
				return err
			}
		}
		// Wait for my halos of step s. A neighbour may already be one step
		// ahead (signal s+1, the other parity's slot), never two: it needs
		// my step s+1 edge for that.
		w[0], w[mine+1] = left, right
		if me > 0 {
			if _, err := shmem.SignalWaitUntil(sigLeft, shmem.CmpGE, uint64(s)); err != nil {
				return err
			}
			w[0] = halo.Local()[par]
		}
		if me < n-1 {
			if _, err := shmem.SignalWaitUntil(sigRight, shmem.CmpGE, uint64(s)); err != nil {
				return err
			}
			w[mine+1] = halo.Local()[par+1]
		}
		copy(w[1:], u)
		update(u, w)
	}
	// Every PE has finished its steps once the barrier is passed.
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	if me != 0 {
		return nil
	}

	// Gather the rod: one Get of each PE's chunk.
	got := make([]float64, cells)
	for p := range n {
		if err := shmem.Get(got[lo(p):lo(p+1)], rod, p); err != nil {
			return err
		}
	}
	// The serial computation: the same update over the whole rod.
	want := make([]float64, cells)
	for j := range want {
		want[j] = initial(j)
	}
	w = make([]float64, cells+2)
	w[0], w[cells+1] = left, right
	for range steps {
		copy(w[1:], want)
		update(want, w)
	}
	var maxDiff float64
	for j, g := range got {
		maxDiff = math.Max(maxDiff, math.Abs(g-want[j]))
	}
	fmt.Printf("heat: %d cells, %d steps on %d PEs: max |parallel - serial| = %g (middle cell %.4f)\n",
		cells, steps, n, maxDiff, got[cells/2])
	if maxDiff != 0 { // also catches NaN
		return fmt.Errorf("the parallel rod differs from the serial one by up to %g", maxDiff)
	}
	return nil
}
