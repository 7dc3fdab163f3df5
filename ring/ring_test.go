package ring

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// expectSeqs checks that msgs are exactly the messages want, from PE
// from, with their payloads.
func expectSeqs(msgs []Message, from, to int, want ...uint64) error {
	got := make([]uint64, len(msgs))
	for i, m := range msgs {
		got[i] = m.Seq
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("got messages %v, want %v", got, want)
	}
	buf := make([]byte, 256)
	for _, m := range msgs {
		if m.Origin != from {
			return fmt.Errorf("message %d from PE %d, want %d", m.Seq, m.Origin, from)
		}
		if p := payload(buf[:fixedLen], from, to, m.Seq); !bytes.Equal(m.Data, p) {
			return fmt.Errorf("message %d: payload %x, want %x", m.Seq, m.Data, p)
		}
	}
	return nil
}

// fixedLen is the payload buffer length of the deterministic scenarios.
const fixedLen = 40

// sendRange sends messages lo..hi on the lane to PE to.
func sendRange(r *Ring, me, to int, lo, hi uint64) error {
	buf := make([]byte, fixedLen)
	for s := lo; s <= hi; s++ {
		seq, err := r.Send(to, payload(buf, me, to, s))
		if err != nil {
			return err
		}
		if seq != s {
			return fmt.Errorf("Send returned %d, want %d", seq, s)
		}
	}
	return nil
}

// rawOverwrite: with the receiver not looking, PE 0 sends more than Depth
// messages; after a barrier PE 1 gets exactly the newest Depth, in
// order, and Lost counts the rest exactly. Run once with inline and
// once with bulk messages.
func rawOverwrite(inlineMax int) scenarioFunc {
	return func(pe *shmem.PE) error {
		const depth = 4
		r, err := newRing(pe, []Lane{{From: 0, To: 1, Depth: depth, Capacity: 64}}, Raw, inlineMax)
		if err != nil {
			return err
		}
		me := pe.MyPE()
		steps := []struct {
			hi       uint64   // PE 0 sends up to this message
			want     []uint64 // PE 1 then polls these
			wantLost uint64
		}{
			{11, []uint64{8, 9, 10, 11}, 7},
			{13, []uint64{12, 13}, 7},
			{13, nil, 7},
			{17, []uint64{14, 15, 16, 17}, 7},
			{23, []uint64{20, 21, 22, 23}, 9},
		}
		var lo uint64 = 1
		for i, st := range steps {
			if me == 0 {
				if err := sendRange(r, 0, 1, lo, st.hi); err != nil {
					return err
				}
			}
			lo = st.hi + 1
			if err := pe.BarrierAll(); err != nil {
				return err
			}
			if me == 1 {
				msgs, err := r.Poll()
				if err != nil {
					return fmt.Errorf("step %d: %v", i, err)
				}
				if err := expectSeqs(msgs, 0, 1, st.want...); err != nil {
					return fmt.Errorf("step %d: %v", i, err)
				}
				s := r.Stats()
				if s.Lost != st.wantLost || s.Corrupt != 0 {
					return fmt.Errorf("step %d: stats %+v, want Lost %d", i, s, st.wantLost)
				}
				if s.MaxLag < depth+7 {
					return fmt.Errorf("step %d: MaxLag %d, want at least %d", i, s.MaxLag, depth+7)
				}
			}
			if err := pe.BarrierAll(); err != nil {
				return err
			}
		}
		return r.Close()
	}
}

var (
	_ = register("raw-overwrite-inline", rawOverwrite(64))
	_ = register("raw-overwrite-bulk", rawOverwrite(16))
)

func TestRawOverwrite(t *testing.T) {
	t.Run("inline", func(t *testing.T) { each(t, "raw-overwrite-inline", 2) })
	t.Run("bulk", func(t *testing.T) { each(t, "raw-overwrite-bulk", 2) })
}

// flipCase is a byte of slot 1 (holding message 2) to flip, and how.
type flipCase struct {
	name string
	off  func(slotSize int) int
	mask byte
}

