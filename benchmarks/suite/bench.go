package suite

import (
	"fmt"
	"io"
	"math"
	"time"

	"github.com/goshmem/goshmem/benchmarks/report"
	"github.com/goshmem/goshmem/shmem"
)

// B is one PE's side of a goshbench job: the PE, the symmetric objects
// every suite shares, and (on PE 0) the measurements so far.
//
// Every PE runs the same suites with the same arguments (SPMD). The
// figure harness keeps them in step with barriers, and PE 0 decides
// every calibrated iteration count and broadcasts it, so that PEs that
// answer PE 0 (ping-pong partners, barrier members) loop the same
// number of times.
type B struct {
	pe         *shmem.PE
	cfg        Config
	rank, npes int

	buf   shmem.Sym[byte]   // payload: cfg.MaxSize() bytes, then one slot per PE for the rate suites
	words shmem.Sym[uint64] // synchronisation words, one per 128-byte stretch (w* indices)
	xch   shmem.Sym[int64]  // PE 0's gather slots (3 per PE), then every PE's broadcast slot (3*npes) and TCP port slot (tcpPortSlot)

	src, dst []byte // local Go buffers of cfg.MaxSize() bytes

	pingSeq, rawSeq uint64       // last round trip of the WaitUntil and raw ping-pongs (same on PEs 0 and 1)
	vecSeq          uint64       // last round trip of the vector-wait ping-pong (extended.go)
	ext             *extSyms     // the objects of extended.go's suites, once one has run
	tcp             *tcpLink     // between PEs 0 and 1, opened by the first TCP limit built
	tcpErr          error        // why tcp could not be opened
	linked          bool         // link has run
	oversub         bool         // the job's PEs outnumber the CPUs: the TCP limits do not spin (tcpRTT)
	ring            *tcpRingLink // the tcp-ring limit's connections (tcpring.go)
	ringErr         error
	ringed          bool     // ringLink has run
	star            *tcpStar // the tcp-barrier limit's connections (tcpbarrier.go)
	starErr         error
	starred         bool // starLink has run

	progress io.Writer // PE 0: stderr
	figures  []report.Measurement
	limits   []report.Measurement
	skipped  []report.Skip // what this job did not measure, and why
}

// Indices into B.words. Each word has a 128-byte stretch to itself (16
// words), so that no two of them share a cache line or an adjacent-line
// prefetch pair.
const (
	wFlag = 0  // WaitUntil ping-pong
	wRaw  = 16 // raw cache-line ping-pong
	wCtr  = 32 // atomics target
	nWord = 48

	slotBytes = 128 // per-sender destination slot of the rate suites
)

func newB(pe *shmem.PE, cfg Config, progress io.Writer) (*B, error) {
	b := &B{pe: pe, cfg: cfg, rank: pe.MyPE(), npes: pe.NPEs(), progress: progress}
	var err error
	if b.buf, err = shmem.Malloc[byte](pe, cfg.MaxSize()+b.npes*slotBytes); err != nil {
		return nil, err
	}
	if b.words, err = shmem.Malloc[uint64](pe, nWord); err != nil {
		return nil, err
	}
	if b.xch, err = shmem.Malloc[int64](pe, 3*b.npes+16); err != nil {
		return nil, err
	}
	b.src, b.dst = make([]byte, cfg.MaxSize()), make([]byte, cfg.MaxSize())
	fillPattern(b.src)
	clear(b.dst) // touch every page now, not in the first repetition
	return b, pe.BarrierAll()
}

// fillPattern writes byte(i) at every index i of p: 256 bytes one by
// one, then doubling copies (a byte loop over megabytes is slow under
// the race detector, which CI runs goshbench -quick under).
func fillPattern(p []byte) {
	for i := range min(len(p), 256) {
		p[i] = byte(i)
	}
	for n := 256; n < len(p); n *= 2 {
		copy(p[n:], p[:n])
	}
}

// sample is one PE's outcome of one repetition: ops operations moving
// bytes bytes in ns nanoseconds. PEs that only answer return zero.
// wall, when set, is the repetition's whole duration where ns times only
// part of it (the OSU collectives time each call, not the barrier after
// it); calibration sizes repetitions by it.
type sample struct {
	ns, ops, bytes float64
	wall           float64
}

