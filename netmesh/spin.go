package netmesh

import (
	"math"
	"runtime"
	"sync/atomic"
	"time"
)

// When waiting goroutines poll their sockets (the spin policy).
//
// On loopback most of a round trip that sleeps in the Go netpoller is
// the wake-up of the sleeping goroutine and its thread; a round trip
// between two goroutines that poll their sockets with non-blocking reads
// costs about the kernel's own round trip (docs/wire.md, "Engine"). A
// poll pays only while the peer's poller runs too, so every poll is
// bounded, and polling stops paying when more threads want to run than
// there are cores: then the OS deschedules pollers for whole time slices
// and round trips took up to 35 times as long as sleeping. So:
//
//   - SpinAuto spins only when the machine is not oversubscribed
//     (Mesh.SetOversubscribed, which shmem calls when the PEs on this
//     machine outnumber its CPUs). On an oversubscribed machine a
//     Mesh.Poll and a blocking caller waiting for its reply poll, but
//     give their processor away after every look (sched_yield, as a raw
//     system call: yieldCPU; runtime.Gosched when the job's PEs are
//     goroutines of one process), so that the PE that shares it runs: a
//     Poll for at most yieldSpin since the last bytes, a caller for
//     yieldSpin per wait; running out of that budget is a miss.
//     Followers and reader goroutines do not poll there (spinPolicy says
//     waitYield, not waitSpin). Four PE processes on two CPUs: a 4-PE
//     barrier took 87 to 101 µs yielding to the OS against 135 to 177 µs
//     parked, and 130 to 193 µs when each look also called
//     runtime.Gosched (which wakes a second thread);
//   - otherwise a caller polls for at most busySpin per wait, a follower
//     for followSpin, a Mesh.Poll for the budget its caller gives, and
//     the reader of a payload of up to payloadSpinMax bytes for at most
//     payloadSpin since its last bytes (reader.go);
//   - a poll that does not pay (a caller's budget ran out before its
//     reply came, or a poller finds that it was off its processor for
//     most of its last spinCheck polls) is a miss; from missRun misses in
//     a row on, polling pauses in the whole process, for spinPause
//     doubling up to spinMax, until a caller's poll gets its reply again.
//
// Bounds much shorter than these made pollers in one process take turns
// burning their budgets, and a pause after a single miss kept polling off
// on a shared machine, where about one round trip in 200 takes three
// times as long as the others.

// SpinMode is Config.Spin.
type SpinMode uint8

const (
	SpinAuto SpinMode = iota // poll while it pays, never when oversubscribed
	SpinOn                   // poll even when oversubscribed (GOSHMEM_BUSYPOLL=1)
	SpinOff                  // never poll (GOSHMEM_BUSYPOLL=0)
)

const (
	busySpin   = time.Millisecond       // a caller's poll, per wait
	followSpin = 200 * time.Microsecond // a follower's poll, per wait
	busyIdle   = time.Millisecond       // with SpinOn, the reader goroutine's poll after the last bytes
	yieldSpin  = time.Millisecond       // a Poll or caller that yields after each look (oversubscribed)
	spinPause  = time.Millisecond       // the first pause; it doubles while misses go on
	spinMax    = 64 * time.Millisecond  // the longest pause
	missRun    = 4                      // misses in a row that pause polling
)

// spinCheck: a poller checks the clock and the link once every spinCheck
// polls. If they took longer than spinSlow (a poll that finds nothing
// takes about half a microsecond), the poller was descheduled: a miss.
const (
	spinCheck = 32
	spinSlow  = int64(spinCheck * 4 * time.Microsecond)
)

// spinYield: a poller yields its processor (runtime.Gosched) once every
// spinYield polls. While a goroutine polls, no thread of the process may
// be sleeping in the netpoller, and then nobody collects network events
// for the process's other goroutines (the peer PE's reader, in one
// process) until the poller yields: a Gosched with a processor idle wakes
// a thread (wakep), which finds them. 256 made the first poll after a
// pause miss nearly every time; 4096 stalled operations for a
// millisecond. Yielding the CPU to other processes as well (sched_yield)
// was tried and measured: it cost a bound PE about 30 µs per round trip
// (8-byte get 41-47 µs against 8-13 µs on an otherwise idle machine),
// since it hands the CPU to the process's own runtime threads.
const spinYield = 32