var flips = []flipCase{
	{"seq-low", func(int) int { return offSeq }, 0x20},
	{"seq-low-bit0", func(int) int { return offSeq }, 0x01}, // seq 2 becomes 3
	{"seq-high", func(int) int { return offSeq + 7 }, 0x80},
	{"length", func(int) int { return offWord }, 0x04},
	{"bulk-flag", func(int) int { return offWord + 3 }, 0x80},
	{"crc", func(int) int { return offCRC + 2 }, 0x10},
	{"payload-first", func(int) int { return offPayload }, 0x01},
	{"payload-last", func(int) int { return offPayload + len(payload(make([]byte, fixedLen), 0, 1, 2)) - 1 }, 0x40},
	{"tail-low", func(s int) int { return s - tailSize }, 0x01},
	{"tail-high", func(s int) int { return s - 1 }, 0x80},
}

// corruptFlip: PE 0 sends messages 1..3; PE 1 flips one byte of message
// 2's slot in its own heap (as a stray write or bad memory would). The
// flip is detected, counted, reported, and message 2 is never
// delivered; 1 and 3 are. Every flip case, in both modes, and with
// Recv as well as Poll. With inlineMax 16 the 40-byte messages go bulk
// (their slots then have no payload bytes to flip).
func corruptFlip(inlineMax int) scenarioFunc {
	return func(pe *shmem.PE) error {
		me := pe.MyPE()
		for _, mode := range []Mode{Safe, Raw} {
			for _, useRecv := range []bool{false, true} {
				for _, fc := range flips {
					if inlineMax < fixedLen && fc.name[:min(7, len(fc.name))] == "payload" {
						continue
					}
					if err := corruptOnce(pe, me, mode, useRecv, fc, inlineMax); err != nil {
						return fmt.Errorf("%v, recv %v, flip %s: %w", mode, useRecv, fc.name, err)
					}
				}
			}
		}
		return nil
	}
}

func corruptOnce(pe *shmem.PE, me int, mode Mode, useRecv bool, fc flipCase, inlineMax int) error {
	r, err := newRing(pe, []Lane{{From: 0, To: 1, Depth: 4, Capacity: 64}}, mode, inlineMax)
	if err != nil {
		return err
	}
	if me == 0 {
		if err := sendRange(r, 0, 1, 1, 3); err != nil {
			return err
		}
	}
	if err := pe.BarrierAll(); err != nil {
		return err
	}
	if me == 1 {
		l := r.inFr[0]
		s := l.slot(1)
		s[fc.off(len(s))] ^= fc.mask
		var got []Message
		var perr error
		if useRecv {
			for i := 0; i < 3; i++ {
				m, err := r.Recv()
				if err != nil {
					if perr != nil {
						return fmt.Errorf("second error %v", err)
					}
					perr = err
					continue
				}
				got = append(got, m)
			}
		} else {
			got, perr = r.Poll()
			if err := expectSeqs(got, 0, 1, 1); err != nil {
				return fmt.Errorf("first Poll: %v (error %v)", err, perr)
			}
			more, err := r.Poll()
			if err != nil {
				return fmt.Errorf("second Poll: %v", err)
			}
			got = append(got, more...)
		}
		if !errors.Is(perr, shmem.ErrProtocol) {
			return fmt.Errorf("error %v, want ErrProtocol", perr)
		}
		if err := expectSeqs(got, 0, 1, 1, 3); err != nil {
			return err
		}
		if st := r.Stats(); st.Corrupt != 1 || st.Lost != 0 {
			return fmt.Errorf("stats %+v, want Corrupt 1", st)
		}
		if mode == Safe {
			if err := r.Ack(0, 3); err != nil {
				return err
			}
		}
	}
	return r.Close()
}

var (
	_ = register("corrupt-inline", corruptFlip(64))
	_ = register("corrupt-bulk", corruptFlip(16))
)

func TestCorruption(t *testing.T) {
	t.Run("inline", func(t *testing.T) { each(t, "corrupt-inline", 2) })
	t.Run("bulk", func(t *testing.T) { each(t, "corrupt-bulk", 2) })
}