// elapsed is how long the repetition took.
func (s sample) elapsed() float64 {
	if s.wall > 0 {
		return s.wall
	}
	return s.ns
}

func timed(start time.Time, ops, bytes int) sample {
	return sample{ns: float64(time.Since(start).Nanoseconds()), ops: float64(ops), bytes: float64(bytes)}
}

// value is the sample in metric m's unit.
func (s sample) value(m report.Metric) float64 {
	switch m {
	case report.Latency:
		return s.ns / s.ops // ns per operation
	case report.Bandwidth:
		return s.bytes / s.ns // bytes per ns = GB/s
	case report.Rate:
		return s.ops / s.ns * 1e3 // operations per ns * 1e3 = Mops/s
	}
	panic(fmt.Sprintf("suite: unknown metric %q", m))
}

// measureFn runs n iterations of something on every PE of the job and
// returns this PE's sample. Every PE calls it with the same n.
type measureFn func(n int) (sample, error)

// limit is what a figure is held to: another measureFn, run in
// alternation with the figure, reported in the figure's metric.
type limit struct {
	name string
	run  measureFn
	agg  bool // combine all PEs' samples (see figure.agg)
}

// figure is one number of the report.
type figure struct {
	suite  string
	size   int
	metric report.Metric
	run    measureFn
	// agg: the figure is the whole job's: operations and bytes summed
	// over PEs, time the longest PE's. Otherwise it is PE 0's sample.
	agg bool
	// warm is the least number of untimed iterations of run before its
	// repetitions when -warmup is not given (0: time alone decides; see
	// calibrate). A suite whose steady state needs more than a few
	// milliseconds of warm-up says so here.
	warm  int
	limit limit
	// extra are further limits, measured like limit (calibrated, then in
	// alternation: figure, limit, extra..., figure, ...) and reported
	// beside the figure's record (report.Run.ExtraLimits).
	extra []limit
}

// sync is a barrier of all PEs.
func (b *B) sync() error { return b.pe.BarrierAll() }

// bcast gives every PE PE 0's v.
func (b *B) bcast(v int64) (int64, error) {
	slot := 3 * b.npes
	if b.rank == 0 {
		for r := 1; r < b.npes; r++ {
			if err := shmem.P(b.xch, slot, v, r); err != nil {
				return 0, err
			}
		}
	}
	if err := b.sync(); err != nil {
		return 0, err
	}
	if b.rank != 0 {
		v = b.xch.Local()[slot]
	}
	// No PE may broadcast again before every PE has read this value.
	return v, b.sync()
}

// gather gives PE 0 the job's sample: the longest time, and the sums of
// operations and bytes.
func (b *B) gather(s sample) (sample, error) {
	for i, v := range []float64{s.ns, s.ops, s.bytes} {
		if err := shmem.P(b.xch, 3*b.rank+i, int64(v), 0); err != nil {
			return sample{}, err
		}
	}
	if err := b.sync(); err != nil {
		return sample{}, err
	}
	if b.rank != 0 {
		return sample{}, nil
	}
	// PE 0 reads before it enters any other barrier, so no PE can write
	// the slots again before it has read them.
	var all sample
	x := b.xch.Local()
	for r := 0; r < b.npes; r++ {
		all.ns = math.Max(all.ns, float64(x[3*r]))
		all.ops += float64(x[3*r+1])
		all.bytes += float64(x[3*r+2])
	}
	return all, nil
}

// rep runs one repetition of fn with n iterations, started together on
// every PE; on PE 0 it returns the repetition's sample.
func (b *B) rep(fn measureFn, n int, agg bool) (sample, error) {
	if err := b.sync(); err != nil {
		return sample{}, err
	}
	s, err := fn(n)
	if err != nil {
		return sample{}, err
	}
	if agg {
		return b.gather(s)
	}
	return s, nil
}