// Polling is paused for the whole process until spinOff (a mono() time):
// it pays or not according to the processors free on the machine, which
// every mesh of the process shares. spinMisses counts the misses in a
// row.
var (
	spinOff    atomic.Int64
	spinMisses atomic.Int32
)

// spinMissed records a poll that did not pay, at mono() time now.
func spinMissed(now int64) {
	n := spinMisses.Add(1)
	if n < missRun {
		return
	}
	pause := spinMax
	if n-missRun < 6 {
		pause = min(spinPause<<(n-missRun), spinMax)
	}
	spinOff.Store(now + int64(pause))
}

// spinPaid records a poll that got what it waited for.
func spinPaid() {
	if spinMisses.Load() != 0 {
		spinMisses.Store(0)
	}
}

// A caller's choice between polling for its reply and parking at once
// (the cost controller). The spin policy above says when polling may not
// pay (oversubscribed, descheduled pollers); what it cannot see is the
// machine shared with other jobs' threads. There a poller stays
// runnable, loses the kernel's preference for tasks that wake from
// sleep, and waits behind the other job for whole time slices, while a
// parked caller is woken by its reply and runs at once: unbound 8-byte
// gets took 65 to 590 µs polling against 23 to 53 µs parked with two CPU
// hogs beside the PEs. So the process measures what a small round trip
// costs each way and goes the cheaper one:
//
//   - a blocking caller whose reply is small (a GET of at most copyMax
//     bytes, or an atomic) and that read its own reply without queueing
//     behind another reader records, once its call completes, how long
//     it waited, in one of two moving averages: polled or parked;
//   - a caller polls while the polled average is at most costMargin
//     times the parked one (a peer busy elsewhere makes both ways wait,
//     and the way sampled less often is the noisier estimate: only a
//     clear difference turns the choice) (or either is unknown: no sample yet, or none for
//     costStale, as in a process that only puts and flushes); every exploreEvery-th
//     small caller takes the other way, so that the estimate of the way not
//     taken follows the machine (its samples weigh more: exploreWeight);
//   - followers, Mesh.Poll and the reader goroutine poll only while the
//     callers' preference is to poll.
//
// A sample counts for at most costClip times the average it joins (and
// the first for at most costCap), so that one stall (a GC pause, a page
// fault) moves the average by a third at most, while a machine that
// really got slower raises it by that much per call: past the other
// way's within a handful of calls. On an idle machine the
// exploring costs about one parked round trip per exploreEvery calls
// (0.2 µs a call at 50 µs parked).
const (
	exploreEvery  = 256
	costShift     = 3 // the preferred way's samples weigh 1/8
	exploreWeight = 1 // an exploring sample weighs 1/2
	costCap       = int64(4 * busySpin)
	costClip      = 4
	costStale     = int64(100 * time.Millisecond)
	costMargin    = 2
)

// costs is the process's cost controller: like the pause, it reflects
// the machine, which every mesh of the process shares.
var costs spinCosts

type spinCosts struct {
	polled, parked     atomic.Int64  // moving averages of a small call's wait, ns; 0: no sample yet
	polledAt, parkedAt atomic.Int64  // mono() time of each average's last sample
	calls              atomic.Uint32 // callers that chose
}

// preferPoll reports whether polling is the cheaper way at mono() time
// now, as far as is known: an average with no sample for costStale is
// not known any more. So a process that stops making small calls (one
// that only puts and flushes) goes back to the policy's default, polling,
// instead of keeping what a busier machine once measured.
func (s *spinCosts) preferPoll(now int64) bool {
	p, q := s.polled.Load(), s.parked.Load()
	if p == 0 || q == 0 || now-s.polledAt.Load() > costStale || now-s.parkedAt.Load() > costStale {
		return true
	}
	return p <= costMargin*q
}

// choose is a caller's choice at mono() time now: poll (true) or park,
// and whether the choice explores the way not preferred.
func (s *spinCosts) choose(now int64) (poll, explore bool) {
	pref := s.preferPoll(now)
	if s.calls.Add(1)%exploreEvery == 0 {
		return !pref, true
	}
	return pref, false
}

// record adds a sample of d ns for the way taken, at mono() time now.
func (s *spinCosts) record(poll, explore bool, d, now int64) {
	avg, at := &s.parked, &s.parkedAt
	if poll {
		avg, at = &s.polled, &s.polledAt
	}
	d = max(min(d, costCap), 1)
	shift := costShift
	if explore {
		shift = exploreWeight
	}
	old := avg.Load()
	if old == 0 || now-at.Load() > costStale {
		avg.Store(d) // a first sample, or one after the average went stale
	} else {
		d = min(d, costClip*old)
		avg.Store(old + (d-old)>>shift) // racing updates may drop a sample: it is an estimate
	}
	at.Store(now)
}