// badConfigs: every invalid configuration and every disagreement gives
// every PE the same kind of error, nothing stays allocated, and a good
// ring can be made afterwards.
var _ = register("bad-configs", func(pe *shmem.PE) error {
	n, me := pe.NPEs(), pe.MyPE()
	good := []Lane{{From: 0, To: 1, Depth: 2, Capacity: 8}, {From: 1, To: 0, Depth: 2, Capacity: 8}}
	cases := []struct {
		name  string
		lanes []Lane
		mode  Mode
		want  error
	}{
		{"from out of range", []Lane{{From: n, To: 0, Depth: 1, Capacity: 8}}, Safe, shmem.ErrBadPE},
		{"to out of range", []Lane{{From: 0, To: -1, Depth: 1, Capacity: 8}}, Safe, shmem.ErrBadPE},
		{"self lane", []Lane{{From: 1, To: 1, Depth: 1, Capacity: 8}}, Safe, shmem.ErrInvalid},
		{"zero depth", []Lane{{From: 0, To: 1, Depth: 0, Capacity: 8}}, Safe, shmem.ErrInvalid},
		{"negative depth", []Lane{{From: 0, To: 1, Depth: -3, Capacity: 8}}, Safe, shmem.ErrInvalid},
		{"zero capacity", []Lane{{From: 0, To: 1, Depth: 1, Capacity: 0}}, Safe, shmem.ErrInvalid},
		{"depth too large", []Lane{{From: 0, To: 1, Depth: MaxDepth + 1, Capacity: 8}}, Safe, shmem.ErrInvalid},
		{"capacity too large", []Lane{{From: 0, To: 1, Depth: 1, Capacity: MaxCapacity + 1}}, Safe, shmem.ErrInvalid},
		{"duplicate lane", append(append([]Lane{}, good...), Lane{From: 0, To: 1, Depth: 4, Capacity: 8}), Safe, shmem.ErrInvalid},
		{"bad mode", good, Mode(0), shmem.ErrInvalid},
		{"larger than the heap", []Lane{{From: 0, To: 1, Depth: MaxDepth, Capacity: MaxCapacity}}, Safe, shmem.ErrHeapExhausted},
		{"depth differs", pick(me == 1, []Lane{{From: 0, To: 1, Depth: 3, Capacity: 8}}, good[:1]), Safe, shmem.ErrAsymmetric},
		{"lane count differs", pick(me == n-1, good, good[:1]), Safe, shmem.ErrAsymmetric},
		{"mode differs", good, pick(me == 0, Raw, Safe), shmem.ErrAsymmetric},
		{"invalid on one PE only", pick(me == 1, []Lane{{From: 0, To: 0, Depth: 1, Capacity: 1}}, good), Safe, shmem.ErrAsymmetric},
	}
	before := pe.Info().HeapUsed
	for _, c := range cases {
		r, err := New(pe, c.lanes, c.mode)
		if r != nil || !errors.Is(err, c.want) {
			return fmt.Errorf("%s: got %v; want %v", c.name, err, c.want)
		}
		if used := pe.Info().HeapUsed; used != before {
			return fmt.Errorf("%s: heap use %d after the failed New, %d before", c.name, used, before)
		}
		if err := pe.BarrierAll(); err != nil {
			return err
		}
	}
	// A ring that fits the heap's size but not its free space: the
	// second allocation fails, and the first is given back.
	hog, err := shmem.Malloc[byte](pe, 2<<20)
	if err != nil {
		return err
	}
	withHog := pe.Info().HeapUsed
	tooBig := []Lane{{From: 0, To: 1, Depth: 15, Capacity: 1 << 20}}
	if r, err := New(pe, tooBig, Safe); r != nil || !errors.Is(err, shmem.ErrHeapExhausted) {
		return fmt.Errorf("larger than the free heap: got %v, want ErrHeapExhausted", err)
	}
	if used := pe.Info().HeapUsed; used != withHog {
		return fmt.Errorf("larger than the free heap: heap use %d after the failed New, %d before", used, withHog)
	}
	if err := shmem.Free(hog); err != nil {
		return err
	}
	r, err := New(pe, good, Safe)
	if err != nil {
		return err
	}
	if err := r.Close(); err != nil {
		return err
	}
	if used := pe.Info().HeapUsed; used != before {
		return fmt.Errorf("heap use %d after Close, %d before New", used, before)
	}
	if err := r.Close(); !errors.Is(err, shmem.ErrFinalized) {
		return fmt.Errorf("second Close: %v, want ErrFinalized", err)
	}
	if _, err := r.Send(1-me%2, []byte("x")); !errors.Is(err, shmem.ErrFinalized) {
		return fmt.Errorf("Send after Close: %v, want ErrFinalized", err)
	}
	if _, err := r.Poll(); !errors.Is(err, shmem.ErrFinalized) {
		return fmt.Errorf("Poll after Close: %v, want ErrFinalized", err)
	}
	return nil
})

func pick[T any](cond bool, a, b T) T {
	if cond {
		return a
	}
	return b
}

func TestBadConfigs(t *testing.T) { each(t, "bad-configs", 2, 3) }

