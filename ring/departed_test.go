package ring

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

// A Comm call that can complete only with a PE that has begun Finalize
// ends with ErrPeerLost as soon as that PE's finalizing bit arrives,
// not at the PE's timeout: a Recv or Probe naming it, a rendezvous Send
// to it waiting for its match, an eager Send to it waiting for room.
// What it sent before its Finalize is still received. So do a Ring's
// Recv whose lanes all come from that PE and a Send waiting for its
// acknowledgement.

var (
	// departedAsleep counts the sleeps of PE 0's waits (the goroutine
	// routes: testhook.Sleep, set by TestCommDeparted) once
	// departedIn says that PE 0 is in its first Recv.
	departedIn, departedAsleep atomic.Int32
	departedHook               = func(rank int) {
		if rank == 0 && departedIn.Load() == 1 {
			departedAsleep.Add(1)
		}
	}
)

// comm-departed: PE 1 sends PE 0 one message (tag 1), waits until PE 0
// is in a Recv from it of tag 2 (on the goroutine routes, until that
// Recv's wait sleeps, so the departure must wake it), then finalizes.
// PE 0's Recv must end with ErrPeerLost; then the tag 1 message is
// received all the same, and a Probe, a rendezvous Send and a run of
// eager Sends to PE 1 end with ErrPeerLost. The other PEs finalize at
// once: their departure must not end PE 0's wait on PE 1.
var _ = register("comm-departed", func(pe *shmem.PE) error {
	c, err := NewComm(pe.World())
	if err != nil {
		return err
	}
	flag, err := shmem.Malloc[uint64](pe, 1)
	if err != nil {
		return err
	}
	switch pe.MyPE() {
	case 1:
		if err := Send(bg(), c, 0, 1, []uint64{42}); err != nil {
			return fmt.Errorf("PE 1's Send: %w", err)
		}
		return departWhenAsleep(pe, flag)
	case 0:
		if err := aboutToWait(flag); err != nil {
			return err
		}
		_, err := Recv(bg(), c, 1, 2, make([]uint64, 1))
		departedIn.Store(0)
		if !errors.Is(err, shmem.ErrPeerLost) {
			return fmt.Errorf("Recv from PE 1, which began Finalize: %v, want ErrPeerLost", err)
		}
		got := make([]uint64, 1)
		if st, err := Recv(bg(), c, 1, 1, got); err != nil || st.Bytes != 8 || got[0] != 42 {
			return fmt.Errorf("Recv of what PE 1 sent before its Finalize: %v, %+v, %v", err, st, got)
		}
		if _, err := Probe(bg(), c, 1, 3); !errors.Is(err, shmem.ErrPeerLost) {
			return fmt.Errorf("Probe of PE 1, which began Finalize: %v, want ErrPeerLost", err)
		}
		if err := Send(bg(), c, 1, 4, make([]byte, c.EagerLimit()+1)); !errors.Is(err, shmem.ErrPeerLost) {
			return fmt.Errorf("rendezvous Send to PE 1, which began Finalize: %v, want ErrPeerLost", err)
		}
		// Eager Sends find room until PE 1's lane holds its share of
		// unreceived messages; the one that must wait gives up.
		for i := 0; ; i++ {
			err := Send(bg(), c, 1, 5, []byte{1})
			if errors.Is(err, shmem.ErrPeerLost) {
				break
			}
			if err != nil || i == 1<<16 {
				return fmt.Errorf("eager Send %d to PE 1, which began Finalize: %v, want ErrPeerLost once its lane is full", i, err)
			}
		}
		return pe.Finalize()
	}
	return pe.Finalize()
})

