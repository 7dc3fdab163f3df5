package shmem_test

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
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/goshmem/goshmem/internal/boot"
	"github.com/goshmem/goshmem/shmem"
)

// The benchmarks run between PEs in separate processes: this benchmark
// process is PE 0 and re-executes the test binary for the others, which
// obey commands PE 0 writes into their heaps. Every benchmark reports,
// next to its own figure, the machine limit measured in the same run:
// copy() of the same size for data movement, and a raw cross-process
// cache-line ping-pong over the same mapping for synchronisation.
//
//	go test -run '^$' -bench . ./shmem/

const benchHeap = 64 << 20

// benchObjs are the symmetric objects of a benchmark job, allocated in
// the same order by every PE.
type benchObjs struct {
	cmd  shmem.Sym[int64]  // on each helper PE: [seq, kind, count, arg]
	done shmem.Sym[int64]  // on PE 0: helpers add one per finished command
	buf  shmem.Sym[byte]   // 4 MiB of payload
	ctr  shmem.Sym[int64]  // atomic target
	flag shmem.Sym[int64]  // WaitUntil ping-pong
	raw  shmem.Sym[uint64] // raw ping-pong word (element 0; the rest pads the line)
}

func benchAlloc(pe *shmem.PE) (*benchObjs, error) {
	o := &benchObjs{}
	var err error
	if o.cmd, err = shmem.Malloc[int64](pe, 4); err != nil {
		return nil, err
	}
	if o.done, err = shmem.Malloc[int64](pe, 1); err != nil {
		return nil, err
	}
	if o.buf, err = shmem.Malloc[byte](pe, 4<<20); err != nil {
		return nil, err
	}
	if o.ctr, err = shmem.Malloc[int64](pe, 8); err != nil {
		return nil, err
	}
	if o.flag, err = shmem.Malloc[int64](pe, 8); err != nil {
		return nil, err
	}
	if o.raw, err = shmem.Malloc[uint64](pe, 8); err != nil {
		return nil, err
	}
	return o, pe.BarrierAll()
}

// Commands PE 0 gives the helpers.
const (
	cmdExit     = 1
	cmdBarrier  = 2 // count barriers
	cmdPingPong = 3 // count WaitUntil round trips with PE 0
	cmdRawPing  = 4 // count raw cache-line round trips with PE 0
)

// The helper PEs' side.
var _ = register("bench-helper", func(pe *shmem.PE) error {
	o, err := benchAlloc(pe)
	if err != nil {
		return err
	}
	var seen int64
	for {
		err := shmem.WaitUntil(o.cmd, 0, shmem.CmpGT, seen)
		if errors.Is(err, shmem.ErrTimeout) {
			continue
		}
		if err != nil {
			return err
		}
		seen++
		c := o.cmd.Local()
		kind, count := c[1], int(c[2])
		switch kind {
		case cmdExit:
			return nil
		case cmdBarrier:
			for i := 0; i < count; i++ {
				if err := pe.BarrierAll(); err != nil {
					return err
				}
			}
		case cmdPingPong:
			for i := 1; i <= count; i++ {
				if err := shmem.WaitUntil(o.flag, 0, shmem.CmpGE, int64(i)); err != nil {
					return err
				}
				if err := shmem.P(o.flag, 0, int64(i), 0); err != nil {
					return err
				}
			}
		case cmdRawPing:
			mine := &o.raw.Local()[0]
			theirs := &shmem.Ptr(o.raw, 0)[0]
			for i := uint64(1); i <= uint64(count); i++ {
				for atomic.LoadUint64(mine) < i {
				}
				atomic.StoreUint64(theirs, i)
			}
		}
		if err := shmem.AtomicAdd(o.done, 0, 1, 0); err != nil {
			return err
		}
	}
})

// benchJob is PE 0 of a running benchmark job.
type benchJob struct {
	n     int
	pe    *shmem.PE
	o     *benchObjs
	srv   *boot.Server
	procs []*exec.Cmd
	seq   int64
	done  int64
}

var current *benchJob // the one job this benchmark process runs at a time

