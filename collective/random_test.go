package collective

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// A random sequence of collectives, back to back: random collective,
// element type, operator, length (through every algorithm's range),
// root, in place or not, and team (the world, a reversed split, or a
// strided half), every result checked on every member. Every PE draws
// from the same seed, so all make the same calls. The seed is printed;
// GOSHMEM_COLLECTIVE_TEST_SEED replays it.
const envSeed = "GOSHMEM_COLLECTIVE_TEST_SEED"

var _ = register("random", func(pe *shmem.PE) error {
	seed, err := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
	if err != nil {
		return fmt.Errorf("%s: %v", envSeed, err)
	}
	rng := rand.New(rand.NewPCG(seed, 17))
	np := pe.NPEs()
	const maxN = 1000
	bf, err := newBufs[float64](pe, 3*maxN*np+2)
	if err != nil {
		return err
	}
	bi, err := newBufs[int32](pe, 3*maxN*np+2)
	if err != nil {
		return err
	}
	bu, err := newBufs[uint16](pe, 3*maxN*np+2)
	if err != nil {
		return err
	}
	bc, err := newBufs[complex64](pe, 3*maxN*np+2)
	if err != nil {
		return err
	}
	rev, err := pe.World().Split(np-1, -1, np)
	if err != nil {
		return err
	}
	half, err := pe.World().Split(0, 2, (np+1)/2)
	if err != nil {
		return err
	}
	teams := []*shmem.Team{pe.World(), rev, half}
	iters := 300
	if small {
		iters = 100
	}
	for it := range iters {
		// Every PE draws the same numbers, members of the chosen team or not.
		ti, kind, typ := rng.IntN(len(teams)), rng.IntN(10), rng.IntN(4)
		n := []int{0, 1, 2, 5, 13, 50, 300, maxN}[rng.IntN(8)]
		op, rootDraw, inPlace := allOps[rng.IntN(len(allOps))], rng.IntN(1<<20), rng.IntN(2) == 0
		t := teams[ti]
		if t == nil {
			continue
		}
		root := rootDraw % t.NPEs()
		salt := 100000 + it
		var err error
		switch typ {
		case 0:
			err = randomCall(t, bf, kind, n, op, root, inPlace, salt)
		case 1:
			err = randomCall(t, bi, kind, n, op, root, inPlace, salt)
		case 2:
			err = randomCall(t, bu, kind, n, op, root, inPlace, salt)
		case 3:
			err = randomCall(t, bc, kind, n, op, root, inPlace, salt)
		}
		if err != nil {
			return fmt.Errorf("seed %d, call %d (team %d, kind %d, type %d, n %d, %v, root %d, in place %v): %w",
				seed, it, ti, kind, typ, n, op, root, inPlace, err)
		}
	}
	return nil
})

func randomCall[T shmem.Elem](t *shmem.Team, b bufs[T], kind, n int, op Op, root int, inPlace bool, salt int) error {
	if !valid[T](op) {
		op = Sum
	}
	switch kind {
	case 0:
		return checkReduce(t, b, n, op, -1, inPlace, salt)
	case 1:
		return checkReduce(t, b, n, op, root, inPlace, salt)
	case 2:
		return checkScan(t, b, n, op, true, inPlace, salt)
	case 3:
		return checkScan(t, b, n, op, false, inPlace, salt)
	case 4:
		return checkBroadcast(t, b, n, root, inPlace, salt)
	case 5:
		return checkFCollect(t, b, n, salt)
	case 6:
		return checkCollect(t, b, n, salt)
	case 7:
		return checkAllToAll(t, b, n, 1, 1, salt)
	case 8:
		return checkAllToAll(t, b, n, 2, 3, salt)
	default:
		return Barrier(t)
	}
}

func TestRandom(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(envSeed); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", envSeed, s, err)
		}
	}
	t.Logf("seed %d (replay with %s=%d)", seed, envSeed, seed)
	env := []string{fmt.Sprintf("%s=%d", envSeed, seed)}
	each(t, "random", []route{goroutines}, env, 3, 6)
	each(t, "random", []route{mixed}, env, 4)
	each(t, "random", []route{tcp, processes}, env, 3)
	each(t, "random", []route{processesMixed}, env, 4)
}
