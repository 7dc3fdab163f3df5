package ring

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// comm-rdv-many: no limit on how many rendezvous messages are in flight.
// 100 goroutines of PE 0 each Send a message longer than the eager limit
// with a tag of its own (k); PE 1 receives them in reverse tag order, so
// its first receive waits for the message sent last. Every Send must be
// announced while the others wait for their receives. Then the same
// again with 16 receiving goroutines on PE 1 (goroutine g takes the
// tags k ≡ g mod 16, highest first), more receives at once than PE 1 has
// claim words on PE 0 (claimsPer): the others wait for one, whatever
// the order. The deadline only turns a hang into an error.
var _ = register("comm-rdv-many", func(pe *shmem.PE) error {
	c, err := NewComm(pe.World())
	if err != nil {
		return err
	}
	const count, receivers = 100, 16
	ctx, cancel := context.WithTimeout(bg(), 30*time.Second)
	defer cancel()
	size := func(k int) int { return c.EagerLimit() + 1 + k*37 }
	recv := func(k int, dst []byte) error {
		st, err := Recv(ctx, c, 0, k, dst)
		if err != nil {
			return fmt.Errorf("Recv tag %d: %w", k, err)
		}
		if st.Bytes != size(k) || st.Tag != k || st.Source != 0 {
			return fmt.Errorf("Recv tag %d: %+v", k, st)
		}
		return checkMsg(dst[:st.Bytes], 0, k, k)
	}
	for round := range 2 {
		var wg sync.WaitGroup
		errs := make(chan error, count)
		switch c.Rank() {
		case 0:
			for k := range count {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := Send(ctx, c, 1, k, fillMsg(make([]byte, size(k)), 0, k, k)); err != nil {
						errs <- fmt.Errorf("round %d: Send tag %d: %w", round, k, err)
					}
				}()
			}
		case 1:
			if round == 0 {
				dst := make([]byte, size(count))
				for k := count - 1; k >= 0; k-- {
					if err := recv(k, dst); err != nil {
						errs <- fmt.Errorf("round 0 (after %d received): %w", count-1-k, err)
						break
					}
				}
				break
			}
			for g := range receivers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					dst := make([]byte, size(count))
					for k := count - 1 - (count-1-g)%receivers; k >= 0; k -= receivers {
						if err := recv(k, dst); err != nil {
							errs <- fmt.Errorf("round 1, goroutine %d: %w", g, err)
							return
						}
					}
				}()
			}
		}
		if err := firstErr(&wg, errs); err != nil {
			return err
		}
	}
	return closeComm(pe, c)
})

func TestCommRdvMany(t *testing.T) { each(t, "comm-rdv-many", 2) }

// The cap and a buffered rendezvous message, driven through the engine's
// own code (handle, search, cancel) on PE 1, with PE 0's claim word set
// as its Send's commit would set it (PE 0 sends nothing itself): a
// receive ends after the sender of its message committed, so the
// message must be kept and is buffered beyond the queue's cap. While the
// queue is over its cap a receive of another rendezvous message fails
// with ErrQueueFull, consuming nothing; once the buffered message is
// received, the queue is back within its cap and the other message can
// be matched.
func TestCommCapBuffered(t *testing.T) {
	const queueCap = 16 << 10
	err := shmem.Run(2, func(pe *shmem.PE) error {
		c, err := newCommCap(pe.World(), queueCap)
		if err != nil {
			return err
		}
		if c.Rank() == 1 {
			if err := capBuffered(c); err != nil {
				return err
			}
		}
		return closeComm(pe, c)
	}, shmem.WithTimeout(60*time.Second), shmem.WithHeapSize(16<<20))
	if err != nil {
		t.Fatal(err)
	}
}