// job returns a running job of n PEs, starting one if needed.
func job(b *testing.B, n int) *benchJob {
	b.Helper()
	if current != nil && current.n == n {
		return current
	}
	if current != nil {
		current.stop()
		current = nil
	}
	j, err := startBenchJob(n)
	if err != nil {
		b.Fatal(err)
	}
	current = j
	return j
}

func startBenchJob(n int) (*benchJob, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	key := make([]byte, boot.KeySize)
	rand.Read(key)
	id := "bench-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(n)
	j := &benchJob{n: n, srv: boot.NewServer(ln, id, key, n)}
	go j.srv.Serve(context.Background())
	env := func(rank int) []string {
		return []string{
			boot.EnvRank + "=" + strconv.Itoa(rank), boot.EnvSize + "=" + strconv.Itoa(n),
			boot.EnvJobID + "=" + id, boot.EnvKey + "=" + hex.EncodeToString(key),
			boot.EnvRendezvous + "=" + ln.Addr().String(),
			"SHMEM_SYMMETRIC_SIZE=" + strconv.Itoa(benchHeap), "GOSHMEM_TIMEOUT=600s",
		}
	}
	for r := 1; r < n; r++ {
		c := exec.Command(os.Args[0], "-test.run=^$")
		c.Env = append(os.Environ(), append(env(r), envScenario+"=bench-helper")...)
		c.Stdout, c.Stderr = os.Stderr, os.Stderr
		if err := c.Start(); err != nil {
			return nil, err
		}
		j.procs = append(j.procs, c)
	}
	for _, kv := range env(0) {
		k, v, _ := cut(kv)
		os.Setenv(k, v)
	}
	j.pe, err = shmem.Init()
	for _, kv := range env(0) {
		k, _, _ := cut(kv)
		os.Unsetenv(k)
	}
	if err != nil {
		j.kill()
		return nil, err
	}
	if j.o, err = benchAlloc(j.pe); err != nil {
		j.kill()
		return nil, err
	}
	return j, nil
}

func cut(kv string) (string, string, bool) {
	for i := range kv {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return kv, "", false
}

// command starts kind on every helper PE.
func (j *benchJob) command(kind int64, count int) {
	j.seq++
	for r := 1; r < j.n; r++ {
		shmem.Put(j.o.cmd.Slice(1, 4), []int64{kind, int64(count), 0}, r)
		j.pe.Fence()
		shmem.AtomicSet(j.o.cmd, 0, j.seq, r)
	}
}

// wait waits until every helper finished the last command.
func (j *benchJob) wait(b *testing.B) {
	j.done += int64(j.n - 1)
	if err := shmem.WaitUntil(j.o.done, 0, shmem.CmpGE, j.done); err != nil {
		b.Fatal(err)
	}
}

func (j *benchJob) stop() {
	j.command(cmdExit, 0)
	j.pe.Finalize()
	for _, c := range j.procs {
		c.Wait()
	}
	j.srv.Close()
}

func (j *benchJob) kill() {
	for _, c := range j.procs {
		c.Process.Kill()
		c.Wait()
	}
	j.srv.Close()
}

var benchSizes = []int{8, 64, 4 << 10, 64 << 10, 1 << 20, 4 << 20}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// copyNs measures copy() of size bytes between two Go slices, n times,
// in ns per copy: the bandwidth limit every data benchmark is held to.
func copyNs(size, n int) float64 {
	dst, src := make([]byte, size), make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	n = max(n, 1)
	start := time.Now()
	for i := 0; i < n; i++ {
		copy(dst, src)
	}
	return float64(time.Since(start).Nanoseconds()) / float64(n)
}

// reportVsCopy adds the copy() limit and the ratio (copy time / our time:
// 1 means as fast as copy, higher is better).
func reportVsCopy(b *testing.B, size int, elapsed time.Duration) {
	ours := float64(elapsed.Nanoseconds()) / float64(b.N)
	lim := copyNs(size, b.N)
	b.ReportMetric(lim, "copy-ns/op")
	b.ReportMetric(lim/ours, "x-copy")
}

func BenchmarkPut(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			j := job(b, 2)
			src := make([]byte, size)
			dst := j.o.buf.Slice(0, size)
			b.SetBytes(int64(size))
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				if err := shmem.Put(dst, src, 1); err != nil {
					b.Fatal(err)
				}
				if err := j.pe.Quiet(); err != nil {
					b.Fatal(err)
				}
			}
			el := time.Since(start)
			b.StopTimer()
			reportVsCopy(b, size, el)
		})
	}
}