// How a waiter may wait for bytes, by the spin policy alone (waitWay):
// park in the netpoller, spin (poll, handing the processor to the
// process's own goroutines now and then), or poll while yielding the
// processor after every look (an oversubscribed machine).
type waitWay uint8

const (
	waitPark waitWay = iota
	waitSpin
	waitYield
)

// spinPolicy is the spin policy as a pure function: the way a waiter
// may wait under mode, on a machine that is oversubscribed or not, while
// polling is paused or not. The cost controller then chooses between the
// way it allows and parking (except under SpinOn, which always polls).
func spinPolicy(mode SpinMode, oversub, paused bool) waitWay {
	switch {
	case mode == SpinOff, paused:
		return waitPark
	case mode == SpinAuto && oversub:
		return waitYield
	}
	return waitSpin
}

// policy is spinPolicy for this mesh at mono() time now.
func (m *Mesh) policy(now int64) waitWay {
	return spinPolicy(m.cfg.Spin, m.oversub.Load(), now < spinOff.Load())
}

// spinOK reports whether the mesh's waits may spin (poll without giving
// their processor away) at mono() time now.
func (m *Mesh) spinOK(now int64) bool {
	return m.policy(now) == waitSpin && (m.cfg.Spin == SpinOn || costs.preferPoll(now))
}

// yieldOK reports whether a Poll may poll while yielding its processor
// after every look: SpinAuto on an oversubscribed machine, not paused,
// and polling not measured dearer than parking.
func (m *Mesh) yieldOK(now int64) bool {
	return m.policy(now) == waitYield && costs.preferPoll(now)
}

func (l *Link) spinOK(now int64) bool { return l.m.spinOK(now) }

// SetOversubscribed tells the mesh whether its machine runs more PEs (or
// other busy threads) than it has processors. Then a poller would take
// the processor its peer needs, and SpinAuto does not poll.
func (m *Mesh) SetOversubscribed(v bool) { m.oversub.Store(v) }

// pollMax is the most streams one Poll reads; with more, it polls the
// first pollMax free ones and leaves the rest to their reader goroutines.
const pollMax = 32

// Poll lets a goroutine that waits for its own segment to change (a
// wait-until, a barrier) read the mesh's sockets itself instead of
// sleeping while the streams' reader goroutines are woken for each
// frame: it takes the read token of every stream that is free, applies
// what arrives (calling Notify as every reader does), and returns true as
// soon as done reports true. It returns false when d passed since the
// last bytes arrived (so a PE that waits while its peers work on its
// memory goes on serving them at polling speed), when polling does not
// pay now (the spin policy: at once when it
// is off, oversubscribed or paused), or when the mesh has no streams. The
// caller then sleeps as it would have without Poll; done must be cheap
// and must not call a blocking Link method.
//
// A stream's token is handed on at once to a caller that queues for it
// (a Get or Flush of another goroutine), and a poller blocks in a read
// only for the rest of a frame it has begun (reader.go, stream.loud), so
// Poll delays nobody's reply. Goroutines that poll at the same
// time share the streams: each polls the free ones.
func (m *Mesh) Poll(d time.Duration, done func() bool) bool { return m.PollFrom(d, -1, done) }

// pollOthers: a PollFrom reads the streams of the links other than the
// one it waits on at most this often. It bounds how much later than by
// Poll a frame on them is applied (a peer's GET or atomic against a PE
// waiting in a barrier round is answered up to that much later), and a
// caller that queues for one of their tokens still has it at once.
const pollOthers = int64(20 * time.Microsecond)