// capBuffered is TestCommCapBuffered's PE 1.
func capBuffered(c *Comm) error {
	e := c.e
	size := c.EagerLimit() + 100 // longer than the cap
	data := fillMsg(make([]byte, size), 0, 1, 0)
	kind := kindOf[byte]()
	msg := func(typ uint8, tag int, n uint64, id, epoch uint32, payload []byte) Message {
		var h [hdrLong]byte
		putLong(h[:], typ, kind, 0, tag, n, id, epoch)
		return Message{Origin: 0, Data: append(h[:], payload...)}
	}
	handle := func(m Message) error {
		ok, err := e.handle(0, m)
		if err == nil && !ok {
			err = fmt.Errorf("message of type %d left in its lane", m.Data[0])
		}
		return err
	}
	if err := e.lock(); err != nil {
		return err
	}
	// Two announced messages: id 7 (tag 1), which a receive takes, and
	// id 8 (tag 2), which waits in the queue.
	q := &request{c: c, from: 0, tag: 1, kind: kind, size: 1, dst: make([]byte, size)}
	err := handle(msg(msgRTS, 1, uint64(size), 7, 0, nil))
	if err == nil {
		err = handle(msg(msgRTS, 2, uint64(size), 8, 0, nil))
	}
	var settled bool
	if err == nil {
		settled, err = c.search(q)
	}
	if err == nil && (!settled || q.ent == nil || !q.ent.claimed) {
		err = fmt.Errorf("the receive of tag 1 did not match its message: settled %v", settled)
	}
	// Every byte but the last arrives, the sender commits, and then the
	// receive ends.
	if err == nil {
		err = handle(msg(msgFrag, 0, 0, 7, 1, data[:size-1]))
	}
	var ent *entry
	if err == nil {
		ent = q.ent
		word := e.me*claimsPer + ent.claim
		var old uint64
		old, err = shmem.AtomicCompareSwap(e.rdv, word, rdvWord(7, 1, rdvMatched), rdvWord(7, 1, rdvDone), 0)
		if err == nil && old != rdvWord(7, 1, rdvMatched) {
			err = fmt.Errorf("PE 0's claim word is %#x, want matched", old)
		}
	}
	if err == nil {
		err = c.cancel(q)
	}
	if err == nil && (!ent.buffering || e.queued <= e.cap) {
		err = fmt.Errorf("after the receive ended: buffering %v, %d bytes queued, cap %d; want the message buffered beyond the cap", ent.buffering, e.queued, e.cap)
	}
	e.unlock()
	if err != nil {
		return err
	}
	// Over the cap: the other rendezvous message cannot be matched.
	ctx, cancel := context.WithTimeout(bg(), 20*time.Second)
	defer cancel()
	dst := make([]byte, size)
	if _, err := Recv(ctx, c, 0, 2, dst); !errors.Is(err, ErrQueueFull) || !errors.Is(err, shmem.ErrHeapExhausted) {
		return fmt.Errorf("Recv of tag 2 over the cap: %v, want ErrQueueFull", err)
	}
	// The last byte comes; the buffered message is received whole.
	if err := e.lock(); err != nil {
		return err
	}
	err = handle(msg(msgFrag, 0, uint64(size-1), 7, 1, data[size-1:]))
	e.unlock()
	if err != nil {
		return err
	}
	st, err := Recv(ctx, c, 0, 1, dst)
	if err != nil || st.Bytes != size {
		return fmt.Errorf("Recv of the buffered message: %+v, %v", st, err)
	}
	if err := checkMsg(dst, 0, 1, 0); err != nil {
		return err
	}
	// Within the cap again: tag 2 can be matched. Its sender withdraws
	// it, and the queue is empty.
	if err := e.lock(); err != nil {
		return err
	}
	defer e.unlock()
	q2 := &request{c: c, from: 0, tag: 2, kind: kind, size: 1, dst: dst}
	if settled, err := c.search(q2); err != nil || !settled || q2.ent == nil {
		return fmt.Errorf("the receive of tag 2 within the cap: settled %v, %v", settled, err)
	}
	if err := handle(msg(msgAbort, 0, 0, 8, 0, nil)); err != nil {
		return err
	}
	if q2.ent != nil || len(c.unexp) != 0 || e.queued != 0 || e.claimUsed[0] != 0 {
		return fmt.Errorf("after the abort: taking %v, %d queued entries, %d bytes queued, claims %#x", q2.ent != nil, len(c.unexp), e.queued, e.claimUsed[0])
	}
	return nil
}
