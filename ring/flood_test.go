package ring

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// payload fills buf with the bytes of message seq from PE from to PE to:
// its length and every byte depend on all three, so a message delivered
// to the wrong PE, out of order, twice or mangled fails the check.
func payload(buf []byte, from, to int, seq uint64) []byte {
	n := int((uint64(from)*7 + seq*13 + uint64(to)*3) % uint64(len(buf)+1))
	b := buf[:n]
	x := byte(from*31+to*17) ^ byte(seq) ^ byte(seq>>8)*5
	for i := range b {
		b[i] = x + byte(i)*7
	}
	return b
}

// allLanes is every ordered pair of distinct PEs.
func allLanes(n, depth, capacity int) []Lane {
	var lanes []Lane
	for f := 0; f < n; f++ {
		for t := 0; t < n; t++ {
			if f != t {
				lanes = append(lanes, Lane{From: f, To: t, Depth: depth, Capacity: capacity})
			}
		}
	}
	return lanes
}

// How the flood's receivers take and acknowledge messages.
const (
	ackEach   = iota // Recv, Ack every message
	ackBatch         // Poll (Recv when it finds nothing), Ack each origin's last
	ackEvery2        // Recv, Ack every second message and the last
)

// flood: every PE sends per messages to every other PE on Safe lanes of
// the given depth, from a goroutine of its own, while its main goroutine
// receives and acknowledges. Lengths run 0..200 bytes and the inline
// limit is 64, so both the inline and the bulk path are used. Every
// message must arrive exactly once, in order, intact.
func flood(depth, style int) scenarioFunc {
	return func(pe *shmem.PE) error {
		n, me := pe.NPEs(), pe.MyPE()
		const capacity = 200
		r, err := newRing(pe, allLanes(n, depth, capacity), Safe, 64)
		if err != nil {
			return err
		}
		per := scaled(5000, 20)
		sent := make(chan error, 1)
		go func() {
			buf := make([]byte, capacity)
			for s := uint64(1); s <= uint64(per); s++ {
				for k := 1; k < n; k++ {
					to := (me + k) % n
					seq, err := r.Send(to, payload(buf, me, to, s))
					if err != nil {
						sent <- err
						return
					}
					if seq != s {
						sent <- fmt.Errorf("Send to %d returned seq %d, want %d", to, seq, s)
						return
					}
				}
			}
			sent <- nil
		}()
		next := make([]uint64, n)
		for i := range next {
			next[i] = 1
		}
		buf := make([]byte, capacity)
		checkMsg := func(m Message) error {
			if m.Origin == me || m.Origin < 0 || m.Origin >= n {
				return fmt.Errorf("message from PE %d", m.Origin)
			}
			if m.Seq != next[m.Origin] {
				return fmt.Errorf("from PE %d: got seq %d, want %d (loss, duplicate or reorder)", m.Origin, m.Seq, next[m.Origin])
			}
			if want := payload(buf, m.Origin, me, m.Seq); !bytes.Equal(m.Data, want) {
				return fmt.Errorf("from PE %d seq %d: %d bytes %x, want %d bytes %x", m.Origin, m.Seq, len(m.Data), m.Data, len(want), want)
			}
			next[m.Origin]++
			return nil
		}
		var batch []Message
		for got, total := 0, per*(n-1); got < total; {
			if style == ackBatch {
				batch, err = r.PollAppend(batch[:0])
				if err != nil {
					return err
				}
				if len(batch) == 0 {
					m, err := r.Recv()
					if err != nil {
						return err
					}
					batch = append(batch, m)
				}
				for _, m := range batch {
					if err := checkMsg(m); err != nil {
						return err
					}
					got++
				}
				for o := range next {
					if o != me && next[o] > 1 {
						if err := r.Ack(o, next[o]-1); err != nil {
							return err
						}
					}
				}
				continue
			}
			m, err := r.Recv()
			if err != nil {
				return err
			}
			if err := checkMsg(m); err != nil {
				return err
			}
			got++
			if style == ackEach || m.Seq%2 == 0 || m.Seq == uint64(per) {
				if err := r.Ack(m.Origin, m.Seq); err != nil {
					return err
				}
			}
		}
		if err := <-sent; err != nil {
			return err
		}
		st := r.Stats()
		if err := check(st.Lost == 0 && st.Corrupt == 0, "stats %+v: want no loss or corruption", st); err != nil {
			return err
		}
		if m, err := r.Poll(); err != nil || len(m) != 0 {
			return fmt.Errorf("after the flood Poll returned %d messages, %v", len(m), err)
		}
		return r.Close()
	}
}

var (
	_ = register("flood-d1", flood(1, ackEach))
	_ = register("flood-d2", flood(2, ackBatch))
	_ = register("flood-d4", flood(4, ackEvery2))
)

func TestFloodDepth1(t *testing.T) { each(t, "flood-d1", 3) }
func TestFloodDepth2(t *testing.T) { each(t, "flood-d2", 3) }
func TestFloodDepth4(t *testing.T) { each(t, "flood-d4", 2, 4) }

// rawStream: PE 0 sends a stream on a Raw lane of depth 4 as fast as it
// can while PE 1 receives. Whatever PE 1 gets is intact and in rising
// order, the last message always arrives, and delivered + Lost is
// exactly the number sent.
var _ = register("raw-stream", func(pe *shmem.PE) error {
	if pe.NPEs() < 2 {
		return errors.New("needs 2 PEs")
	}
	r, err := newRing(pe, []Lane{{From: 0, To: 1, Depth: 4, Capacity: 120}}, Raw, 48)
	if err != nil {
		return err
	}
	total := uint64(scaled(20000, 10))
	buf := make([]byte, 120)
	switch pe.MyPE() {
	case 0:
		for s := uint64(1); s <= total; s++ {
			if _, err := r.Send(1, payload(buf, 0, 1, s)); err != nil {
				return err
			}
		}
	case 1:
		var delivered, last uint64
		for last < total {
			m, err := r.Recv()
			if err != nil {
				return err
			}
			if m.Seq <= last {
				return fmt.Errorf("seq %d after %d", m.Seq, last)
			}
			if want := payload(buf, 0, 1, m.Seq); !bytes.Equal(m.Data, want) {
				return fmt.Errorf("seq %d: %x, want %x", m.Seq, m.Data, want)
			}
			last = m.Seq
			delivered++
		}
		st := r.Stats()
		if delivered+st.Lost != total || st.Corrupt != 0 {
			return fmt.Errorf("delivered %d + lost %d != sent %d (corrupt %d)", delivered, st.Lost, total, st.Corrupt)
		}
	}
	return r.Close()
})

func TestRawStream(t *testing.T) { each(t, "raw-stream", 2) }
