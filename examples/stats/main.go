// Stats computes the mean, variance, minimum and maximum of data spread
// over the PEs, and gathers it, with the collectives of package
// collective. Every PE holds a different number of samples, a
// deterministic sequence of its own, so each PE can check every answer
// against a serial computation over all PEs' data.
//
//   - Broadcast: PE 0 decides the sample counts and tells everyone.
//   - AllReduce (Sum): the global count, sum and sum of squares, in one
//     call on a 3-element vector; AllReduce (Min, Max): the extremes.
//   - ExScan (Sum): each PE's offset in the global sequence.
//   - Collect: every PE gets every sample, in PE order.
//
// No barrier separates the calls: a collective touches a PE's buffers
// only while that PE is inside it.
//
//	go run ./cmd/goshrun -n 4 ./examples/stats
package main

import (
	"fmt"
	"math"
	"os"

	"github.com/goshmem/goshmem/collective"
	"github.com/goshmem/goshmem/shmem"
)

func main() {
	pe, err := shmem.Init()
	if err != nil {
		fmt.Fprintln(os.Stderr, "stats:", err)
		os.Exit(1)
	}
	if err := run(pe); err != nil {
		fmt.Fprintf(os.Stderr, "stats: PE %d: %v\n", pe.MyPE(), err)
		pe.GlobalExit(1)
	}
	if err := pe.Finalize(); err != nil {
		fmt.Fprintln(os.Stderr, "stats:", err)
		os.Exit(1)
	}
}

// sample is value i of PE p: a fixed pseudo-random sequence.
func sample(p, i int) float64 {
	x := uint64(p)*0x9E3779B97F4A7C15 + uint64(i)*0xBF58476D1CE4E5B9 + 1
	x ^= x >> 31
	x *= 0x94D049BB133111EB
	x ^= x >> 29
	return float64(x%10000)/100 - 50
}

func run(pe *shmem.PE) error {
	me, n := pe.MyPE(), pe.NPEs()
	world := pe.World()
	const base = 1000

	// PE 0 decides how many samples each PE holds.
	counts, err := shmem.Malloc[int64](pe, n)
	if err != nil {
		return err
	}
	if me == 0 {
		for p := range n {
			counts.Local()[p] = int64(base + 37*p)
		}
	}
	if err := collective.Broadcast(world, counts, counts, 0); err != nil {
		return err
	}
	mine := int(counts.Local()[me])
	total := 0
	for p := range n {
		total += int(counts.Local()[p])
	}

	data, err := shmem.Malloc[float64](pe, base+37*(n-1))
	if err != nil {
		return err
	}
	for i := range mine {
		data.Local()[i] = sample(me, i)
	}

	// Count, sum and sum of squares in one AllReduce.
	moments, err := shmem.Malloc[float64](pe, 3)
	if err != nil {
		return err
	}
	m := moments.Local()
	m[0], m[1], m[2] = float64(mine), 0, 0
	for _, v := range data.Local()[:mine] {
		m[1] += v
		m[2] += v * v
	}
	if err := collective.AllReduce(world, moments, moments, collective.Sum); err != nil {
		return err
	}
	extremes, err := shmem.Malloc[float64](pe, 2)
	if err != nil {
		return err
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range data.Local()[:mine] {
		lo, hi = min(lo, v), max(hi, v)
	}
	e := extremes.Local()
	e[0] = lo
	if err := collective.AllReduce(world, extremes.Slice(0, 1), extremes.Slice(0, 1), collective.Min); err != nil {
		return err
	}
	e[1] = hi
	if err := collective.AllReduce(world, extremes.Slice(1, 2), extremes.Slice(1, 2), collective.Max); err != nil {
		return err
	}

	// Each PE's offset in the global sequence, then everything gathered.
	offset, err := shmem.Malloc[int64](pe, 1)
	if err != nil {
		return err
	}
	offset.Local()[0] = int64(mine)
	if err := collective.ExScan(world, offset, offset, collective.Sum); err != nil {
		return err
	}
	all, err := shmem.Malloc[float64](pe, total)
	if err != nil {
		return err
	}
	got, err := collective.Collect(world, all, data, mine)
	if err != nil {
		return err
	}

	// The serial answers, over every PE's samples.
	var sum, sq float64
	wlo, whi := math.Inf(1), math.Inf(-1)
	at, myOffset := 0, 0
	for p := range n {
		if p == me {
			myOffset = at
		}
		for i := range int(counts.Local()[p]) {
			v := sample(p, i)
			sum, sq = sum+v, sq+v*v
			wlo, whi = min(wlo, v), max(whi, v)
			if all.Local()[at] != v {
				return fmt.Errorf("Collect: element %d is %v, want %v (PE %d's sample %d)", at, all.Local()[at], v, p, i)
			}
			at++
		}
	}
	switch {
	case got != total || int(m[0]) != total:
		return fmt.Errorf("counts: Collect %d, AllReduce %v, want %d", got, m[0], total)
	case math.Abs(m[1]-sum) > 1e-6*math.Max(1, math.Abs(sum)) || math.Abs(m[2]-sq) > 1e-6*sq:
		return fmt.Errorf("moments: sum %v, squares %v; want %v, %v", m[1], m[2], sum, sq)
	case e[0] != wlo || e[1] != whi:
		return fmt.Errorf("extremes: %v..%v, want %v..%v", e[0], e[1], wlo, whi)
	case int(offset.Local()[0]) != myOffset:
		return fmt.Errorf("ExScan: offset %d, want %d", offset.Local()[0], myOffset)
	}
	if me == 0 {
		mean := m[1] / m[0]
		fmt.Printf("%d samples on %d PEs: mean %.4f, variance %.4f, min %.2f, max %.2f\n",
			total, n, mean, m[2]/m[0]-mean*mean, e[0], e[1])
	}
	return nil
}