// misuse: the per-call errors of Send, Ack and Recv.
var _ = register("misuse", func(pe *shmem.PE) error {
	me := pe.MyPE()
	r, err := New(pe, []Lane{{From: 0, To: 1, Depth: 2, Capacity: 16}}, Safe)
	if err != nil {
		return err
	}
	// go is PE 1's word: PE 0 sets it once its third Send is counted as
	// waiting; PE 1 acknowledges only after that, so the Send must wait.
	goWord, err := shmem.Malloc[int64](pe, 1)
	if err != nil {
		return err
	}
	switch me {
	case 0:
		if _, err := r.Send(1, make([]byte, 17)); !errors.Is(err, shmem.ErrInvalid) {
			return fmt.Errorf("oversized Send: %v", err)
		}
		for _, to := range []int{0, 2, -1} {
			if _, err := r.Send(to, nil); !errors.Is(err, shmem.ErrInvalid) {
				return fmt.Errorf("Send to %d: %v", to, err)
			}
		}
		if _, err := r.Recv(); !errors.Is(err, shmem.ErrInvalid) {
			return fmt.Errorf("Recv with no incoming lane: %v", err)
		}
		if err := r.Ack(1, 1); !errors.Is(err, shmem.ErrInvalid) {
			return fmt.Errorf("Ack with no lane: %v", err)
		}
		for i := 0; i < 2; i++ {
			if _, err := r.Send(1, []byte{byte(i)}); err != nil {
				return err
			}
		}
		if st := r.Stats(); st.Waits != 0 {
			return fmt.Errorf("stats %+v after two Sends into a depth-2 lane: want no wait", st)
		}
		// The third needs PE 1's Ack of 1, which PE 1 gives only after
		// this goroutine has seen the Send counted as waiting (Waits is
		// counted before the wait begins).
		done := make(chan error, 1)
		go func() {
			_, err := r.Send(1, []byte{2})
			done <- err
		}()
		for r.Stats().Waits == 0 {
			select {
			case err := <-done:
				return fmt.Errorf("the third Send returned (%v) without waiting for PE 1's Ack", err)
			default:
				runtime.Gosched()
			}
		}
		select {
		case err := <-done:
			return fmt.Errorf("the third Send returned (%v) before PE 1 acknowledged", err)
		default:
		}
		if err := shmem.AtomicSet(goWord, 0, 1, 1); err != nil {
			return err
		}
		if err := <-done; err != nil {
			return err
		}
		if st := r.Stats(); st.Waits != 1 || st.WaitTime <= 0 {
			return fmt.Errorf("stats %+v: want one wait", st)
		}
	case 1:
		if err := r.Ack(0, 1); !errors.Is(err, shmem.ErrInvalid) {
			return fmt.Errorf("Ack before anything arrived: %v", err)
		}
		m, err := r.Recv()
		if err != nil || m.Seq != 1 || !bytes.Equal(m.Data, []byte{0}) {
			return fmt.Errorf("Recv: %+v, %v", m, err)
		}
		if err := r.Ack(0, 2); !errors.Is(err, shmem.ErrInvalid) {
			return fmt.Errorf("Ack past what was received: %v", err)
		}
		if err := shmem.WaitUntil(goWord, 0, shmem.CmpEQ, 1); err != nil { // PE 0's third Send waits
			return err
		}
		for i := 0; i < 2; i++ {
			if err := r.Ack(0, 1); err != nil { // idempotent
				return fmt.Errorf("Ack: %v", err)
			}
		}
		if err := r.Ack(0, 0); err != nil {
			return fmt.Errorf("Ack of 0: %v", err)
		}
		for want := uint64(2); want <= 3; want++ {
			m, err := r.Recv()
			if err != nil || m.Seq != want {
				return fmt.Errorf("Recv: %+v, %v, want seq %d", m, err, want)
			}
		}
		if err := r.Ack(0, 3); err != nil {
			return err
		}
	}
	if err := r.Close(); err != nil {
		return err
	}
	if err := shmem.Free(goWord); err != nil {
		return err
	}
	raw, err := New(pe, []Lane{{From: 1, To: 0, Depth: 1, Capacity: 1}}, Raw)
	if err != nil {
		return err
	}
	if me == 0 {
		if err := raw.Ack(1, 0); !errors.Is(err, shmem.ErrInvalid) {
			return fmt.Errorf("Ack on a Raw ring: %v", err)
		}
	}
	return raw.Close()
})

