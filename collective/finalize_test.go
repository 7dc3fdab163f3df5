package collective

import (
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/testhook"
	"github.com/goshmem/goshmem/shmem"
)

// A PE that calls Finalize while the other members make a collective
// call fails fast on every side, never by waiting out the timeout: the
// finalizing PE sets its bit in every peer's finalizing bitmap, and a
// member waiting in the call's first exchange for that PE's message
// (Team.WaitCollective) sees the bit with the message missing and fails
// with ErrAsymmetric; the members it leaves behind learn it from its
// departure (ErrPeerLost). Before, every member waited the whole PE
// timeout (here 20 s against a 2 s bound).
//
// The finalizer is PE 0 or the last PE, so that on a team spanning
// hosts the gathered exchange is met from both sides (members waiting
// for member 0's release; member 0 waiting for a member's relay slot),
// and the calls take every exchange: flat (up to 8 members), gathered
// (4 to 8 across hosts) and recursive doubling (9).
func finalizeAgainstCollective(last bool, call func(t *shmem.Team, dst, src shmem.Sym[float64]) error) func(pe *shmem.PE) error {
	return func(pe *shmem.PE) error {
		mismatched := func(err error) bool {
			return (errors.Is(err, shmem.ErrAsymmetric) || errors.Is(err, shmem.ErrPeerLost)) && !errors.Is(err, shmem.ErrTimeout)
		}
		src, err := shmem.Malloc[float64](pe, 1<<14)
		if err != nil {
			return err
		}
		dst, err := shmem.Malloc[float64](pe, pe.NPEs()<<14)
		if err != nil {
			return err
		}
		finalizer := 0
		if last {
			finalizer = pe.NPEs() - 1
		}
		// Every PE's Init is over, and one good call made, before the
		// mismatch. The fastest PEs may leave this call and meet the
		// mismatch before a slow one has taken the last message: that
		// one's call then fails as its next one would (the job is
		// broken), and its Finalize must still fail at once.
		if err := call(pe.World(), dst, src); err != nil {
			if !mismatched(err) {
				return fmt.Errorf("PE %d's first call: %w", pe.MyPE(), err)
			}
			if err := pe.Finalize(); !mismatched(err) {
				return fmt.Errorf("Finalize of a broken job: %v, want ErrAsymmetric or ErrPeerLost", err)
			}
			return nil
		}
		if pe.MyPE() == finalizer {
			if err := pe.Finalize(); !mismatched(err) {
				return fmt.Errorf("PE %d's Finalize against the others' collective: %v, want ErrAsymmetric or ErrPeerLost", pe.MyPE(), err)
			}
			return nil
		}
		start := time.Now()
		if err := call(pe.World(), dst, src); !mismatched(err) {
			return fmt.Errorf("PE %d's collective against PE %d's Finalize: %v, want ErrAsymmetric or ErrPeerLost", pe.MyPE(), finalizer, err)
		}
		if el := time.Since(start); el > 2*time.Second {
			return fmt.Errorf("PE %d noticed the mismatch after %v", pe.MyPE(), el)
		}
		if err := pe.Finalize(); !mismatched(err) {
			return fmt.Errorf("Finalize of a broken job: %v, want ErrAsymmetric or ErrPeerLost", err)
		}
		return nil
	}
}

var finalizeCalls = []struct {
	name string
	call func(t *shmem.Team, dst, src shmem.Sym[float64]) error
}{
	{"allreduce-small", func(t *shmem.Team, dst, src shmem.Sym[float64]) error {
		return AllReduce(t, dst.Slice(0, 1), src.Slice(0, 1), Sum)
	}},
	{"allreduce-large", func(t *shmem.Team, dst, src shmem.Sym[float64]) error {
		return AllReduce(t, dst.Slice(0, src.Len()), src, Sum)
	}},
	{"broadcast", func(t *shmem.Team, dst, src shmem.Sym[float64]) error {
		return Broadcast(t, dst.Slice(0, 8), src.Slice(0, 8), 1)
	}},
	{"fcollect", func(t *shmem.Team, dst, src shmem.Sym[float64]) error {
		return FCollect(t, dst.Slice(0, 4*t.NPEs()), src.Slice(0, 4))
	}},
}