func BenchmarkGet(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			j := job(b, 2)
			dst := make([]byte, size)
			src := j.o.buf.Slice(0, size)
			b.SetBytes(int64(size))
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				if err := shmem.Get(dst, src, 1); err != nil {
					b.Fatal(err)
				}
			}
			el := time.Since(start)
			b.StopTimer()
			reportVsCopy(b, size, el)
		})
	}
}

// reportVsRawAtomic adds the cost of the bare hardware atomic on the same
// mapped word (sync/atomic through Ptr, no library code), measured in the
// same run, and our time as a multiple of it.
func reportVsRawAtomic(b *testing.B, j *benchJob, elapsed time.Duration, cas bool) {
	w := (*uint64)(unsafe.Pointer(&shmem.Ptr(j.o.ctr, 1)[2]))
	n := max(b.N, 1)
	start := time.Now()
	for i := 0; i < n; i++ {
		if cas {
			atomic.CompareAndSwapUint64(w, uint64(i), uint64(i+1))
		} else {
			atomic.AddUint64(w, 1)
		}
	}
	raw := float64(time.Since(start).Nanoseconds()) / float64(n)
	b.ReportMetric(raw, "raw-ns/op")
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N)/raw, "x-raw")
}

func BenchmarkAtomicFetchAdd(b *testing.B) {
	j := job(b, 2)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if _, err := shmem.AtomicFetchAdd(j.o.ctr, 0, 1, 1); err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(start)
	b.StopTimer()
	reportVsRawAtomic(b, j, el, false)
}

func BenchmarkAtomicCompareSwap(b *testing.B) {
	j := job(b, 2)
	shmem.AtomicSet(j.o.ctr, 1, 0, 1)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if _, err := shmem.AtomicCompareSwap(j.o.ctr, 1, int64(i), int64(i+1), 1); err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(start)
	b.StopTimer()
	reportVsRawAtomic(b, j, el, true)
}

func BenchmarkBarrier(b *testing.B) {
	for _, n := range []int{2, 4} {
		b.Run(fmt.Sprintf("%dPEs", n), func(b *testing.B) {
			j := job(b, n)
			j.command(cmdBarrier, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := j.pe.BarrierAll(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			j.wait(b)
		})
	}
}

// rawPingPongNs is the cross-process cache-line round trip over the
// shared mapping, with no library code: the floor for any same-host
// synchronisation, measured for n round trips.
func rawPingPongNs(b *testing.B, j *benchJob, n int) float64 {
	mine := &j.o.raw.Local()[0]
	theirs := &shmem.Ptr(j.o.raw, 1)[0]
	atomic.StoreUint64(mine, 0)
	shmem.AtomicSet(j.o.raw, 0, 0, 1)
	j.command(cmdRawPing, n)
	start := time.Now()
	for i := uint64(1); i <= uint64(n); i++ {
		atomic.StoreUint64(theirs, i)
		for atomic.LoadUint64(mine) < i {
		}
	}
	el := time.Since(start)
	j.wait(b)
	return float64(el.Nanoseconds()) / float64(n)
}

func BenchmarkWaitUntilPingPong(b *testing.B) {
	j := job(b, 2)
	shmem.AtomicSet(j.o.flag, 0, 0, 1)
	j.o.flag.Local()[0] = 0
	j.command(cmdPingPong, b.N)
	b.ResetTimer()
	start := time.Now()
	for i := 1; i <= b.N; i++ {
		if err := shmem.P(j.o.flag, 0, int64(i), 1); err != nil {
			b.Fatal(err)
		}
		if err := shmem.WaitUntil(j.o.flag, 0, shmem.CmpGE, int64(i)); err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(start)
	b.StopTimer()
	j.wait(b)
	raw := rawPingPongNs(b, j, b.N)
	ours := float64(el.Nanoseconds()) / float64(b.N)
	b.ReportMetric(raw, "raw-ns/op")
	b.ReportMetric(ours/raw, "x-raw")
}
