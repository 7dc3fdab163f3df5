// Ring passes a token round the PEs: PE i waits for it, adds one and
// hands it to PE (i+1) mod n, lap after lap. It shows the classic
// OpenSHMEM point-to-point pattern: Put the data, Fence, then P a flag
// that the receiver waits on with WaitUntil. (PutSignal does the same in
// one call; the heat example uses it.) At the end the token has been
// incremented once per hop, so PE 0 checks token == laps × n exactly.
//
// Run it as a job of four PEs with
//
//	go run ./cmd/goshrun -n 4 ./examples/ring [-laps 100]
//
// or as a job of one PE with `go run ./examples/ring` (PE 0 passes the
// token to itself).
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

func main() {
	laps := flag.Int("laps", 100, "times the token goes round the ring")
	flag.Parse()
	if *laps < 1 {
		fmt.Fprintln(os.Stderr, "ring: -laps must be at least 1")
		os.Exit(2)
	}
	pe, err := shmem.Init()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ring:", err)
		os.Exit(1)
	}
	if err := run(pe, *laps); err != nil {
		fmt.Fprintf(os.Stderr, "ring: PE %d: %v\n", pe.MyPE(), err)
		pe.GlobalExit(1) // ends every PE of the job, not just this one
	}
	if err := pe.Finalize(); err != nil {
		fmt.Fprintln(os.Stderr, "ring:", err)
		os.Exit(1)
	}
}

func run(pe *shmem.PE, laps int) error {
	me, n := pe.MyPE(), pe.NPEs()
	next := (me + 1) % n

	// The token's landing slot and its flag, both symmetric and zeroed.
	// The flag holds the number of the lap whose token has arrived.
	token, err := shmem.Malloc[int64](pe, 1)
	if err != nil {
		return err
	}
	flag, err := shmem.Malloc[int64](pe, 1)
	if err != nil {
		return err
	}

	start := time.Now()
	for lap := 1; lap <= laps; lap++ {
		// Wait for this lap's token. PE 0 gets it from the last PE, which
		// sent it on the previous lap; on lap 1 PE 0 starts with 0.
		want := lap
		if me == 0 {
			want = lap - 1
		}
		if want > 0 {
			if err := shmem.WaitUntil(flag, 0, shmem.CmpEQ, int64(want)); err != nil {
				return err
			}
		}
		// No one writes our slot again until the token has gone round, so
		// reading it directly is safe.
		v := token.Local()[0] + 1

		// Put the token, Fence so it is delivered before the flag, then
		// raise the flag: a PE that sees the flag sees the token.
		if err := shmem.Put(token, []int64{v}, next); err != nil {
			return err
		}
		if err := pe.Fence(); err != nil {
			return err
		}
		if err := shmem.P(flag, 0, int64(lap), next); err != nil {
			return err
		}
	}
	if me != 0 {
		return nil
	}

	// The last PE's final pass lands back on PE 0.
	if err := shmem.WaitUntil(flag, 0, shmem.CmpEQ, int64(laps)); err != nil {
		return err
	}
	elapsed := time.Since(start)
	hops := laps * n
	if got := token.Local()[0]; got != int64(hops) {
		return fmt.Errorf("token is %d after %d laps of %d PEs, want %d", got, laps, n, hops)
	}
	fmt.Printf("token went %d times round %d PEs: %d hops, value %d, %v per hop\n",
		laps, n, hops, hops, elapsed/time.Duration(hops))
	return nil
}
