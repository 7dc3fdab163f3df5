package suite

import (
	"time"

	"github.com/goshmem/goshmem/benchmarks/report"
	"github.com/goshmem/goshmem/shmem"
)

// Atomics, as osu_oshm_atomics defines them: PE 0 applies the operation
// to a 64-bit word of PE 1's heap, PE 1 is idle. Each operation is two
// figures: latency, from a loop of the blocking call; rate, from windows
// of the non-blocking form (the NBI variant of a fetching operation, the
// call itself for add and inc, which return nothing) each followed by
// Quiet.
//
// Over TCP the latency of add and inc, which return nothing, is that of
// the call and a Quiet, as put-latency's is: the call alone only queues
// a frame for the link's writer (about 0.1 µs), which says nothing about
// the remote path. Over shared memory the call is the whole operation,
// and the figure is the call alone, as in OSU.

// atomicOp is one operation in both forms. i numbers the call, for
// operations that take a value.
type atomicOp struct {
	name     string
	blocking func(b *B, i int) error
	nbi      func(b *B, i int, dst *uint64) error
	void     bool // returns nothing (add, inc): remote completion needs a Quiet
}

var atomicOps = []atomicOp{
	{"fetch-add",
		func(b *B, _ int) error { _, err := shmem.AtomicFetchAdd(b.words, wCtr, 1, 1); return err },
		func(b *B, _ int, d *uint64) error { return shmem.AtomicFetchAddNBI(d, b.words, wCtr, 1, 1) }, false},
	{"add",
		func(b *B, _ int) error { return shmem.AtomicAdd(b.words, wCtr, 1, 1) },
		func(b *B, _ int, _ *uint64) error { return shmem.AtomicAdd(b.words, wCtr, 1, 1) }, true},
	{"inc",
		func(b *B, _ int) error { return shmem.AtomicInc(b.words, wCtr, 1) },
		func(b *B, _ int, _ *uint64) error { return shmem.AtomicInc(b.words, wCtr, 1) }, true},
	{"fetch-inc",
		func(b *B, _ int) error { _, err := shmem.AtomicFetchInc(b.words, wCtr, 1); return err },
		func(b *B, _ int, d *uint64) error { return shmem.AtomicFetchIncNBI(d, b.words, wCtr, 1) }, false},
	// compare-swap always succeeds, as in OSU: the word holds the call
	// number (set up by the loop) and each call moves it to the next.
	{"compare-swap",
		func(b *B, i int) error {
			_, err := shmem.AtomicCompareSwap(b.words, wCtr, uint64(i), uint64(i+1), 1)
			return err
		},
		func(b *B, i int, d *uint64) error {
			return shmem.AtomicCompareSwapNBI(d, b.words, wCtr, uint64(i), uint64(i+1), 1)
		}, false},
	{"swap",
		func(b *B, i int) error { _, err := shmem.AtomicSwap(b.words, wCtr, uint64(i), 1); return err },
		func(b *B, i int, d *uint64) error { return shmem.AtomicSwapNBI(d, b.words, wCtr, uint64(i), 1) }, false},
	{"fetch",
		func(b *B, _ int) error { _, err := shmem.AtomicFetch(b.words, wCtr, 1); return err },
		func(b *B, _ int, d *uint64) error { return shmem.AtomicFetchNBI(d, b.words, wCtr, 1) }, false},
}

func init() {
	for _, op := range atomicOps {
		Register(&Suite{Name: op.name, Group: "atomics", Pair: true, Default: true,
			Doc: "osu_oshm_atomics " + op.name + " on a 64-bit word of PE 1: latency of the blocking call" + voidDoc(op) + "; " +
				"rate of windows of the non-blocking form, each window then Quiet",
			Run: func(b *B, _ int) error {
				if err := b.figure(figure{suite: op.name, size: 8, metric: report.Latency,
					run: b.atomicLoop(op, 1, false), limit: b.atomicLimit(op.name, report.Latency)}); err != nil {
					return err
				}
				return b.figure(figure{suite: op.name, size: 8, metric: report.Rate,
					run: b.atomicLoop(op, b.cfg.Window, true), limit: b.atomicLimit(op.name, report.Rate)})
			}})
	}
}

func voidDoc(op atomicOp) string {
	if op.void {
		return " (over tcp: the call and Quiet)"
	}
	return ""
}

// atomicLoop is n windows of window calls of op from PE 0 on PE 1's
// word; with nbi, the non-blocking form and a Quiet per window (over
// TCP, a void op's blocking form too: see above).
func (b *B) atomicLoop(op atomicOp, window int, nbi bool) measureFn {
	dsts := make([]uint64, window)
	quiet := nbi || (op.void && b.remote())
	return func(n int) (sample, error) {
		if b.rank != 0 {
			return sample{}, nil
		}
		// Start the call numbers at the word's value, so that every
		// compare-swap succeeds.
		first, err := shmem.AtomicFetch(b.words, wCtr, 1)
		if err != nil {
			return sample{}, err
		}
		i := int(first)
		start := time.Now()
		for range n {
			for w := range window {
				if nbi {
					err = op.nbi(b, i, &dsts[w])
				} else {
					err = op.blocking(b, i)
				}
				if err != nil {
					return sample{}, err
				}
				i++
			}
			if quiet {
				if err := b.pe.Quiet(); err != nil {
					return sample{}, err
				}
			}
		}
		return timed(start, n*window, 8*n*window), nil
	}
}