func init() {
	for _, c := range finalizeCalls {
		register("finalize-against-"+c.name, finalizeAgainstCollective(false, c.call))
		register("finalize-last-against-"+c.name, finalizeAgainstCollective(true, c.call))
	}
}

func TestFinalizeAgainstCollective(t *testing.T) {
	env := []string{"GOSHMEM_TIMEOUT=20s"}
	for _, c := range finalizeCalls {
		for _, who := range []string{"finalize-against-", "finalize-last-against-"} {
			t.Run(who+c.name, func(t *testing.T) {
				each(t, who+c.name, allRoutes, env, 2, 3, 4)
				if !small {
					each(t, who+c.name, []route{goroutines, tcp}, env, 9)
				}
			})
		}
	}
}

// The same against members whose waits are asleep when the finalizing
// bit comes, so that the bit's wake-up is what ends them (the test
// above mostly finds them still spinning): PE 0 calls Finalize only
// once every other PE has gone to sleep inside its AllReduce
// (testhook.Sleep), and GOSHMEM_TEST_NONAP=1 turns every nap off, so a
// lost wake-up holds the job to its timeout instead of showing as
// latency. Goroutine PEs only: the hook is the process's.
var (
	sleepersIn     [16]atomic.Bool // PE r has entered the mismatched call
	sleepersAsleep atomic.Uint32   // bit r: PE r slept inside it
	sleepersHook   = func(rank int) {
		if rank < len(sleepersIn) && sleepersIn[rank].Load() {
			sleepersAsleep.Or(1 << rank)
		}
	}
)

var _ = register("finalize-against-sleepers", func(pe *shmem.PE) error {
	me, np := pe.MyPE(), pe.NPEs()
	mismatched := func(err error) bool {
		return (errors.Is(err, shmem.ErrAsymmetric) || errors.Is(err, shmem.ErrPeerLost)) && !errors.Is(err, shmem.ErrTimeout)
	}
	src, err := shmem.Malloc[float64](pe, 1)
	if err != nil {
		return err
	}
	dst, err := shmem.Malloc[float64](pe, 1)
	if err != nil {
		return err
	}
	if err := AllReduce(pe.World(), dst, src, Sum); err != nil {
		return fmt.Errorf("PE %d's first AllReduce: %w", me, err)
	}
	if me == 0 {
		want := uint32(1<<np-1) &^ 1
		for deadline := time.Now().Add(10 * time.Second); sleepersAsleep.Load() != want; {
			if time.Now().After(deadline) {
				return fmt.Errorf("the other PEs did not all sleep in their AllReduce within 10 s (asleep: %b)", sleepersAsleep.Load())
			}
			time.Sleep(100 * time.Microsecond) // waiting for the hook's condition, not making it
		}
		if err := pe.Finalize(); !mismatched(err) {
			return fmt.Errorf("PE 0's Finalize against the others' AllReduce: %v, want ErrAsymmetric or ErrPeerLost", err)
		}
		return nil
	}
	sleepersIn[me].Store(true)
	err = AllReduce(pe.World(), dst, src, Sum)
	sleepersIn[me].Store(false)
	if !mismatched(err) {
		return fmt.Errorf("PE %d's AllReduce against PE 0's Finalize: %v, want ErrAsymmetric or ErrPeerLost", me, err)
	}
	if err := pe.Finalize(); !mismatched(err) {
		return fmt.Errorf("Finalize of a broken job: %v, want ErrAsymmetric or ErrPeerLost", err)
	}
	return nil
})

func TestFinalizeAgainstSleepers(t *testing.T) {
	testhook.Sleep.Store(&sleepersHook)
	defer testhook.Sleep.Store(nil)
	for _, r := range []route{goroutines, tcp, mixed} {
		for _, n := range []int{2, 3, 4} {
			t.Run(r.name+"/"+strconv.Itoa(n), func(t *testing.T) {
				sleepersAsleep.Store(0)
				if err := r.run(t, n, "finalize-against-sleepers", []string{"GOSHMEM_TEST_NONAP=1"}, testHeap); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
