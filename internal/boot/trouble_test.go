package boot

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/errs"
)

// troubled waits for c's Trouble channel.
func troubled(t *testing.T, c *Client) {
	t.Helper()
	select {
	case <-c.Trouble():
	case <-time.After(wait):
		t.Fatalf("rank %d: Trouble did not close", c.Rank())
	}
}

func TestJobEndedTellsOthers(t *testing.T) {
	j := startJob(t, 3)
	cs := j.dialAll(t)
	select {
	case <-cs[0].Trouble():
		t.Fatal("Trouble closed before anything happened")
	default:
	}
	if err := cs[2].Exit(7); err != nil {
		t.Fatal(err)
	}
	if !j.s.WaitExitTold(wait) {
		t.Fatal("WaitExitTold timed out")
	}
	for _, c := range cs[:2] {
		troubled(t, c)
		w := c.Troubled()
		if w.Closed || !w.Exit || w.Rank != 2 || w.Code != 7 || !errors.Is(w.Err, errs.PeerLost) {
			t.Fatalf("rank %d: Troubled() = %+v; want exit of rank 2 with 7", c.Rank(), w)
		}
		if _, err := c.Allgather(context.Background(), nil); !errors.Is(err, errs.PeerLost) {
			t.Fatalf("rank %d: Allgather after JobEnded: %v, want ErrPeerLost", c.Rank(), err)
		}
	}
	select {
	case <-cs[2].Trouble():
		t.Fatal("the exiting rank was told of its own exit")
	default:
	}
}

func TestTroubleOnLossAndClose(t *testing.T) {
	j := startJob(t, 3)
	cs := j.dialAll(t)
	drop(cs[1])
	troubled(t, cs[0])
	if w := cs[0].Troubled(); !w.Lost || w.Rank != 1 || w.Exit || w.Closed || !errors.Is(w.Err, errs.PeerLost) {
		t.Fatalf("after a loss Troubled() = %+v, want rank 1 lost", w)
	}
	k := startJob(t, 1)
	c := k.dial(t, 0)
	c.Close()
	troubled(t, c)
	if w := c.Troubled(); !w.Closed || w.Exit || w.Err != nil {
		t.Fatalf("after Close Troubled() = %+v; want closed", w)
	}
}

func TestServerGoneIsTrouble(t *testing.T) {
	j := startJob(t, 2)
	cs := j.dialAll(t)
	j.s.Close()
	troubled(t, cs[0])
	if w := cs[0].Troubled(); !w.ServerGone || w.Closed || w.Exit || !errors.Is(w.Err, errs.PeerLost) {
		t.Fatalf("after the server closed Troubled() = %+v", w)
	}
}

func TestFirstGenerationDone(t *testing.T) {
	j := startJob(t, 2)
	cs := j.dialAll(t)
	gatherAll(t, cs, 1)
	cs[0].Close()
	select {
	case <-j.s.FirstGenerationDone():
		t.Fatal("generation 1 ended with a rank still in it")
	default:
	}
	cs[1].Close()
	select {
	case <-j.s.FirstGenerationDone():
	case <-time.After(wait):
		t.Fatal("FirstGenerationDone did not close after every Bye")
	}
}

func TestUnixAndOtherJob(t *testing.T) {
	name := "@goshmem-test-" + t.Name()
	ln, err := net.Listen("unix", name)
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(ln, "job-a", testKey(1), 1)
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(context.Background()) }()
	defer func() { s.Close(); <-errc }()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := Dial(ctx, UnixPrefix+name, "job-b", testKey(1), 0, 1); !errors.Is(err, ErrOtherJob) || !errors.Is(err, errs.Auth) {
		t.Fatalf("Dial of another job: %v, want ErrOtherJob and errs.Auth", err)
	}
	if _, err := Dial(ctx, UnixPrefix+name, "job-a", testKey(2), 0, 1); err == nil || errors.Is(err, ErrOtherJob) {
		t.Fatalf("Dial with a wrong key: %v, want a refusal that is not ErrOtherJob", err)
	}
	c, err := Dial(ctx, UnixPrefix+name, "job-a", testKey(1), 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Allgather(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	c.Close()
}