func TestMisuse(t *testing.T) { each(t, "misuse", 2) }

// typed: SendT and RecvT move values of several element types, both
// inline and bulk.
var _ = register("typed", func(pe *shmem.PE) error {
	me := pe.MyPE()
	r, err := newRing(pe, []Lane{{From: 0, To: 1, Depth: 2, Capacity: 4096}}, Safe, 256)
	if err != nil {
		return err
	}
	f64 := []float64{1.5, -2.25, 1e300}
	c128 := make([]complex128, 200) // 3200 bytes: bulk
	for i := range c128 {
		c128[i] = complex(float64(i), -float64(i))
	}
	i16 := []int16{-1, 2, -3}
	switch me {
	case 0:
		if _, err := SendT(r, 1, f64); err != nil {
			return err
		}
		if _, err := SendT(r, 1, c128); err != nil {
			return err
		}
		if _, err := SendT(r, 1, i16); err != nil {
			return err
		}
	case 1:
		gotF, m, err := RecvT(r, []float64{42})
		if err != nil || fmt.Sprint(gotF) != fmt.Sprint(append([]float64{42}, f64...)) {
			return fmt.Errorf("float64: %v, %v", gotF, err)
		}
		if _, err := AppendT[complex128](nil, m); !errors.Is(err, shmem.ErrProtocol) {
			return fmt.Errorf("24 bytes as complex128: %v, want ErrProtocol", err)
		}
		gotC, m, err := RecvT[complex128](r, nil)
		if err != nil || fmt.Sprint(gotC) != fmt.Sprint(c128) {
			return fmt.Errorf("complex128: %v", err)
		}
		if err := r.Ack(0, m.Seq); err != nil {
			return err
		}
		gotI, _, err := RecvT[int16](r, nil)
		if err != nil || fmt.Sprint(gotI) != fmt.Sprint(i16) {
			return fmt.Errorf("int16: %v, %v", gotI, err)
		}
	}
	return r.Close()
})

func TestTyped(t *testing.T) { each(t, "typed", 2) }

// Recv ends with ErrTimeout when nothing arrives within the PE's timeout.
func TestRecvTimeout(t *testing.T) {
	done := make(chan struct{}) // PE 1's Recv has given up: PE 0 may enter Close
	err := shmem.Run(2, func(pe *shmem.PE) error {
		r, err := New(pe, []Lane{{From: 0, To: 1, Depth: 1, Capacity: 8}}, Safe)
		if err != nil {
			return err
		}
		if pe.MyPE() == 1 {
			start := time.Now()
			_, err := r.Recv()
			if !errors.Is(err, shmem.ErrTimeout) {
				return fmt.Errorf("Recv: %v, want ErrTimeout", err)
			}
			if el := time.Since(start); el < 200*time.Millisecond || el > 10*time.Second {
				return fmt.Errorf("Recv gave up after %v", el)
			}
			close(done)
		} else {
			select {
			case <-done:
			case <-time.After(20 * time.Second):
			}
		}
		return r.Close()
	}, shmem.WithTimeout(300*time.Millisecond), shmem.WithHeapSize(4<<20))
	if err != nil {
		t.Fatal(err)
	}
}

// Recv (and a Send waiting for an ack) end with ErrPeerLost when a peer
// fails.
func TestPeerLost(t *testing.T) {
	got := make(chan error, 2)
	boom := errors.New("PE 0 fails on purpose")
	err := shmem.Run(3, func(pe *shmem.PE) error {
		r, err := New(pe, []Lane{{From: 0, To: 1, Depth: 1, Capacity: 8}, {From: 2, To: 0, Depth: 1, Capacity: 8}}, Safe)
		if err != nil {
			return err
		}
		switch pe.MyPE() {
		case 0:
			time.Sleep(50 * time.Millisecond)
			return boom
		case 1:
			_, err := r.Recv()
			got <- err
		case 2:
			if _, err := r.Send(0, []byte("a")); err != nil {
				return err
			}
			_, err := r.Send(0, []byte("b")) // waits for an ack that never comes
			got <- err
		}
		return nil
	}, shmem.WithTimeout(30*time.Second), shmem.WithHeapSize(4<<20))
	if !errors.Is(err, boom) {
		t.Fatalf("Run: %v", err)
	}
	for i := 0; i < 2; i++ {
		if err := <-got; !errors.Is(err, shmem.ErrPeerLost) {
			t.Errorf("got %v, want ErrPeerLost", err)
		}
	}
}