// calibrate warms fn up and picks its iterations per repetition: the
// configured -warmup and -iters when set, else a warm-up of about
// RepTime/4, and of at least warm iterations, and as many iterations as
// fill RepTime (1 to maxAutoIters). PE 0 decides; every PE gets the
// same answer.
func (b *B) calibrate(fn measureFn, agg bool, warm int) (int, error) {
	target := float64(b.cfg.RepTime.Nanoseconds())
	var perIter float64
	if b.cfg.Warmup > 0 {
		s, err := b.rep(fn, b.cfg.Warmup, agg)
		if err != nil {
			return 0, err
		}
		perIter = s.elapsed() / float64(b.cfg.Warmup)
	} else {
		// Grow the warm-up geometrically until it has lasted RepTime/4.
		k, spent, done := 1, 0.0, 0
		for k > 0 {
			s, err := b.rep(fn, k, agg)
			if err != nil {
				return 0, err
			}
			spent += s.elapsed()
			done += k
			perIter = s.elapsed() / float64(k)
			next := int64(0)
			switch {
			case done < warm:
				next = int64(min(k*4, warm-done))
			case spent < target/4 && k < maxAutoIters:
				next = int64(min(k*4, maxAutoIters))
			}
			nk, err := b.bcast(next)
			if err != nil {
				return 0, err
			}
			k = int(nk)
		}
	}
	n := int64(b.cfg.Iters)
	if n == 0 {
		n = int64(min(max(target/math.Max(perIter, 1), 1), maxAutoIters))
	}
	got, err := b.bcast(n)
	return int(got), err
}

// figure measures f: calibration, then Reps repetitions of the figure
// and of its limit in alternation. PE 0 records the result.
func (b *B) figure(f figure) error {
	n, err := b.calibrate(f.run, f.agg, f.warm)
	if err != nil {
		return err
	}
	nl, err := b.calibrate(f.limit.run, f.limit.agg, 0)
	if err != nil {
		return err
	}
	m := report.Measurement{Suite: f.suite, Transport: b.cfg.Transport, PEs: b.npes, Size: f.size, Metric: f.metric,
		Iters: n, LimitName: f.limit.name, LimitIters: nl}
	for _, x := range f.extra {
		nx, err := b.calibrate(x.run, x.agg, 0)
		if err != nil {
			return err
		}
		m.Extra = append(m.Extra, report.ExtraMeasurement{Name: x.name, Iters: nx})
	}
	for range b.cfg.Reps {
		s, err := b.rep(f.run, n, f.agg)
		if err != nil {
			return err
		}
		l, err := b.rep(f.limit.run, nl, f.limit.agg)
		if err != nil {
			return err
		}
		m.Samples = append(m.Samples, s.value(f.metric))
		m.LimitSamples = append(m.LimitSamples, l.value(f.metric))
		for i, x := range f.extra {
			e, err := b.rep(x.run, m.Extra[i].Iters, x.agg)
			if err != nil {
				return err
			}
			m.Extra[i].Samples = append(m.Extra[i].Samples, e.value(f.metric))
		}
	}
	if b.rank == 0 {
		b.figures = append(b.figures, m)
	}
	return nil
}

// skip records (on PE 0) that the job did not measure what, and why;
// goshbench prints it and lists it in the run. Every PE calls it at the
// same point, so that no PE waits for a measurement the others skipped.
func (b *B) skip(what, reason string) {
	if b.rank == 0 {
		b.skipped = append(b.skipped, report.Skip{What: what, Reason: reason})
	}
}

// reference measures a limit on its own, for the run's table of limits.
func (b *B) reference(name string, size int, metric report.Metric, l limit) error {
	n, err := b.calibrate(l.run, l.agg, 0)
	if err != nil {
		return err
	}
	m := report.Measurement{Suite: name, Transport: b.cfg.Transport, PEs: b.npes, Size: size, Metric: metric, Iters: n}
	for range b.cfg.Reps {
		s, err := b.rep(l.run, n, l.agg)
		if err != nil {
			return err
		}
		m.Samples = append(m.Samples, s.value(metric))
	}
	if b.rank == 0 {
		b.limits = append(b.limits, m)
	}
	return nil
}
