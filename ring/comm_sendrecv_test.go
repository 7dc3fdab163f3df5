package ring

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// comm-sendrecv-ctx: a context ending SendRecv, on both of its paths (an
// eager send that finds room goes first and the receive follows in the
// caller's goroutine; otherwise the send runs in a goroutine beside the
// receive), by deadline and by cancel. Each phase checks that the error
// satisfies errors.Is(err, ctx.Err()), that it says which half failed
// and what became of the other, that the call returned within
// sendRecvPrompt of the ctx ending (a hang check, not a timing), and
// that nothing was lost or half-sent: a cancelled send never arrives
// (the next message on its tag is a later one), an ended receive took
// nothing (a later Recv gets the message), and a half that completed did
// complete.
//
// Rank 1 tells rank 0 when to cancel (after the half that must complete
// has) through flag, in rank 0's heap; rank 0 tells rank 1 when a
// phase's SendRecv has returned with a message on goTag. The error
// wording is part of SendRecv's contract (its doc comment), so the test
// reads it.
const (
	sendRecvPrompt = 5 * time.Second
	goTag          = 99
)

var _ = register("comm-sendrecv-ctx", func(pe *shmem.PE) error {
	c, err := NewComm(pe.World())
	if err != nil {
		return err
	}
	flag, err := shmem.Malloc[int64](pe, 1)
	if err != nil {
		return err
	}
	if err := pe.BarrierAll(); err != nil { // flag is zero everywhere
		return err
	}
	const little = 100
	big := 2*c.EagerLimit() + 3
	switch c.Rank() {
	case 0:
		err = sendRecvCtx0(c, flag, little, big)
	case 1:
		err = sendRecvCtx1(c, flag, little, big)
	}
	if err != nil {
		return err
	}
	return closeFreeing(pe, c, flag)
})

func TestCommSendRecvCtx(t *testing.T) { each(t, "comm-sendrecv-ctx", 2) }

// sendRecvCtx0 is rank 0's side: the SendRecv calls that end.
func sendRecvCtx0(c *Comm, flag shmem.Sym[int64], little, big int) error {
	dst := make([]byte, big)
	// cancelAt returns a context that is cancelled once rank 1 sets flag
	// to phase, and a function returning when that was.
	cancelAt := func(phase int64) (context.Context, func() time.Time) {
		ctx, cancel := context.WithCancel(bg())
		at := make(chan time.Time, 1)
		go func() {
			_ = shmem.WaitUntil(flag, 0, shmem.CmpGE, phase) // an error (the job ending) cancels as well
			at <- time.Now()
			cancel()
		}()
		return ctx, func() time.Time { return <-at }
	}
	deadline := func() (context.Context, context.CancelFunc, time.Time) {
		ctx, cancel := context.WithTimeout(bg(), 50*time.Millisecond)
		return ctx, cancel, time.Now()
	}
	// ended checks a SendRecv that ctx ended.
	ended := func(phase string, ctx context.Context, err error, want string, since time.Time) error {
		if el := time.Since(since); el > sendRecvPrompt {
			return fmt.Errorf("%s: SendRecv returned %v after its context ended (bound %v)", phase, el, sendRecvPrompt)
		}
		if err == nil || ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
			return fmt.Errorf("%s: SendRecv: %v, want an error satisfying errors.Is(err, %v)", phase, err, ctx.Err())
		}
		if !strings.Contains(err.Error(), want) {
			return fmt.Errorf("%s: SendRecv: %q does not say %q", phase, err, want)
		}
		return nil
	}
	// tell lets rank 1 go on with phase.
	tell := func(phase int) error { return Send(bg(), c, 1, goTag, []int32{int32(phase)}) }
	// later receives the message rank 1 sends on tag after tell: what
	// the ended receive must not have taken.
	later := func(phase string, tag, size int) error {
		st, err := Recv(bg(), c, 1, tag, dst)
		if err != nil || st != (Status{Source: 1, Tag: tag, Bytes: size}) {
			return fmt.Errorf("%s: the Recv after SendRecv's receive ended: %+v, %v", phase, st, err)
		}
		return checkMsg(dst[:size], 1, tag, 0)
	}

	// 1. The eager path, deadline: the send is delivered, the receive
	// (nothing to match) ends.
	ctx, cancel, start := deadline()
	_, err := SendRecv(ctx, c, 1, 10, fillMsg(make([]byte, little), 0, 10, 0), 1, 11, dst)
	cancel()
	if err := ended("eager, deadline", ctx, err, "the receive (the send was delivered)", start); err != nil {
		return err
	}
	if err := tell(1); err != nil {
		return err
	}
	if err := later("eager, deadline", 11, little); err != nil {
		return err
	}

	// 2. The eager path, cancelled once rank 1 has the sent message.
	ctx, at := cancelAt(2)
	_, err = SendRecv(ctx, c, 1, 20, fillMsg(make([]byte, little), 0, 20, 0), 1, 21, dst)
	if err := ended("eager, cancel", ctx, err, "the receive (the send was delivered)", at()); err != nil {
		return err
	}
	if err := tell(2); err != nil {
		return err
	}
	if err := later("eager, cancel", 21, little); err != nil {
		return err
	}

	// 3. The rendezvous path, deadline: neither half can match. The
	// cancelled send must not arrive: rank 1's first tag-30 message is
	// the one sent after it.
	ctx, cancel, start = deadline()
	_, err = SendRecv(ctx, c, 1, 30, fillMsg(make([]byte, big), 0, 30, 0), 1, 31, dst)
	cancel()
	if err := ended("rendezvous, deadline", ctx, err, "the receive (the send was cancelled)", start); err != nil {
		return err
	}
	if err := tell(3); err != nil {
		return err
	}
	if err := Send(bg(), c, 1, 30, fillMsg(make([]byte, big), 0, 30, 1)); err != nil {
		return fmt.Errorf("rendezvous, deadline: the Send after: %w", err)
	}
	if err := later("rendezvous, deadline", 31, big); err != nil {
		return err
	}

	// 4. The rendezvous path, cancelled once rank 1 has received the
	// sent message.
	ctx, at = cancelAt(4)
	_, err = SendRecv(ctx, c, 1, 40, fillMsg(make([]byte, big), 0, 40, 0), 1, 41, dst)
	if err := ended("rendezvous, cancel after the send", ctx, err, "the receive (the send was delivered)", at()); err != nil {
		return err
	}
	if err := tell(4); err != nil {
		return err
	}
	if err := later("rendezvous, cancel after the send", 41, big); err != nil {
		return err
	}

	// 5. The rendezvous path, cancelled once rank 1's Send to this PE
	// has returned. A large Send returns once its sender committed the
	// message (docs/ring.md: the claim word's CAS before the last byte),
	// which may be before this PE's receive has copied the last byte, so
	// the cancel may find the receive complete or still copying. Both
	// are legal: either the receive completed and the send, unmatched,
	// is cancelled; or the receive ended by ctx and the committed
	// message stays queued, whole, for a later Recv. In both the send
	// must not arrive.
	ctx, at = cancelAt(5)
	st, err := SendRecv(ctx, c, 1, 50, fillMsg(make([]byte, big), 0, 50, 0), 1, 51, dst)
	if err != nil && strings.Contains(err.Error(), "the receive (the send was cancelled)") {
		if err := ended("rendezvous, cancel while receiving", ctx, err, "the receive (the send was cancelled)", at()); err != nil {
			return err
		}
		if st, err = Recv(bg(), c, 1, 51, dst); err != nil {
			return fmt.Errorf("rendezvous, cancel while receiving: the Recv of the committed message: %w", err)
		}
	} else if err := ended("rendezvous, cancel after the receive", ctx, err, "the send (the receive completed)", at()); err != nil {
		return err
	}
	if st != (Status{Source: 1, Tag: 51, Bytes: big}) {
		return fmt.Errorf("rendezvous, cancel after the receive: status %+v of the completed receive", st)
	}
	if err := checkMsg(dst, 1, 51, 0); err != nil {
		return fmt.Errorf("rendezvous, cancel after the receive: %w", err)
	}
	if err := tell(5); err != nil {
		return err
	}
	if err := Send(bg(), c, 1, 50, fillMsg(make([]byte, big), 0, 50, 1)); err != nil {
		return fmt.Errorf("rendezvous, cancel after the receive: the Send after: %w", err)
	}
	return nil
}

