package ring

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/scenario"
	"github.com/goshmem/goshmem/shmem"
)

// Peer loss and the PE timeout, on goroutine PEs and over sockets.

// failRoute is a route of TestCommPeerLost and TestCommTimeout: each()'s
// routes run with the harness's timeout (a minute), these with the
// test's. hosts gives the PEs' pretend hosts (nil: one host).
type failRoute struct {
	name  string
	procs bool
	hosts func(n int) []string
}

var (
	failGoroutines = failRoute{"goroutines", false, func(int) []string { return nil }}
	failTCP        = failRoute{"tcp", false, func(n int) []string { return scenario.Hosts("remote", n) }}
	failMixed      = failRoute{"mixed", false, func(n int) []string { return scenario.Hosts("mixed", n) }}
	failProcsTCP   = failRoute{"processes-tcp", true, func(n int) []string { return scenario.Hosts("remote", n) }}
)

// runFail runs scenario name on n PEs of route fr with PE timeout d.
func runFail(t *testing.T, fr failRoute, n int, name string, d time.Duration) error {
	t.Helper()
	if fr.procs {
		return runProcesses(t, n, name, fr.hosts(n), []string{"GOSHMEM_TIMEOUT=" + d.String()})
	}
	opts := []shmem.Option{shmem.WithTimeout(d), shmem.WithHeapSize(16 << 20)}
	if h := fr.hosts(n); h != nil {
		return runHosts(t, n, scenarios.Get(name), h, opts...)
	}
	return shmem.Run(n, scenarios.Get(name), opts...)
}

var errFailOnPurpose = errors.New("PE 0 fails on purpose")

// peerLostGot is what TestCommPeerLost's surviving PEs got, by PE (the
// goroutine routes only: it is this process's).
var peerLostGot = make(chan error, 2)

// comm-peer-lost: a Recv waiting on a PE that fails ends with
// ErrPeerLost, and so does a rendezvous Send waiting for its receive.
// PEs 1 and 2 count themselves in on PE 0's flag just before their call;
// PE 0 fails once both have (before or after they enter the call, they
// must get ErrPeerLost).
var _ = register("comm-peer-lost", func(pe *shmem.PE) error {
	c, err := NewComm(pe.World())
	if err != nil {
		return err
	}
	flag, err := shmem.Malloc[int64](pe, 1)
	if err != nil {
		return err
	}
	switch pe.MyPE() {
	case 0:
		if err := shmem.WaitUntil(flag, 0, shmem.CmpEQ, 2); err != nil {
			return err
		}
		return errFailOnPurpose
	case 1:
		if err := shmem.AtomicAdd(flag, 0, 1, 0); err != nil {
			return err
		}
		_, err := Recv(bg(), c, 0, 0, make([]byte, 8))
		peerLostGot <- fmt.Errorf("PE 1's Recv: %w", err)
	case 2:
		if err := shmem.AtomicAdd(flag, 0, 1, 0); err != nil {
			return err
		}
		peerLostGot <- fmt.Errorf("PE 2's rendezvous Send: %w", Send(bg(), c, 0, 0, make([]byte, c.EagerLimit()+1)))
	}
	return nil
})

// TestCommPeerLost runs on goroutine PEs, all on one host, all apart
// (TCP) and in pairs (PE 1 beside PE 0, PE 2 across TCP). Separate
// processes are no route for it: when one PE fails, the launcher ends
// the others (SIGTERM) before they can report what their calls got.
func TestCommPeerLost(t *testing.T) {
	for _, fr := range []failRoute{failGoroutines, failTCP, failMixed} {
		t.Run(fr.name+"/3", func(t *testing.T) {
			err := runFail(t, fr, 3, "comm-peer-lost", 30*time.Second)
			if !errors.Is(err, errFailOnPurpose) {
				t.Fatalf("Run: %v", err)
			}
			// Run has returned: every PE's function has.
			for range 2 {
				select {
				case err := <-peerLostGot:
					if !errors.Is(err, shmem.ErrPeerLost) {
						t.Errorf("got %v, want ErrPeerLost", err)
					}
				default:
					t.Errorf("PE 1 or 2 never reached its call (Run: %v)", err)
				}
			}
		})
	}
}

// comm-timeout: a Recv that nothing matches ends with the PE's timeout
// (TestCommTimeout runs it with a timeout of 300 ms). PE 0 waits (a wait
// that itself times out, again and again) until PE 1's Recv has given
// up; then both close the Comm.
var _ = register("comm-timeout", func(pe *shmem.PE) error {
	c, err := NewComm(pe.World())
	if err != nil {
		return err
	}
	flag, err := shmem.Malloc[int64](pe, 1)
	if err != nil {
		return err
	}
	if pe.MyPE() == 1 {
		start := time.Now()
		if _, err := Recv(bg(), c, 0, 0, make([]byte, 8)); !errors.Is(err, shmem.ErrTimeout) {
			return fmt.Errorf("Recv: %v, want ErrTimeout", err)
		}
		if el := time.Since(start); el < 200*time.Millisecond || el > 10*time.Second {
			return fmt.Errorf("Recv gave up after %v with a PE timeout of 300 ms", el)
		}
		if err := shmem.AtomicSet(flag, 0, 1, 0); err != nil {
			return err
		}
	} else {
		for {
			err := shmem.WaitUntil(flag, 0, shmem.CmpEQ, 1)
			if err == nil {
				break
			}
			if !errors.Is(err, shmem.ErrTimeout) {
				return err
			}
		}
	}
	return c.Close()
})

// TestCommTimeout runs on goroutine PEs on one host and apart (TCP), and
// as separate processes apart (TCP between processes).
func TestCommTimeout(t *testing.T) {
	for _, fr := range []failRoute{failGoroutines, failTCP, failProcsTCP} {
		t.Run(fr.name+"/2", func(t *testing.T) {
			if err := runFail(t, fr, 2, "comm-timeout", 300*time.Millisecond); err != nil {
				t.Fatal(err)
			}
		})
	}
}
