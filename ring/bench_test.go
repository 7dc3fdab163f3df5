package ring

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/boot"
	"github.com/goshmem/goshmem/shmem"
)

// The benchmarks run one lane between PE 0 and PE 1 and, in the same
// benchmark call, the plain shmem exchange a program would write without
// ring, for the same payload size and count. In both, the receiver does
// the least a program does with a message it keeps: it copies the
// payload into a buffer of its own.
//
//   - rate: PE 0 sends b.N messages; PE 1 takes them (Poll, or Recv when
//     nothing is there), copies each and acknowledges each batch. The
//     baseline is the blocking put+signal: PE 0 PutSignals into PE 1's
//     one receive buffer; PE 1 SignalWaitUntils it, copies the payload
//     and signals back that the buffer is free; PE 0 waits for that
//     before the next put (without the wait a put could overwrite a
//     message not yet read). Reported: ns/op (ring, per message),
//     put+signal-ns/op, x-put+signal (baseline time over ring time:
//     above 1 the ring is faster), Mmsg/s, and, as a ceiling rather than
//     a baseline, stream-ns/op: PutSignal in a loop with no flow control
//     and no reader (PE 1 waits in a barrier meanwhile).
//   - latency: b.N ping-pong round trips; one-way time = half a round
//     trip. The baseline is the same ping-pong with PutSignal and
//     SignalWaitUntil; noread-ns/op is that ping-pong with receivers that
//     never read the payload (a ceiling).
//
// Over goroutine PEs (shmem.Run), over two processes (PE 1 is this test
// binary re-executed, obeying commands PE 0 writes into its heap), and
// over loopback TCP (goroutine PEs on two pretend hosts):
//
//	go test -run '^$' -bench . -benchtime 20000x ./ring/

var benchSizes = []int{8, 64, 512, 4 << 10, 32 << 10, 256 << 10}