// A Safe lane that finds a later message where it expects an earlier one
// was lapped: an error, every time, not a stall.
func TestSafeLapped(t *testing.T) {
	err := shmem.Run(2, func(pe *shmem.PE) error {
		r, err := New(pe, []Lane{{From: 0, To: 1, Depth: 2, Capacity: 64}}, Safe)
		if err != nil {
			return err
		}
		if pe.MyPE() == 0 {
			if err := sendRange(r, 0, 1, 1, 2); err != nil {
				return err
			}
			// A sender that ignored the acks: write message 3 over 1.
			l := r.outTo[1]
			encodeSlot(l.stage, 3, []byte("x"))
			if err := shmem.PutSignal(l.slot(0), l.stage, l.pub, 3, shmem.SignalSet, 1); err != nil {
				return err
			}
		}
		if err := pe.BarrierAll(); err != nil {
			return err
		}
		if pe.MyPE() == 1 {
			for i := 0; i < 2; i++ {
				msgs, err := r.Poll()
				if len(msgs) != 0 || !errors.Is(err, shmem.ErrProtocol) {
					return fmt.Errorf("Poll %d: %d messages, %v; want ErrProtocol", i, len(msgs), err)
				}
			}
			if _, err := r.Recv(); !errors.Is(err, shmem.ErrProtocol) {
				return fmt.Errorf("Recv: %v, want ErrProtocol", err)
			}
		}
		return r.Close()
	}, shmem.WithHeapSize(4<<20))
	if err != nil {
		t.Fatal(err)
	}
}

// Send allocates nothing: Safe lanes that need not wait, Raw lanes,
// inline and bulk messages, and SendT. testing.AllocsPerRun counts the
// whole process's allocations, so PE 1 is parked on a channel (which
// allocates nothing) for the whole measurement: the count is PE 0's
// Sends' and the runtime's own, and one allocation per Send shows as 1.
func TestSendAllocs(t *testing.T) {
	if raceOn {
		t.Skip("the race detector allocates")
	}
	const runs = 200
	parked, resume := make(chan struct{}), make(chan struct{})
	err := shmem.Run(2, func(pe *shmem.PE) error {
		for _, mode := range []Mode{Safe, Raw} {
			r, err := newRing(pe, []Lane{{From: 0, To: 1, Depth: 4 * runs, Capacity: 512}}, mode, 128)
			if err != nil {
				return err
			}
			if pe.MyPE() == 1 {
				parked <- struct{}{}
				<-resume
			} else {
				<-parked
				small, big, vals := make([]byte, 64), make([]byte, 500), make([]float64, 8)
				var failed error
				for _, c := range []struct {
					name string
					f    func()
				}{
					{"inline", func() { _, err = r.Send(1, small) }},
					{"bulk", func() { _, err = r.Send(1, big) }},
					{"SendT", func() { _, err = SendT(r, 1, vals) }},
				} {
					if a := testing.AllocsPerRun(runs, c.f); a != 0 && failed == nil {
						failed = fmt.Errorf("%v %s: %v allocations per Send", mode, c.name, a)
					}
					if err != nil && failed == nil {
						failed = fmt.Errorf("%v %s: %w", mode, c.name, err)
					}
				}
				resume <- struct{}{}
				if failed != nil {
					return failed
				}
			}
			if err := pe.BarrierAll(); err != nil {
				return err
			}
			if err := r.Close(); err != nil {
				return err
			}
		}
		return nil
	}, shmem.WithHeapSize(16<<20))
	if err != nil {
		t.Fatal(err)
	}
}

