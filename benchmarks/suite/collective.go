package suite

import (
	"math"
	"time"

	"github.com/goshmem/goshmem/benchmarks/report"
	"github.com/goshmem/goshmem/collective"
	"github.com/goshmem/goshmem/shmem"
)

// The collectives (package collective), as OSU Micro-Benchmarks define
// them: osu_oshm_broadcast, osu_oshm_reduce, osu_allreduce,
// osu_oshm_fcollect and osu_oshm_alltoall. Each suite gives two figures:
//
//   - <suite>: OSU's definition. Every PE times each call on its own and
//     a BarrierAll, not timed, follows each call; the figure is the mean
//     time per call, averaged over the PEs.
//   - <suite>-loop: every PE calls the collective n times back to back
//     (the ownership rule of docs/collectives.md needs no barrier between
//     calls); the latency per call, averaged over the PEs. With PEs
//     outnumbering cores this also counts the time a PE waits for the
//     others to be scheduled, which OSU's figure leaves to the barrier.
//
// Each is held to the limit of moving size bytes once (copy() over shared
// memory, the raw TCP round trip over tcp), measured in the same job.
//
//   - broadcast: root 0 broadcasts size bytes (bytes) to every PE.
//   - reduce: Sum of size bytes of int64 to root 0.
//   - allreduce: Sum of size bytes of float64 to every PE.
//   - fcollect: every PE contributes size bytes (bytes); each gets
//     size*P.
//   - alltoall: size bytes (bytes) from every PE to every PE.
//
// Sizes below one element of the suite's type run with one element.
// The buffers are allocated collectively per figure, outside the timed
// loops, and freed after it.

// collSizes are the collective suites' sizes when the command line
// chose none: 8 B to 16 MiB.
var collSizes = []int{8, 64, 512, 4 << 10, 32 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20}

func init() {
	for _, c := range []struct {
		name, doc string
		run       func(b *B, size int) (collLoops, func() error, error)
	}{
		{"broadcast", "osu_oshm_broadcast: root 0 broadcasts size bytes to all PEs; latency per call, averaged over PEs",
			func(b *B, size int) (collLoops, func() error, error) {
				return collLoop(b, size, 1, 1, func(t *shmem.Team, d, s shmem.Sym[byte], n int) error {
					return collective.Broadcast(t, d, s, 0)
				})
			}},
		{"reduce", "osu_oshm_reduce: sum reduction of size bytes of int64 to root 0; latency per call, averaged over PEs",
			func(b *B, size int) (collLoops, func() error, error) {
				return collLoop(b, size, 1, 1, func(t *shmem.Team, d, s shmem.Sym[int64], n int) error {
					return collective.Reduce(t, d, s, collective.Sum, 0)
				})
			}},
		{"allreduce", "osu_allreduce: sum of size bytes of float64 to all PEs; latency per call, averaged over PEs",
			func(b *B, size int) (collLoops, func() error, error) {
				return collLoop(b, size, 1, 1, func(t *shmem.Team, d, s shmem.Sym[float64], n int) error {
					return collective.AllReduce(t, d, s, collective.Sum)
				})
			}},
		{"fcollect", "osu_oshm_fcollect: every PE contributes size bytes, every PE gets them all; latency per call, averaged over PEs",
			func(b *B, size int) (collLoops, func() error, error) {
				return collLoop(b, size, 1, b.npes, func(t *shmem.Team, d, s shmem.Sym[byte], n int) error {
					return collective.FCollect(t, d, s)
				})
			}},
		{"alltoall", "osu_oshm_alltoall: size bytes from every PE to every PE; latency per call, averaged over PEs",
			func(b *B, size int) (collLoops, func() error, error) {
				return collLoop(b, size, b.npes, b.npes, func(t *shmem.Team, d, s shmem.Sym[byte], n int) error {
					return collective.AllToAll(t, d, s, n)
				})
			}},
	} {
		Register(&Suite{Name: c.name, Group: "collectives", Sized: true, DefaultSizes: collSizes, Default: true,
			Doc: c.doc + " (and " + c.name + "-loop: back to back, no barrier)",
			Run: func(b *B, size int) error {
				loops, free, err := c.run(b, size)
				if err != nil {
					return err
				}
				lim := b.dataLimit(size, report.Latency, false)
				var extra []limit
				if c.name == "allreduce" && b.remote() {
					// What the bytes of a bandwidth-optimal AllReduce
					// cost on plain loopback TCP, all PEs at once.
					extra = []limit{b.tcpRing(size)}
				}
				err = b.figure(figure{suite: c.name, size: size, metric: report.Latency, run: loops.osu, limit: lim, extra: extra})
				if err == nil {
					err = b.figure(figure{suite: c.name + "-loop", size: size, metric: report.Latency, run: loops.loop, limit: lim, extra: extra})
				}
				if ferr := free(); err == nil {
					err = ferr
				}
				return err
			}})
	}
}