func sizeName(n int) string {
	if n >= 1<<10 {
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// benchDepth is the lane depth for a payload size: deep for small
// messages, within a few MiB of bulk areas for large ones.
func benchDepth(size int) int {
	return max(4, min(64, (2<<20)/max(size, 1)))
}

const benchHeap = 64 << 20

// ringRate: PE 0 sends count messages of size bytes on a Safe lane; PE 1
// receives, copies and acknowledges. It returns the time from the first
// send to the moment PE 1 had them all.
func ringRate(pe *shmem.PE, size, count, inlineMax int) (time.Duration, error) {
	r, err := newRing(pe, []Lane{{From: 0, To: 1, Depth: benchDepth(size), Capacity: size}}, Safe, inlineMax)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	if err := pe.BarrierAll(); err != nil {
		return 0, err
	}
	buf := make([]byte, size)
	start := time.Now()
	switch pe.MyPE() {
	case 0:
		for i := 0; i < count; i++ {
			if _, err := r.Send(1, buf); err != nil {
				return 0, err
			}
		}
	case 1:
		var batch []Message
		for got := 0; got < count; {
			batch, err = r.PollAppend(batch[:0])
			if err != nil {
				return 0, err
			}
			if len(batch) == 0 {
				m, err := r.Recv()
				if err != nil {
					return 0, err
				}
				batch = append(batch, m)
			}
			for _, m := range batch {
				copy(buf, m.Data)
			}
			got += len(batch)
			if err := r.Ack(0, batch[len(batch)-1].Seq); err != nil {
				return 0, err
			}
		}
	}
	err = pe.BarrierAll()
	return time.Since(start), err
}

// benchObjs are the baseline's symmetric objects.
type benchObjs struct {
	buf  shmem.Sym[byte]
	sig  shmem.Sym[uint64] // messages put (rate: on PE 1; latency: on both)
	free shmem.Sym[uint64] // on PE 0: messages PE 1 is done with (rate)
}

func allocObjs(pe *shmem.PE, size int) (*benchObjs, func(), error) {
	o := &benchObjs{}
	var err error
	if o.buf, err = shmem.Malloc[byte](pe, size); err != nil {
		return nil, nil, err
	}
	if o.sig, err = shmem.Malloc[uint64](pe, 8); err != nil {
		return nil, nil, err
	}
	if o.free, err = shmem.Malloc[uint64](pe, 8); err != nil {
		return nil, nil, err
	}
	return o, func() { shmem.Free(o.free); shmem.Free(o.sig); shmem.Free(o.buf) }, pe.BarrierAll()
}

// putSignalRate is the blocking put+signal baseline of ringRate.
func putSignalRate(pe *shmem.PE, size, count int) (time.Duration, error) {
	o, free, err := allocObjs(pe, size)
	if err != nil {
		return 0, err
	}
	defer free()
	buf := make([]byte, size)
	start := time.Now()
	switch pe.MyPE() {
	case 0:
		for i := 1; i <= count; i++ {
			if i > 1 {
				if err := shmem.WaitUntil(o.free, 0, shmem.CmpGE, uint64(i-1)); err != nil {
					return 0, err
				}
			}
			if err := shmem.PutSignal(o.buf, buf, o.sig, uint64(i), shmem.SignalSet, 1); err != nil {
				return 0, err
			}
		}
	case 1:
		for i := 1; i <= count; i++ {
			if _, err := shmem.SignalWaitUntil(o.sig, shmem.CmpGE, uint64(i)); err != nil {
				return 0, err
			}
			copy(buf, o.buf.Local())
			if err := shmem.AtomicSet(o.free, 0, uint64(i), 0); err != nil {
				return 0, err
			}
		}
	}
	err = pe.BarrierAll()
	return time.Since(start), err
}

// streamRate is PutSignal with no flow control: a ceiling, not a
// messaging pattern.
func streamRate(pe *shmem.PE, size, count int) (time.Duration, error) {
	o, free, err := allocObjs(pe, size)
	if err != nil {
		return 0, err
	}
	defer free()
	start := time.Now()
	switch pe.MyPE() {
	case 0:
		src := make([]byte, size)
		for i := 1; i <= count; i++ {
			if err := shmem.PutSignal(o.buf, src, o.sig, uint64(i), shmem.SignalSet, 1); err != nil {
				return 0, err
			}
		}
	}
	// PE 1 waits in the barrier, not on the signal: a PE asleep on the
	// signal word would make every put wake it with a system call.
	err = pe.BarrierAll()
	el := time.Since(start)
	if err == nil && pe.MyPE() == 1 && o.sig.Local()[0] != uint64(count) {
		err = fmt.Errorf("stream: signal %d after %d puts", o.sig.Local()[0], count)
	}
	return el, err
}

// ringLatency: count round trips on lanes 0→1 and 1→0.
func ringLatency(pe *shmem.PE, size, count, inlineMax int) (time.Duration, error) {
	d := benchDepth(size)
	r, err := newRing(pe, []Lane{{From: 0, To: 1, Depth: d, Capacity: size}, {From: 1, To: 0, Depth: d, Capacity: size}}, Safe, inlineMax)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	if err := pe.BarrierAll(); err != nil {
		return 0, err
	}
	buf := make([]byte, size)
	me := pe.MyPE()
	start := time.Now()
	for i := 0; i < count; i++ {
		if me == 0 {
			if _, err := r.Send(1, buf); err != nil {
				return 0, err
			}
		}
		m, err := r.Recv()
		if err != nil {
			return 0, err
		}
		copy(buf, m.Data)
		if me == 1 {
			if _, err := r.Send(0, buf); err != nil {
				return 0, err
			}
		}
		// Acknowledgements are cumulative: one per half lane keeps the
		// sender from ever waiting, and off the round trip.
		if m.Seq%uint64(d/2) == 0 {
			if err := r.Ack(m.Origin, m.Seq); err != nil {
				return 0, err
			}
		}
	}
	el := time.Since(start)
	return el, pe.BarrierAll()
}

// putSignalLatency is the PutSignal + SignalWaitUntil ping-pong; with
// read, each receiver copies the payload out before it replies.
func putSignalLatency(pe *shmem.PE, size, count int, read bool) (time.Duration, error) {
	o, free, err := allocObjs(pe, size)
	if err != nil {
		return 0, err
	}
	defer free()
	buf := make([]byte, size)
	me := pe.MyPE()
	start := time.Now()
	for i := 1; i <= count; i++ {
		if me == 0 {
			if err := shmem.PutSignal(o.buf, buf, o.sig, uint64(i), shmem.SignalSet, 1); err != nil {
				return 0, err
			}
		}
		if _, err := shmem.SignalWaitUntil(o.sig, shmem.CmpGE, uint64(i)); err != nil {
			return 0, err
		}
		if read {
			copy(buf, o.buf.Local())
		}
		if me == 1 {
			if err := shmem.PutSignal(o.buf, buf, o.sig, uint64(i), shmem.SignalSet, 0); err != nil {
				return 0, err
			}
		}
	}
	el := time.Since(start)
	return el, pe.BarrierAll()
}

// Benchmark steps, run by both PEs alike; numbered for the process route.
const (
	stepExit       = 1
	stepRingRate   = 2
	stepPutSigRate = 3
	stepStream     = 4
	stepRingLat    = 5
	stepPutSigLat  = 6
	stepNoReadLat  = 7
	stepComm       = 8 // BenchmarkComm's steps (inlineMax is the window)
)

// runStep runs one step on this PE; PE 0's time is the measurement.
func runStep(pe *shmem.PE, step, size, count, inlineMax int) (time.Duration, error) {
	switch step {
	case stepRingRate:
		return ringRate(pe, size, count, inlineMax)
	case stepPutSigRate:
		return putSignalRate(pe, size, count)
	case stepStream:
		return streamRate(pe, size, count)
	case stepRingLat:
		return ringLatency(pe, size, count, inlineMax)
	case stepPutSigLat:
		return putSignalLatency(pe, size, count, true)
	case stepNoReadLat:
		return putSignalLatency(pe, size, count, false)
	case stepComm:
		return commSteps(pe, size, count, inlineMax)
	}
	return 0, fmt.Errorf("unknown benchmark step %d", step)
}

// A benchmark kind: the ring's step, the baseline's, and a ceiling.
type benchKind struct {
	name                string
	ring, base, ceiling int
	ceilingName         string
	perCount            int // messages per count (1), or one-way trips (2)
}

var kinds = []benchKind{
	{"rate", stepRingRate, stepPutSigRate, stepStream, "stream-ns/op", 1},
	{"latency", stepRingLat, stepPutSigLat, stepNoReadLat, "noread-ns/op", 2},
}

// steps runs a kind's steps through run and reports the metrics.
func measure(b *testing.B, k benchKind, size, inlineMax int, ceiling bool,
	run func(step, size, count, inlineMax int) (time.Duration, error)) {
	var t [3]time.Duration
	for i, step := range []int{k.ring, k.base, k.ceiling} {
		if i == 2 && !ceiling {
			break
		}
		var err error
		if t[i], err = run(step, size, b.N, inlineMax); err != nil {
			b.Fatal(err)
		}
	}
	per := float64(b.N * k.perCount)
	ns := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / per }
	b.ReportMetric(ns(t[0]), "ns/op")
	b.ReportMetric(ns(t[1]), "put+signal-ns/op")
	b.ReportMetric(ns(t[1])/ns(t[0]), "x-put+signal")
	if ceiling {
		b.ReportMetric(ns(t[2]), k.ceilingName)
	}
	if k.name == "rate" {
		b.ReportMetric(1e3/ns(t[0]), "Mmsg/s")
	}
}

// goroutineRun runs one step over two goroutine PEs.
func goroutineRun(step, size, count, inlineMax int) (time.Duration, error) {
	var t time.Duration
	err := shmem.Run(2, func(pe *shmem.PE) error {
		d, err := runStep(pe, step, size, count, inlineMax)
		if pe.MyPE() == 0 {
			t = d
		}
		return err
	}, shmem.WithHeapSize(benchHeap), shmem.WithTimeout(10*time.Minute))
	return t, err
}

// tcpRun runs one step over two goroutine PEs on different pretend
// hosts: the lane and the baseline go over loopback TCP (netmesh).
func tcpRun(step, size, count, inlineMax int) (time.Duration, error) {
	var t time.Duration
	err := shmem.Run(2, func(pe *shmem.PE) error {
		d, err := runStep(pe, step, size, count, inlineMax)
		if pe.MyPE() == 0 {
			t = d
		}
		return err
	}, shmem.WithHeapSize(benchHeap), shmem.WithTimeout(10*time.Minute), shmem.WithHosts([]string{"a", "b"}))
	return t, err
}

// BenchmarkLane is the table of docs/ring.md: rate and latency for every
// size with the default inline limit (messages above InlineMax take the
// bulk path), over goroutine PEs, over processes, and over TCP.
func BenchmarkLane(b *testing.B) {
	for _, k := range kinds {
		for _, size := range benchSizes {
			b.Run("goroutines/"+k.name+"/"+sizeName(size), func(b *testing.B) {
				measure(b, k, size, InlineMax, true, goroutineRun)
			})
		}
	}
	for _, k := range kinds {
		for _, size := range benchSizes {
			b.Run("tcp/"+k.name+"/"+sizeName(size), func(b *testing.B) {
				measure(b, k, size, InlineMax, true, tcpRun)
			})
		}
	}
	for _, k := range kinds {
		for _, size := range benchSizes {
			b.Run("processes/"+k.name+"/"+sizeName(size), func(b *testing.B) {
				j := benchJobFor(b)
				measure(b, k, size, InlineMax, true, j.run)
			})
		}
	}
}

// BenchmarkCrossover compares the inline and the bulk path at the sizes
// where one takes over from the other, over processes.
func BenchmarkCrossover(b *testing.B) {
	for _, k := range kinds {
		for _, size := range []int{256, 512, 1 << 10, 2 << 10, 4 << 10, 8 << 10} {
			for _, path := range []string{"inline", "bulk"} {
				inlineMax := size
				if path == "bulk" {
					inlineMax = 64
				}
				b.Run(k.name+"/"+sizeName(size)+"/"+path, func(b *testing.B) {
					j := benchJobFor(b)
					measure(b, k, size, inlineMax, false, j.run)
				})
			}
		}
	}
}

// The process route: this benchmark process is PE 0 of a two-PE job; PE
// 1 is this test binary re-executed as the "bench-helper" scenario. PE 0
// writes each step into PE 1's command words; both then run it.

// benchJob is PE 0 of a running benchmark job.
type benchJob struct {
	pe   *shmem.PE
	cmd  shmem.Sym[int64] // on PE 1: seq, step, size, count, inlineMax
	srv  *boot.Server
	proc *exec.Cmd
	seq  int64
}

var theJob *benchJob // started by the first process benchmark, ended by TestMain's exit

func benchJobFor(b *testing.B) *benchJob {
	b.Helper()
	if theJob == nil {
		j, err := startBenchJob()
		if err != nil {
			b.Fatal(err)
		}
		theJob = j
	}
	return theJob
}

func benchEnv(rank int, id, key, addr string) []string {
	return []string{
		boot.EnvRank + "=" + strconv.Itoa(rank), boot.EnvSize + "=2",
		boot.EnvJobID + "=" + id, boot.EnvKey + "=" + key, boot.EnvRendezvous + "=" + addr,
		"SHMEM_SYMMETRIC_SIZE=" + strconv.Itoa(benchHeap), "GOSHMEM_TIMEOUT=600s",
	}
}

func startBenchJob() (*benchJob, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	keyb := make([]byte, boot.KeySize)
	rand.Read(keyb)
	key := hex.EncodeToString(keyb)
	id := "ring-bench-" + strconv.Itoa(os.Getpid())
	j := &benchJob{srv: boot.NewServer(ln, id, keyb, 2)}
	go j.srv.Serve(context.Background())
	c := exec.Command(os.Args[0], "-test.run=^$")
	c.Env = append(os.Environ(), append(benchEnv(1, id, key, ln.Addr().String()), envScenario+"=bench-helper")...)
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	if err := c.Start(); err != nil {
		return nil, err
	}
	j.proc = c
	for _, kv := range benchEnv(0, id, key, ln.Addr().String()) {
		k, v, _ := strings.Cut(kv, "=")
		os.Setenv(k, v)
	}
	j.pe, err = shmem.Init()
	for _, kv := range benchEnv(0, id, key, ln.Addr().String()) {
		k, _, _ := strings.Cut(kv, "=")
		os.Unsetenv(k)
	}
	if err == nil {
		j.cmd, err = shmem.Malloc[int64](j.pe, 8)
	}
	if err != nil {
		c.Process.Kill()
		c.Wait()
		j.srv.Close()
		return nil, err
	}
	return j, nil
}

// run has PE 1 start step and runs it on PE 0.
func (j *benchJob) run(step, size, count, inlineMax int) (time.Duration, error) {
	j.seq++
	if err := shmem.Put(j.cmd.Slice(1, 5), []int64{int64(step), int64(size), int64(count), int64(inlineMax)}, 1); err != nil {
		return 0, err
	}
	if err := j.pe.Fence(); err != nil {
		return 0, err
	}
	if err := shmem.AtomicSet(j.cmd, 0, j.seq, 1); err != nil {
		return 0, err
	}
	return runStep(j.pe, step, size, count, inlineMax)
}

func (j *benchJob) stop() {
	j.seq++
	shmem.Put(j.cmd.Slice(1, 2), []int64{stepExit}, 1)
	j.pe.Fence()
	shmem.AtomicSet(j.cmd, 0, j.seq, 1)
	j.pe.Finalize()
	j.proc.Wait()
	j.srv.Close()
}

// The helper PE's side.
var _ = register("bench-helper", func(pe *shmem.PE) error {
	cmd, err := shmem.Malloc[int64](pe, 8)
	if err != nil {
		return err
	}
	var seen int64
	for {
		err := shmem.WaitUntil(cmd, 0, shmem.CmpGT, seen)
		if errors.Is(err, shmem.ErrTimeout) {
			continue
		}
		if err != nil {
			return err
		}
		seen++
		c := cmd.Local()
		if c[1] == stepExit {
			return nil
		}
		if _, err := runStep(pe, int(c[1]), int(c[2]), int(c[3]), int(c[4])); err != nil {
			return err
		}
	}
})