// ring-departed: as comm-departed for a raw Ring: PE 1 sends one
// message on its lane to PE 0 and finalizes once PE 0's second Recv
// sleeps; that Recv ends with ErrPeerLost after the first got the
// message, and PE 0's third Send on its Safe lane of depth 2 to PE 1,
// which must wait for an acknowledgement, too.
var _ = register("ring-departed", func(pe *shmem.PE) error {
	r, err := New(pe, []Lane{{From: 1, To: 0, Depth: 4, Capacity: 8}, {From: 0, To: 1, Depth: 2, Capacity: 8}}, Safe)
	if err != nil {
		return err
	}
	flag, err := shmem.Malloc[uint64](pe, 1)
	if err != nil {
		return err
	}
	switch pe.MyPE() {
	case 1:
		if _, err := r.Send(0, []byte{42}); err != nil {
			return fmt.Errorf("PE 1's Send: %w", err)
		}
		return departWhenAsleep(pe, flag)
	case 0:
		if err := aboutToWait(flag); err != nil {
			return err
		}
		m, err := r.Recv()
		if err != nil || len(m.Data) != 1 || m.Data[0] != 42 {
			departedIn.Store(0)
			return fmt.Errorf("Recv of what PE 1 sent before its Finalize: %v, %v", m.Data, err)
		}
		_, err = r.Recv()
		departedIn.Store(0)
		if !errors.Is(err, shmem.ErrPeerLost) {
			return fmt.Errorf("Recv on a lane from PE 1, which began Finalize: %v, want ErrPeerLost", err)
		}
		for i := range 2 {
			if _, err := r.Send(1, []byte{byte(i)}); err != nil {
				return fmt.Errorf("Send %d into a lane of depth 2: %w", i, err)
			}
		}
		if _, err := r.Send(1, []byte{2}); !errors.Is(err, shmem.ErrPeerLost) {
			return fmt.Errorf("Send waiting for PE 1's acknowledgement after it began Finalize: %v, want ErrPeerLost", err)
		}
	}
	return pe.Finalize()
})

// aboutToWait is PE 0's part before the call that PE 1's departure must
// end: it tells PE 1 (flag on PE 1), and the hook to count its sleeps.
func aboutToWait(flag shmem.Sym[uint64]) error {
	departedIn.Store(1)
	return shmem.AtomicSet(flag, 0, 1, 1)
}

// departWhenAsleep is PE 1's part: once PE 0 is about to make the call
// (flag), and on the goroutine routes (where the test has set
// testhook.Sleep) once a wait of PE 0's has slept since, so that the
// departure must wake it, PE 1 begins Finalize. On the process routes
// the call may start before or after the departure: either must end.
func departWhenAsleep(pe *shmem.PE, flag shmem.Sym[uint64]) error {
	if err := shmem.WaitUntil(flag, 0, shmem.CmpEQ, 1); err != nil {
		return err
	}
	if testhook.Sleep.Load() != nil {
		for deadline := time.Now().Add(20 * time.Second); departedAsleep.Load() == 0; {
			if time.Now().After(deadline) {
				return errors.New("PE 0's call did not sleep within 20 s")
			}
			time.Sleep(100 * time.Microsecond) // waiting for the hook's condition, not making it
		}
	}
	return pe.Finalize()
}

// TestCommDeparted runs comm-departed on every route with the naps of
// waits off (GOSHMEM_TEST_NONAP), so a departure that does not wake the
// Recv ends the test at the PE's timeout (ErrTimeout).
func TestCommDeparted(t *testing.T) { runDeparted(t, "comm-departed", 2, 3) }

// TestRingDeparted runs ring-departed the same way (its lanes need PEs 0
// and 1 only).
func TestRingDeparted(t *testing.T) { runDeparted(t, "ring-departed", 2) }

func runDeparted(t *testing.T, name string, counts ...int) {
	testhook.Sleep.Store(&departedHook)
	defer testhook.Sleep.Store(nil)
	s := scenarios.Get(name)
	for _, r := range routes {
		for _, n := range counts {
			t.Run(r.name+"/"+strconv.Itoa(n), func(t *testing.T) {
				departedIn.Store(0)
				departedAsleep.Store(0)
				if err := r.run(t, n, name, s, []string{"GOSHMEM_TEST_NONAP=1"}); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