// collLoops are a collective suite's two timed loops: OSU's (each call
// timed, a barrier after it) and back to back.
type collLoops struct{ osu, loop measureFn }

// collLoop allocates src (srcPer blocks) and dst (dstPer blocks) of
// size bytes of T (n elements each) and returns the timed loops of f
// over them, and the function that frees them. A loop's sample, on PE 0,
// is the mean of every PE's time.
func collLoop[T byte | int64 | float64](b *B, size, srcPer, dstPer int,
	f func(t *shmem.Team, dst, src shmem.Sym[T], n int) error) (collLoops, func() error, error) {
	var z T
	n := max(size/sizeOfElem(z), 1)
	src, err := shmem.Malloc[T](b.pe, n*srcPer)
	if err != nil {
		return collLoops{}, nil, err
	}
	dst, err := shmem.Malloc[T](b.pe, n*dstPer)
	if err != nil {
		return collLoops{}, nil, err
	}
	sl := src.Local()
	for i := range sl {
		sl[i] = T(i % 100)
	}
	clear(dst.Local()) // touch every page now, not in the first repetition
	if err := b.sync(); err != nil {
		return collLoops{}, nil, err
	}
	loop := func(iters int) (sample, error) {
		t := b.pe.World()
		start := time.Now()
		for range iters {
			if err := f(t, dst, src, n); err != nil {
				return sample{}, err
			}
		}
		own := timed(start, iters, iters*size)
		return b.meanOverPEs(own)
	}
	osu := func(iters int) (sample, error) {
		t := b.pe.World()
		start := time.Now()
		var in time.Duration
		for range iters {
			t0 := time.Now()
			if err := f(t, dst, src, n); err != nil {
				return sample{}, err
			}
			in += time.Since(t0)
			if err := b.sync(); err != nil {
				return sample{}, err
			}
		}
		wall := float64(time.Since(start).Nanoseconds())
		s, err := b.meanOverPEs(sample{ns: float64(in.Nanoseconds()), ops: float64(iters), bytes: float64(iters * size)})
		s.wall = wall
		return s, err
	}
	free := func() error {
		if err := shmem.Free(dst); err != nil {
			return err
		}
		return shmem.Free(src)
	}
	return collLoops{osu: osu, loop: loop}, free, nil
}

func sizeOfElem[T byte | int64 | float64](z T) int {
	if _, ok := any(z).(byte); ok {
		return 1
	}
	return 8
}

// meanOverPEs gives PE 0 the sample with every PE's time averaged (the
// other PEs get a zero sample). Every PE calls it, after its timed loop.
func (b *B) meanOverPEs(s sample) (sample, error) {
	if err := shmem.P(b.xch, 3*b.rank, int64(s.ns), 0); err != nil {
		return sample{}, err
	}
	if err := b.sync(); err != nil {
		return sample{}, err
	}
	if b.rank != 0 {
		return sample{}, b.sync()
	}
	var sum float64
	for r := range b.npes {
		sum += float64(b.xch.Local()[3*r])
	}
	s.ns = sum / float64(b.npes)
	if math.IsNaN(s.ns) {
		s.ns = 0
	}
	// No PE may write its slot again before PE 0 has read them all.
	return s, b.sync()
}