// A poller whose done holds stops at the next frame boundary instead of
// reading the socket again (stream.serve's done): the frame that
// ends a barrier's wait is usually alone, and the read after it was a
// system call that found nothing.
//
// PollFrom is Poll for a wait that knows which PE's write ends it (a
// barrier round waits for one peer's flag): it reads the streams of the
// link to PE from at every look, and those of the other links every
// pollOthers, so that a look costs one read instead of one per link.
// On an oversubscribed machine each look is followed by a yield, and a
// 4-PE barrier on two CPUs read three sockets per look, two of them in
// vain. When PE from has no link here (a same-host peer: done sees its
// writes at every look), every stream is one of the others. With
// from < 0 every stream is read at every look.
func (m *Mesh) PollFrom(d time.Duration, from int, done func() bool) bool {
	m.Push()
	now := mono()
	yield := false // give the processor away after every look
	if !m.spinOK(now) {
		if !m.yieldOK(now) {
			return false // the caller parks now (Park frees what lingers)
		}
		yield, d = true, min(d, yieldSpin)
	}
	streams := m.pollList.Load()
	if streams == nil || len(*streams) == 0 {
		return false
	}
	var buf [pollMax]*stream
	held := takeFree(*streams, buf[:0])
	end := now + int64(d)
	last := now
	ok := false
	othersAt := int64(math.MinInt64) // when the other links' streams are read next
	if from >= 0 {
		othersAt = now + pollOthers
	}
	for i := 1; ; i++ {
		others := true // read every stream at this look
		if othersAt != math.MinInt64 {
			if t := mono(); t >= othersAt {
				othersAt = t + pollOthers
			} else {
				others = false
			}
		}
		for j := 0; j < len(held); {
			st := held[j]
			if !others && st.l.rank != from && st.nwait.Load() == 0 {
				j++ // not its turn; a caller that queues for it has it at once
				continue
			}
			seen := st.recvs.Load()
			err := st.serve(nil, done) // applies what is buffered and what one read brings
			if st.recvs.Load() != seen {
				// Traffic: a PE that waits while others use its memory
				// keeps serving them at polling speed. Time spent applying
				// frames is not time the OS took away (see below).
				last = mono()
				end = last + int64(d)
			}
			if err == errYield && st.nwait.Load() == 0 {
				j++
				continue
			}
			// A caller queued for the token, or the stream ended.
			st.rmu.Lock()
			st.unpollLocked(err)
			st.rmu.Unlock()
			held[j] = held[len(held)-1]
			held = held[:len(held)-1]
		}
		if done() {
			ok = true
			spinPaid() // what the wait polled for came: polling pays
			break
		}
		if yield {
			// Let the PE that shares this processor run. The Go
			// scheduler's other goroutines wait meanwhile, as they do
			// for any system call, and the time is not counted as lost.
			if m.cfg.InProcess {
				runtime.Gosched()
			} else {
				yieldCPU()
			}
			last = mono()
		}
		if i%spinCheck == 0 || yield {
			now := mono()
			if now-last > spinSlow {
				spinMissed(now) // descheduled: polling makes it worse
				break
			}
			if now > end {
				if yield {
					spinMissed(now) // the processor was given away for nothing
				}
				break
			}
			if now < spinOff.Load() {
				break
			}
			last = now
			if len(held) < len(*streams) && i%spinCheck == 0 {
				held = takeFree(*streams, held) // tokens handed to callers come back free
			}
		}
		if !yield && i%spinYield == 0 {
			runtime.Gosched()
			last = mono() // time given away is not time lost
		}
	}
	lingers := false
	for _, st := range held {
		st.rmu.Lock()
		if ok {
			lingers = st.lingerLocked() || lingers
		} else {
			st.unpollLocked(errYield)
		}
		st.rmu.Unlock()
	}
	if lingers {
		m.lingerArm()
	}
	return ok
}

// Park tells the mesh that a goroutine waiting for its segment to change
// (a wait that Poll did not end) is about to sleep until a Notify wakes
// it; Unpark, that it stopped. Between them no read token lingers: Park
// frees the lingering ones (lowering their marks, which announces
// queued bytes to the reader goroutines, watch.go), and a caller or
// poller done with a token meanwhile frees it instead of leaving it
// lingering (lingerLocked). So every frame is read by a holder or by the
// stream's reader goroutine as soon as it arrives, and its Notify wakes
// the parked wait with no timer on the path. The waiter must check its
// condition after Park returns.
func (m *Mesh) Park() {
	m.parked.Add(1) // before freeLingering takes the streams' locks: see lingerLocked
	m.freeLingering()
}

// Unpark ends what Park began.
func (m *Mesh) Unpark() { m.parked.Add(-1) }

