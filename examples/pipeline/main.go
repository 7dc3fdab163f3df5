// Pipeline passes typed tensors down a pipeline of stages, one stage per
// PE, with ring.Comm's tagged two-sided messages. PE 0 is the source:
// it makes batches of square float32 matrices and sends each to PE 1 as
// two messages, the shape ([]int32 {rows, cols}, tag tagShape) and the
// data ([]float32, tag tagData). Stage k (PE k, 1 <= k < n) receives a
// tensor, applies x = 2x + k to every element and passes it on to PE
// k+1; the last stage sends it back to PE 0 with tag tagResult. PE 0 is
// also the sink: a goroutine of its own receives the results while the
// main goroutine still sends, and checks every element against the
// same arithmetic done locally (exact: the values stay small integers
// in float32). A zero-dimension shape ends the pipeline.
//
// Tensors of different sizes take both of the Comm's paths: the small
// ones are eager, the larger ones (above 64 KiB) go by rendezvous.
//
// Run it as a job of four PEs with
//
//	go run ./cmd/goshrun -n 4 ./examples/pipeline [-batches 30 -side 160]
//
// or as a job of one PE with `go run ./examples/pipeline` (PE 0 sends
// every tensor to itself).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/goshmem/goshmem/ring"
	"github.com/goshmem/goshmem/shmem"
)

const (
	tagShape  = 1
	tagData   = 2
	tagResult = 3
)

func main() {
	batches := flag.Int("batches", 30, "tensors sent down the pipeline")
	side := flag.Int("side", 160, "the largest tensor's side (rows = cols)")
	flag.Parse()
	if *batches < 1 || *side < 3 || *side > 4096 {
		fmt.Fprintln(os.Stderr, "pipeline: want -batches >= 1 and 3 <= -side <= 4096")
		os.Exit(2)
	}
	pe, err := shmem.Init()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pipeline:", err)
		os.Exit(1)
	}
	if err := run(pe, *batches, *side); err != nil {
		fmt.Fprintf(os.Stderr, "pipeline: PE %d: %v\n", pe.MyPE(), err)
		pe.GlobalExit(1)
	}
	if err := pe.Finalize(); err != nil {
		fmt.Fprintln(os.Stderr, "pipeline:", err)
		os.Exit(1)
	}
}

// dims is batch b's shape: three sizes up to side, so that some tensors
// are eager messages and some rendezvous ones.
func dims(b, side int) (int, int) {
	r := side * (1 + b%3) / 3
	return r, r
}

// initial is element i of batch b as the source makes it.
func initial(b, i int) float32 { return float32((b + i) % 7) }

// stage is what stage k does to one element.
func stage(x float32, k int) float32 { return 2*x + float32(k) }