// sendRecvCtx1 is rank 1's side: it receives what rank 0's SendRecv
// calls must have sent (and only that), sets flag for the cancels, and
// sends what their receives must not have taken.
func sendRecvCtx1(c *Comm, flag shmem.Sym[int64], little, big int) error {
	dst := make([]byte, big)
	recv := func(phase string, tag, size, k int) error {
		st, err := Recv(bg(), c, 0, tag, dst)
		if err != nil || st != (Status{Source: 0, Tag: tag, Bytes: size}) {
			return fmt.Errorf("phase %s: Recv of rank 0's tag-%d message: %+v, %v", phase, tag, st, err)
		}
		if err := checkMsg(dst[:size], 0, tag, k); err != nil {
			return fmt.Errorf("phase %s: %w (message %d expected)", phase, err, k)
		}
		return nil
	}
	wait := func(phase int) error {
		var v [1]int32
		if _, err := Recv(bg(), c, 0, goTag, v[:]); err != nil {
			return err
		}
		return check(v[0] == int32(phase), "go for phase %d, want %d", v[0], phase)
	}
	setFlag := func(phase int64) error { return shmem.AtomicSet(flag, 0, phase, 0) }
	send := func(tag, size int) error { return Send(bg(), c, 0, tag, fillMsg(make([]byte, size), 1, tag, 0)) }

	// 1.
	if err := recv("1", 10, little, 0); err != nil {
		return err
	}
	if err := wait(1); err != nil {
		return err
	}
	if err := send(11, little); err != nil {
		return err
	}
	// 2.
	if err := recv("2", 20, little, 0); err != nil {
		return err
	}
	if err := setFlag(2); err != nil {
		return err
	}
	if err := wait(2); err != nil {
		return err
	}
	if err := send(21, little); err != nil {
		return err
	}
	// 3: the cancelled message 0 must not come; message 1 must.
	if err := wait(3); err != nil {
		return err
	}
	if err := recv("3", 30, big, 1); err != nil {
		return err
	}
	if err := send(31, big); err != nil {
		return err
	}
	// 4.
	if err := recv("4", 40, big, 0); err != nil {
		return err
	}
	if err := setFlag(4); err != nil {
		return err
	}
	if err := wait(4); err != nil {
		return err
	}
	if err := send(41, big); err != nil {
		return err
	}
	// 5: this Send returns once rank 0's SendRecv has received it.
	if err := send(51, big); err != nil {
		return err
	}
	if err := setFlag(5); err != nil {
		return err
	}
	if err := wait(5); err != nil {
		return err
	}
	return recv("5", 50, big, 1)
}
