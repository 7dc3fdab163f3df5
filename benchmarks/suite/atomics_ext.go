package suite

import (
	"time"

	"github.com/goshmem/goshmem/benchmarks/report"
	"github.com/goshmem/goshmem/shmem"
)

// The OpenSHMEM 1.5/1.6 additions, each in its group's file beside the
// figures it extends (atomics_ext.go, rma_ext.go, sync_ext.go):
//
//   - fetch and swap on float64, float32 and uint32 words of PE 1, as
//     the atomics group measures them on a uint64 word (latency of the
//     blocking call, rate of NBI windows each then Quiet): the float
//     atomics are the integer atomics of their width on the same bits,
//     and these figures show what that costs next to "fetch" and "swap"
//     (uint64) and the uint32 pair;
//   - put-signal-nbi-rate: windows of 8-byte PutSignalNBIs, next to
//     put-nbi-rate;
//   - waituntil-vector: the WaitUntil ping-pong with an 8-element vector
//     wait (WaitUntilAllVector) on each side, next to waituntil.
//
// Each target word has a 128-byte stretch to itself, like B.words'.

// extSyms are the objects of these suites, allocated by the first of
// them that runs (collectively: every PE runs the same suites in order).
type extSyms struct {
	f64  shmem.Sym[float64]
	f32  shmem.Sym[float32]
	u32  shmem.Sym[uint32]
	sig  shmem.Sym[uint64] // PutSignalNBI's signal
	vec  shmem.Sym[uint64] // the vector ping-pong's words
	data shmem.Sym[byte]   // PutSignalNBI's 8-byte payload
}

const vecLen = 8 // elements of the vector wait

func (b *B) extObjects() (*extSyms, error) {
	if b.ext != nil {
		return b.ext, nil
	}
	e := &extSyms{}
	var err error
	if e.f64, err = shmem.Malloc[float64](b.pe, 16); err != nil {
		return nil, err
	}
	if e.f32, err = shmem.Malloc[float32](b.pe, 32); err != nil {
		return nil, err
	}
	if e.u32, err = shmem.Malloc[uint32](b.pe, 32); err != nil {
		return nil, err
	}
	if e.sig, err = shmem.Malloc[uint64](b.pe, 16); err != nil {
		return nil, err
	}
	if e.vec, err = shmem.Malloc[uint64](b.pe, 16); err != nil {
		return nil, err
	}
	if e.data, err = shmem.Malloc[byte](b.pe, 128); err != nil {
		return nil, err
	}
	b.ext = e
	return e, nil
}

// extAtomic is one fetch or swap suite on a word of type T.
type extAtomic struct {
	name  string
	op    string // "fetch" or "swap": the raw atomic of its limit
	width int    // bytes of the word
	run   func(b *B, e *extSyms, window int, nbi bool) measureFn
}

var extAtomics = []extAtomic{
	{"fetch-float64", "fetch", 8, func(b *B, e *extSyms, w int, nbi bool) measureFn { return typedAtomicLoop(b, e.f64, false, w, nbi) }},
	{"swap-float64", "swap", 8, func(b *B, e *extSyms, w int, nbi bool) measureFn { return typedAtomicLoop(b, e.f64, true, w, nbi) }},
	{"fetch-float32", "fetch", 4, func(b *B, e *extSyms, w int, nbi bool) measureFn { return typedAtomicLoop(b, e.f32, false, w, nbi) }},
	{"swap-float32", "swap", 4, func(b *B, e *extSyms, w int, nbi bool) measureFn { return typedAtomicLoop(b, e.f32, true, w, nbi) }},
	{"fetch-uint32", "fetch", 4, func(b *B, e *extSyms, w int, nbi bool) measureFn { return typedAtomicLoop(b, e.u32, false, w, nbi) }},
	{"swap-uint32", "swap", 4, func(b *B, e *extSyms, w int, nbi bool) measureFn { return typedAtomicLoop(b, e.u32, true, w, nbi) }},
}

func init() {
	for _, op := range extAtomics {
		Register(&Suite{Name: op.name, Group: "atomics", Pair: true, Default: true,
			Doc: op.op + " (OpenSHMEM's extended atomics) on a " + op.name[len(op.op)+1:] + " word of PE 1: latency of the blocking call; " +
				"rate of windows of the NBI form, each window then Quiet (compare with " + op.op + ", on a uint64)",
			Run: func(b *B, _ int) error {
				e, err := b.extObjects()
				if err != nil {
					return err
				}
				if err := b.figure(figure{suite: op.name, size: op.width, metric: report.Latency,
					run: op.run(b, e, 1, false), limit: b.atomicLimit(op.op, report.Latency)}); err != nil {
					return err
				}
				return b.figure(figure{suite: op.name, size: op.width, metric: report.Rate,
					run: op.run(b, e, b.cfg.Window, true), limit: b.atomicLimit(op.op, report.Rate)})
			}})
	}
}

// shmemSizeOf is the size of a T in bytes (the atomics' words are 4 or 8).
func shmemSizeOf[T shmem.ExtendedElem]() int {
	switch any(T(0)).(type) {
	case float32, uint32, int32:
		return 4
	}
	return 8
}

// typedAtomicLoop is atomicLoop for a fetch or swap on element 0 of s
// on PE 1: n windows of window calls, the NBI form and a Quiet per window
// when nbi.
func typedAtomicLoop[T shmem.ExtendedElem](b *B, s shmem.Sym[T], swap bool, window int, nbi bool) measureFn {
	dsts := make([]T, window)
	return func(n int) (sample, error) {
		if b.rank != 0 {
			return sample{}, nil
		}
		var err error
		i := 0
		start := time.Now()
		for range n {
			for w := range window {
				switch {
				case swap && nbi:
					err = shmem.AtomicSwapNBI(&dsts[w], s, 0, T(i), 1)
				case swap:
					dsts[0], err = shmem.AtomicSwap(s, 0, T(i), 1)
				case nbi:
					err = shmem.AtomicFetchNBI(&dsts[w], s, 0, 1)
				default:
					dsts[0], err = shmem.AtomicFetch(s, 0, 1)
				}
				if err != nil {
					return sample{}, err
				}
				i++
			}
			if nbi {
				if err := b.pe.Quiet(); err != nil {
					return sample{}, err
				}
			}
		}
		return timed(start, n*window, shmemSizeOf[T]()*n*window), nil
	}
}