func run(pe *shmem.PE, batches, side int) error {
	c, err := ring.NewComm(pe.World())
	if err != nil {
		return err
	}
	me, n := c.Rank(), c.Size()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	if me == 0 {
		// The sink runs beside the source.
		sunk := make(chan error, 1)
		go func() { sunk <- sink(ctx, c, batches, side) }()
		if err := source(ctx, c, batches, side); err != nil {
			return err
		}
		if err := <-sunk; err != nil {
			return err
		}
		fmt.Printf("pipeline: %d tensors (up to %dx%d float32) through %d stages in %v: every element checked\n",
			batches, side, side, n, time.Since(start).Round(time.Millisecond))
	} else if err := relay(ctx, c, me, n); err != nil {
		return err
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	return c.Close()
}

// send sends one tensor: its shape, then its data.
func send(ctx context.Context, c *ring.Comm, to int, rows, cols int, data []float32) error {
	if err := ring.Send(ctx, c, to, tagShape, []int32{int32(rows), int32(cols)}); err != nil {
		return err
	}
	return ring.Send(ctx, c, to, tagData, data)
}

// recv receives one tensor from rank from: its shape, then its data into
// a buffer of that size. rows == 0 is the end.
func recv(ctx context.Context, c *ring.Comm, from int) (int, int, []float32, error) {
	var shape [2]int32
	st, err := ring.Recv(ctx, c, from, tagShape, shape[:])
	if err != nil {
		return 0, 0, nil, err
	}
	if st.Bytes != 8 {
		return 0, 0, nil, fmt.Errorf("a shape of %d bytes from rank %d", st.Bytes, from)
	}
	rows, cols := int(shape[0]), int(shape[1])
	if rows == 0 {
		return 0, 0, nil, nil
	}
	data := make([]float32, rows*cols)
	st, err = ring.Recv(ctx, c, from, tagData, data)
	if err != nil {
		return 0, 0, nil, err
	}
	if st.Bytes != 4*len(data) {
		return 0, 0, nil, fmt.Errorf("a %dx%d tensor of %d bytes", rows, cols, st.Bytes)
	}
	return rows, cols, data, nil
}

// source makes the tensors and sends them to stage 1 (or, in a job of
// one PE, to the sink on this PE), then the end marker.
func source(ctx context.Context, c *ring.Comm, batches, side int) error {
	to := 1 % c.Size()
	for b := range batches {
		rows, cols := dims(b, side)
		data := make([]float32, rows*cols)
		for i := range data {
			data[i] = initial(b, i)
		}
		if err := send(ctx, c, to, rows, cols, data); err != nil {
			return fmt.Errorf("source, tensor %d: %w", b, err)
		}
	}
	return ring.Send(ctx, c, to, tagShape, []int32{0, 0})
}

// relay is stage k: receive from k-1, transform, pass to k+1 (the last
// stage answers PE 0 with tagResult).
func relay(ctx context.Context, c *ring.Comm, k, n int) error {
	for b := 0; ; b++ {
		rows, cols, data, err := recv(ctx, c, k-1)
		if err != nil {
			return fmt.Errorf("stage %d, tensor %d: %w", k, b, err)
		}
		if rows == 0 {
			if k == n-1 {
				return ring.Send(ctx, c, 0, tagResult, []int32{0, 0})
			}
			return ring.Send(ctx, c, k+1, tagShape, []int32{0, 0})
		}
		for i := range data {
			data[i] = stage(data[i], k)
		}
		if k == n-1 {
			if err := ring.Send(ctx, c, 0, tagResult, []int32{int32(rows), int32(cols)}); err != nil {
				return err
			}
			err = ring.Send(ctx, c, 0, tagResult, data)
		} else {
			err = send(ctx, c, k+1, rows, cols, data)
		}
		if err != nil {
			return fmt.Errorf("stage %d, tensor %d: %w", k, b, err)
		}
	}
}

// sink receives the results and checks each against the arithmetic of
// every stage done here. In a job of one PE the source's tensors come
// straight back (no stage).
func sink(ctx context.Context, c *ring.Comm, batches, side int) error {
	n := c.Size()
	for b := 0; ; b++ {
		var rows, cols int
		var data []float32
		var err error
		if n == 1 {
			rows, cols, data, err = recv(ctx, c, 0)
		} else {
			rows, cols, data, err = recvResult(ctx, c, n-1)
		}
		if err != nil {
			return fmt.Errorf("sink, tensor %d: %w", b, err)
		}
		if rows == 0 {
			if b != batches {
				return fmt.Errorf("sink: the pipeline ended after %d tensors, want %d", b, batches)
			}
			return nil
		}
		if wr, wc := dims(b, side); rows != wr || cols != wc {
			return fmt.Errorf("sink, tensor %d: %dx%d, want %dx%d", b, rows, cols, wr, wc)
		}
		for i, got := range data {
			want := initial(b, i)
			for k := 1; k < n; k++ {
				want = stage(want, k)
			}
			if got != want {
				return fmt.Errorf("sink, tensor %d, element %d: %v, want %v", b, i, got, want)
			}
		}
	}
}

// recvResult receives one result: both its messages carry tagResult, so
// the shape and the data are told apart by their element type, which
// the Comm checks (a receive into the wrong type is ErrInvalid and
// leaves the message queued).
func recvResult(ctx context.Context, c *ring.Comm, from int) (int, int, []float32, error) {
	var shape [2]int32
	if _, err := ring.Recv(ctx, c, from, tagResult, shape[:]); err != nil {
		return 0, 0, nil, err
	}
	rows, cols := int(shape[0]), int(shape[1])
	if rows == 0 {
		return 0, 0, nil, nil
	}
	// Probe says how long the data is before it is received.
	st, err := ring.Probe(ctx, c, from, tagResult)
	if err != nil {
		return 0, 0, nil, err
	}
	if st.Bytes != 4*rows*cols {
		return 0, 0, nil, fmt.Errorf("a %dx%d result of %d bytes", rows, cols, st.Bytes)
	}
	// A receive into int32 would be refused: the data is float32.
	if _, err := ring.Recv(ctx, c, from, tagResult, make([]int32, rows*cols)); !errors.Is(err, shmem.ErrInvalid) {
		return 0, 0, nil, fmt.Errorf("receiving float32 data as int32: %v, want ErrInvalid", err)
	}
	data := make([]float32, rows*cols)
	if _, err := ring.Recv(ctx, c, from, tagResult, data); err != nil {
		return 0, 0, nil, err
	}
	return rows, cols, data, nil
}