// sleepyRecv: Recv has gone to sleep by the time the message
// comes, and the sender's put wakes it: on a lane's pub word (PE 1, one
// incoming lane) and on the doorbell (PE 0, two incoming lanes).
var _ = register("sleepy-recv", func(pe *shmem.PE) error {
	if pe.NPEs() != 3 {
		return errors.New("needs 3 PEs")
	}
	lanes := []Lane{{From: 1, To: 0, Depth: 2, Capacity: 8}, {From: 2, To: 0, Depth: 2, Capacity: 8}, {From: 0, To: 1, Depth: 2, Capacity: 8}}
	r, err := New(pe, lanes, Safe)
	if err != nil {
		return err
	}
	const nap = 50 * time.Millisecond
	switch pe.MyPE() {
	case 0:
		for i := 0; i < 2; i++ {
			start := time.Now()
			m, err := r.Recv()
			if err != nil {
				return err
			}
			if el := time.Since(start); i == 0 && el < nap/2 {
				return fmt.Errorf("Recv returned after %v, before anything was sent", el)
			}
			if m.Seq != 1 || len(m.Data) != 1 || int(m.Data[0]) != m.Origin {
				return fmt.Errorf("got %+v", m)
			}
		}
		time.Sleep(nap)
		if _, err := r.Send(1, []byte{0}); err != nil {
			return err
		}
	case 1:
		time.Sleep(nap)
		if _, err := r.Send(0, []byte{1}); err != nil {
			return err
		}
		m, err := r.Recv()
		if err != nil || m.Origin != 0 {
			return fmt.Errorf("PE 1 got %+v, %v", m, err)
		}
	case 2:
		time.Sleep(2 * nap)
		if _, err := r.Send(0, []byte{2}); err != nil {
			return err
		}
	}
	return r.Close()
})

func TestSleepyRecv(t *testing.T) { each(t, "sleepy-recv", 3) }

// A Ring's calls read the PE's memory in place: after Finalize they fail
// with ErrFinalized instead of touching it, and Finalize waits for the
// calls under way (Run unmaps the segments at its end, so a call that
// read them afterwards would fault the test binary).
func TestRingAfterFinalize(t *testing.T) {
	rings := make([]*Ring, 2)
	polled := make(chan error, 2)
	err := shmem.Run(2, func(pe *shmem.PE) error {
		me := pe.MyPE()
		r, err := New(pe, []Lane{{From: 0, To: 1, Depth: 2, Capacity: 8}, {From: 1, To: 0, Depth: 2, Capacity: 8}}, Safe)
		if err != nil {
			return err
		}
		rings[me] = r
		if _, err := r.Send(1-me, []byte{byte(me)}); err != nil {
			return err
		}
		// A goroutine polls until the PE finalizes under it.
		go func() {
			for {
				if _, err := r.Poll(); err != nil {
					polled <- err
					return
				}
				runtime.Gosched()
			}
		}()
		if err := pe.BarrierAll(); err != nil {
			return err
		}
		return pe.Finalize()
	}, shmem.WithHeapSize(4<<20))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-polled; !errors.Is(err, shmem.ErrFinalized) {
			t.Fatalf("Poll during Finalize: %v, want ErrFinalized", err)
		}
	}
	// The segments are unmapped now.
	for me, r := range rings {
		if _, err := r.Poll(); !errors.Is(err, shmem.ErrFinalized) {
			t.Errorf("PE %d: Poll after Run: %v, want ErrFinalized", me, err)
		}
		if _, err := r.Send(1-me, []byte{1}); !errors.Is(err, shmem.ErrFinalized) {
			t.Errorf("PE %d: Send after Run: %v, want ErrFinalized", me, err)
		}
		if _, err := r.Recv(); !errors.Is(err, shmem.ErrFinalized) {
			t.Errorf("PE %d: Recv after Run: %v, want ErrFinalized", me, err)
		}
	}
}

// TestCorkNext: which messages a corked lane corks (sendLane.publish):
// one that follows the previous message with no receive's wait between
// them and is at most corkMax bytes; never the first, one sent after a
// wait, a longer one, or one on a lane that does not cork.
func TestCorkNext(t *testing.T) {
	var waits atomic.Uint64
	l := &sendLane{cork: true, waits: &waits, lastWaits: ^uint64(0)}
	steps := []struct {
		n      int
		wait   bool // a receive waits before the message
		corked bool
	}{
		{8, false, false},           // the first message
		{8, false, true},            // a run of Sends
		{corkMax, false, true},      // up to corkMax
		{corkMax + 1, false, false}, // a longer one is written at once
		{8, false, true},            // and does not end the run
		{8, true, false},            // after a wait: the reply of a ping-pong
		{8, false, true},
		{8, true, false},
	}
	for i, s := range steps {
		if s.wait {
			waits.Add(1)
		}
		if got := l.corkNext(s.n); got != s.corked {
			t.Errorf("step %d (%d bytes, wait %v): corked %v, want %v", i, s.n, s.wait, got, s.corked)
		}
	}
	off := &sendLane{waits: &waits}
	for i := range 3 {
		if off.corkNext(8) {
			t.Errorf("message %d on a lane that does not cork was corked", i)
		}
	}
}