// A Poll whose wait was satisfied leaves the tokens it held lingering
// (token.linger): still quiet, free for anyone, so that the next Poll
// (the next round of a barrier, the next wait of a loop, microseconds
// later) takes them without the two setsockopt calls that making a
// socket quiet and loud again costs (about 0.7 µs each here, and a
// 2-PE barrier is about 10). Arrivals on a lingering socket signal
// nobody until someone reads it, so the mesh frees its lingering tokens
// (lowering their marks, which announces queued bytes to the reader
// goroutine, watch.go) lingerFor after the last Poll that left one: a
// frame sent to a PE that stopped polling waits that long at most, plus
// the Go timer's lateness (when every thread of the process sleeps, the
// netpoller rounds the timer up to a millisecond). Callers and the
// reader goroutine take a lingering token as a free one.
//
// No wait of this PE depends on the timer: a wait that parks frees the
// lingering tokens first, and none lingers while it is parked (Park).
// What the timer still serves is the PE that stopped reading without
// waiting (it computes, or blocks on something else): a peer's GET,
// atomic or FLUSH on a lingering socket is answered when the timer frees
// it. That is part of the protocol (the cost of lingering, bounded by
// lingerFor), not a rescue of a lost wake, and it stays under
// GOSHMEM_TEST_NONAP. What the hook takes away is the rescue: while a
// wait is parked the timer frees nothing (lingerExpired), so a token
// left lingering then, against the rule above, hangs the wait.
const lingerFor = 50 * time.Microsecond

// lingerArm (re)sets the linger timer to run lingerFor from now: a Poll
// that left a token lingering calls it after the linger, so the timer
// runs after every linger (Reset of a func timer either reschedules its
// run or schedules another), and while Polls follow each other it never
// runs. Resetting costs about 50 ns.
func (m *Mesh) lingerArm() { m.lingerT.Reset(lingerFor) }

// lingerExpired is the linger timer's function: it frees the lingering
// tokens. Under GOSHMEM_TEST_NONAP (testhook.NoNap) it frees nothing
// while a wait of the PE is parked: no token may linger then (Park), and
// the timer must not hide one that does, so the wait it keeps from its
// write fails at its timeout instead of passing 50 µs late.
func (m *Mesh) lingerExpired() {
	if m.noNap && m.parked.Load() > 0 {
		return
	}
	m.freeLingering()
}

// freeLingering frees every lingering token, under its stream's lock
// (one that a caller or Poll lingers again meanwhile is freed too, or at
// the timer's next run). The linger timer (lingerExpired) and Park
// call it.
func (m *Mesh) freeLingering() {
	streams := m.pollList.Load()
	if streams == nil {
		return
	}
	for _, st := range *streams {
		st.rmu.Lock()
		st.unlingerLocked()
		st.rmu.Unlock()
	}
}

// takeFree takes the read token of every stream in streams that is free,
// for a Poll, and returns held with them appended (at most pollMax).
func takeFree(streams, held []*stream) []*stream {
	for _, st := range streams {
		if len(held) == pollMax {
			break
		}
		st.rmu.Lock()
		if st.takeLocked(heldPoller, nil) { // quiet: its arrivals are ours, waking nobody
			held = append(held, st)
		}
		st.rmu.Unlock()
	}
	return held
}

// Push writes the small blocking puts that wait in the mesh's send
// queues for company (writer.go, corkDelay): a PE about to wait for its
// peers calls it, since what it waits for may be their answer to those
// puts. Cheap when nothing waits: one atomic load per stream.
func (m *Mesh) Push() {
	streams := m.pollList.Load()
	if streams == nil {
		return
	}
	for _, st := range *streams {
		st.q.push()
	}
}

// unpollLocked gives up a token that a Poll held: err is what its last
// serve returned (errYield: the stream is fine). st.rmu is held.
func (st *stream) unpollLocked(err error) {
	if err != errYield {
		st.endLocked(err)
		return
	}
	st.releaseLocked()
}

// updatePollList rebuilds the list of running streams that Poll reads:
// every link's own streams first, then the channel streams, so that
// past pollMax streams a Poll still reads the streams that carry the
// runtime's own signals (barriers' flags travel on stream 0). m.mu is
// held.
func (m *Mesh) updatePollList() {
	var list []*stream
	for _, chans := range []bool{false, true} {
		for _, l := range m.links {
			if !l.ready || l.Err() != nil {
				continue
			}
			for _, st := range l.allLocked() {
				if st.started.Load() && (st.chanSlot >= 0) == chans {
					list = append(list, st)
				}
			}
		}
	}
	m.pollList.Store(&list)
}