// TestFewerBulkAreas: a Safe ring made with fewer bulk areas than slots
// (a Comm's) lets inline messages use every slot, while a bulk message
// waits until the area's previous user, bulks messages back, is
// acknowledged, even with slots free; no payload the receiver holds
// unacknowledged is overwritten. Raw mode refuses such a ring.
func TestFewerBulkAreas(t *testing.T) {
	const depth, bulks, inline = 8, 3, 16
	lanes := []Lane{{From: 0, To: 1, Depth: depth, Capacity: 200}}
	isBulk := map[uint64]bool{1: true, 2: true, 3: true, 11: true}
	data := func(seq uint64, bulk bool) []byte {
		if bulk {
			return bytes.Repeat([]byte{byte(seq)}, 150)
		}
		return []byte{byte(seq), 's'}
	}
	payload := func(seq uint64) []byte { return data(seq, isBulk[seq]) }
	err := shmem.Run(2, func(pe *shmem.PE) error {
		if _, err := newRingBell(pe, lanes, Raw, inline, bellShared, 0, bulks); !errors.Is(err, shmem.ErrInvalid) {
			return fmt.Errorf("Raw ring with %d bulk areas: %v, want ErrInvalid", bulks, err)
		}
		r, err := newRingBell(pe, lanes, Safe, inline, bellShared, 0, bulks)
		if err != nil {
			return err
		}
		me := pe.MyPE()
		// send tries message seq, bulk if asked, without waiting; the
		// lane must take it when want is set and refuse it otherwise.
		send := func(seq uint64, bulk, want bool) error {
			got, sent, err := r.outTo[1].sendv(r, nil, data(seq, bulk), false)
			if err != nil || sent != want || (sent && got != seq) {
				return fmt.Errorf("message %d (bulk %v): sent %v as %d (%v), want sent %v", seq, bulk, sent, got, err, want)
			}
			return nil
		}
		// PE 1 holds held, unacknowledged: each must read as sent.
		var held []Message
		intact := func() error {
			for _, m := range held {
				if !bytes.Equal(m.Data, payload(m.Seq)) {
					return fmt.Errorf("held message %d reads %v, want %v", m.Seq, m.Data[:2], payload(m.Seq)[:2])
				}
			}
			return nil
		}
		poll := func(want int) error {
			m, err := r.PollAppend(nil)
			if err != nil || len(m) != want {
				return fmt.Errorf("PE 1 polled %d messages (%v), want %d", len(m), err, want)
			}
			held = append(held, m...)
			return intact()
		}
		ack := func(seq uint64) error {
			for len(held) > 0 && held[0].Seq <= seq {
				held = held[1:]
			}
			return r.Ack(0, seq)
		}
		phases := []struct{ send, recv func() error }{
			{func() error { // no acks: bulk 1..3 take the three areas; bulk 4 waits for 1 with 5 slots free; inline 4..8 fill them
				for seq := uint64(1); seq <= 3; seq++ {
					if err := send(seq, true, true); err != nil {
						return err
					}
				}
				if err := send(4, true, false); err != nil {
					return err
				}
				for seq := uint64(4); seq <= depth; seq++ {
					if err := send(seq, false, true); err != nil {
						return err
					}
				}
				return send(depth+1, false, false)
			}, func() error {
				if err := poll(depth); err != nil {
					return err
				}
				return ack(2)
			}},
			{func() error { // 1, 2 acknowledged: bulk 9 waits for 6 with 2 slots free; inline 9, 10 take them
				if err := send(9, true, false); err != nil {
					return err
				}
				if err := send(9, false, true); err != nil {
					return err
				}
				if err := send(10, false, true); err != nil {
					return err
				}
				return send(11, false, false)
			}, func() error {
				if err := poll(2); err != nil {
					return err
				}
				return ack(8)
			}},
			{func() error { // up to 8 acknowledged: bulk 11 reuses area 1 (last bulk user 2)
				return send(11, true, true)
			}, func() error { return poll(1) }},
		}
		for _, ph := range phases {
			for i, f := range []func() error{ph.send, ph.recv} {
				if i == me {
					if err := f(); err != nil {
						return err
					}
				}
				if err := pe.BarrierAll(); err != nil {
					return err
				}
			}
		}
		return r.Close()
	}, shmem.WithHeapSize(4<<20))
	if err != nil {
		t.Fatal(err)
	}
}
