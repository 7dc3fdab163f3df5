package netmesh

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
)

// The read token's hand-over driven message by message, in the style of
// etcd-io/raft's tests: what the stream carries out for the token
// (lead.go: handedLocked, queueLocked, endLocked; the watchdog's expire;
// spin.go's linger timer) becomes a message in a network the test
// controls, delivered late, in any order, some twice, some dropped where
// the real code tolerates a drop. The receivers act as the real code
// does: they re-read the token under st.rmu and never trust the message
// itself. After every step the invariants of token.go hold, plus: at most
// one goroutine believes it holds the token, and it is the one the token
// names. At the end no more calls start, every message still owed is
// delivered, and every call must have returned (it got the token or its
// reply), with no token held or lingering and nothing left unread.
//
// The messages, and which drops the real code tolerates:
//   - signal: a caller's wake channel (call.signal), sent when the token
//     is granted to it, its reply was applied, or its deadline passed.
//     Never dropped: the owner sleeps on c.wake with no timeout, and a
//     granted follower that missed its grant would hold the token asleep
//     while nobody reads. The real channel is reliable (capacity 1, and
//     only the waker that cleared asleep sends). Copies are dropped or
//     delivered: the owner re-reads its call and the token.
//   - wake: the reader goroutine's set is woken (watcher.wake: a
//     deadline in the past) or signalled by an arrival on a loud socket.
//     Never dropped: a frame already in the read buffer cannot be
//     announced by the socket, and after the stream's end only the
//     reader goroutine reports it (failing the stream's calls). The real
//     wake is a netpoller deadline, which fires.
//   - kick: the holder is made to look up from its read (kickLocked).
//     One for a reader goroutine or a poller (a follower queued) may be
//     dropped: they never wait in a read (readIdle with c == nil does one
//     read or polls for a bounded time) and look at the queue at every
//     frame boundary. One for a caller (its deadline passed, the watchdog)
//     is never dropped: that caller may be parked in conn.Read, which only
//     the read deadline ends.
//   - expire: the linger timer runs (freeLingering). lingerArm Resets one
//     timer, so an arm superseded by a later one may never run, or run
//     late; the last arm always runs.
func TestTokenMessages(t *testing.T) {
	tokenRuns(t, 1, func(rng *rand.Rand, log *[]string, fail func(string, ...any)) {
		m := &msgModel{rng: rng, log: log, fail: fail}
		m.run()
	})
}

type msgKind uint8

const (
	msgSignal msgKind = iota // call.signal to caller to
	msgWake                  // the reader goroutine looks at the stream
	msgKick                  // the holder looks up from its read
	msgExpire                // the linger timer runs
)

type tokenMsg struct {
	kind     msgKind
	to       int  // the caller, for msgSignal
	arm      int  // which lingerArm, for msgExpire
	mayDrop  bool // the real code tolerates losing it (see TestTokenMessages)
	dup      bool // a copy: the original was delivered
	describe string
}

// msgCaller is a caller's goroutine as await runs it.
type msgCaller struct {
	c       call
	active  bool // in await
	done    bool // its reply was applied (or its call failed)
	expired bool // its deadline passed (the watchdog)
	granted bool // call.granted
	asleep  bool // in c.sleep: only a signal moves it
	leads   bool // it believes it holds the token and reads (serve)
}

type msgModel struct {
	rng      *rand.Rand
	tk       token
	cs       [tokenCallers]msgCaller
	net      []tokenMsg
	arms     int       // lingerArm calls
	parked   int       // waits parked (Mesh.Park)
	buffered bool      // a whole frame waits in the read buffer
	arrived  bool      // bytes wait unread in the socket
	reader   bool      // the reader goroutine believes it holds the token
	poller   bool      // a poller believes it holds the token
	gone     bool      // the reader goroutine reported the end and exited
	log      *[]string // the steps so far, for fail
	fail     func(string, ...any)
}

func (m *msgModel) step(s string, args ...any) { *m.log = append(*m.log, fmt.Sprintf(s, args...)) }

func (m *msgModel) idx(c *call) int {
	for i := range m.cs {
		if &m.cs[i].c == c {
			return i
		}
	}
	return -1
}

func (m *msgModel) pending(c *call) bool {
	mc := &m.cs[m.idx(c)]
	return mc.active && !mc.done && !mc.expired
}

func (m *msgModel) send(msg tokenMsg) { m.net = append(m.net, msg) }

func (m *msgModel) signal(i int, why string) {
	m.send(tokenMsg{kind: msgSignal, to: i, describe: fmt.Sprintf("signal caller %d (%s)", i, why)})
}

func (m *msgModel) wake(why string) {
	m.send(tokenMsg{kind: msgWake, describe: "wake the reader goroutine (" + why + ")"})
}

// handed carries out a release's outputs as handedLocked does; freeing
// the token also lowers the socket's mark, which announces bytes queued.
func (m *msgModel) handed(grant *call, wake bool) {
	if grant != nil {
		i := m.idx(grant)
		m.cs[i].granted = true
		m.signal(i, "granted")
	}
	if wake {
		m.wake("release asked")
	}
	if m.arrived && !m.tk.ended && !m.tk.wantQuiet() {
		m.wake("the lowered mark announces queued bytes")
	}
}

// frameBuffered is stream.frameBuffered for unlinger: asked only of a
// lingering token, whose buffer nobody is reading.
func (m *msgModel) frameBuffered() bool {
	if m.tk.kind != heldLinger {
		m.fail("the read buffer looked at while the token is %v", m.tk.kind)
	}
	return m.buffered
}

// took records that a goroutine took the token: it reads what waits.
func (m *msgModel) took() { m.buffered, m.arrived = false, false }

// releaseBy ends the holding of the goroutine that believes it holds the
// token, lingering if it may. A holder leaves a whole frame in the buffer
// unless it is a caller whose call is done (yield: it applies that frame
// first).
func (m *msgModel) releaseBy(who string, linger bool, leaves bool) {
	if leaves && m.rng.IntN(3) == 0 {
		m.buffered = true
	}
	if linger {
		grant, wake, lingers := m.tk.linger(m.pending, m.buffered, false, m.parked > 0)
		m.step("%s lingers (frame buffered %v, %d parked): grant %d, wake %v, lingers %v", who, m.buffered, m.parked, m.idx(grant), wake, lingers)
		m.handed(grant, wake)
		if lingers {
			m.arms++
			m.send(tokenMsg{kind: msgExpire, arm: m.arms, describe: "linger timer run " + strconv.Itoa(m.arms)})
		}
		return
	}
	grant, wake := m.tk.release(m.pending, m.buffered, false)
	m.step("%s releases (frame buffered %v): grant %d, wake %v", who, m.buffered, m.idx(grant), wake)
	m.handed(grant, wake)
}

// await runs caller i's await loop (lead.go) until it sleeps, leads or
// returns.
func (m *msgModel) await(i int) {
	mc := &m.cs[i]
	c := &mc.c
	for n := 0; ; n++ {
		if n > 8 {
			m.fail("caller %d loops in await without sleeping (granted %v, queued %v, kind %v, ended %v)", i, mc.granted, c.queued, m.tk.kind, m.tk.ended)
		}
		switch awaitStep(m.tk.holder == c, mc.done, mc.expired, m.tk.ended, m.tk.free()) {
		case awaitRelease:
			m.releaseBy("caller "+strconv.Itoa(i), true, false)
			continue
		case awaitLead:
			mc.granted, mc.leads = false, true
			m.took()
			m.step("caller %d leads", i)
			return
		case awaitDone, awaitExpired:
			m.tk.unqueue(c)
			mc.active = false
			m.step("caller %d returns (done %v, expired %v)", i, mc.done, mc.expired)
			return
		case awaitTake:
			m.tk.take(heldCaller, c)
			m.step("caller %d takes the free token", i)
		case awaitFollow:
			// lead.go clears a granted flag left from a token that was
			// granted and then lost to the stream's end; without that
			// the caller loops here (the check above).
			mc.granted = false
			if !c.queued {
				kind := m.tk.kind
				if m.tk.queue(c) {
					m.send(tokenMsg{kind: msgKick, mayDrop: true, describe: "kick " + kind.String() + " (caller " + strconv.Itoa(i) + " queued)"})
				}
				m.step("caller %d queues behind %v", i, kind)
			}
			if mc.done || mc.granted || mc.expired { // c.sleep returns at once
				continue
			}
			mc.asleep = true
			return
		}
	}
}

// droppable reports whether the real code tolerates losing msg: a copy,
// a kick the holder does not need, or a linger timer run that a later
// arm superseded.
func (m *msgModel) droppable(msg tokenMsg) bool {
	return msg.mayDrop || msg.dup || (msg.kind == msgExpire && msg.arm < m.arms)
}

// deliver delivers message k of the network, or drops it.
func (m *msgModel) deliver(k int, drop, dup bool) {
	msg := m.net[k]
	m.net = append(m.net[:k], m.net[k+1:]...)
	if drop {
		if !m.droppable(msg) {
			m.fail("the test dropped a message the real code needs: %s", msg.describe)
		}
		m.step("drop: %s", msg.describe)
		return
	}
	if dup {
		c := msg
		c.dup = true
		m.net = append(m.net, c)
	}
	m.step("deliver: %s", msg.describe)
	switch msg.kind {
	case msgSignal:
		if mc := &m.cs[msg.to]; mc.asleep {
			mc.asleep = false
			m.await(msg.to)
		}
	case msgWake: // onWatch, then watchLoop's look at the end
		switch {
		case m.gone:
		case m.tk.ended:
			// readLoop reports the end: streamEnded fails the stream's
			// calls, and kickAll kicks a caller still reading.
			m.gone = true
			m.step("the reader goroutine reports the end: calls fail")
			for i := range m.cs {
				if mc := &m.cs[i]; mc.active && !mc.done {
					mc.done = true
					m.signal(i, "failed")
				}
			}
			for i := range m.cs {
				if m.cs[i].leads {
					m.holderLooks(i)
				}
			}
		case m.tk.take(heldReader, nil):
			m.reader = true
			m.took()
			m.step("the reader goroutine takes the token")
		}
	case msgKick: // whoever holds the token now looks up
		switch {
		case m.reader || m.poller:
			if m.tk.queued > 0 {
				m.releaseHolder()
			}
		default:
			for i := range m.cs {
				if m.cs[i].leads {
					m.holderLooks(i)
				}
			}
		}
	case msgExpire: // freeLingering
		grant, wake, freed := m.tk.unlinger(m.pending, m.frameBuffered, false)
		m.step("the linger timer frees %v: grant %d, wake %v", freed, m.idx(grant), wake)
		m.handed(grant, wake)
	}
}

// holderLooks is a leading caller i looking up at a frame boundary
// (yield): it hands the token on when its call is done or expired, or
// the stream ended.
func (m *msgModel) holderLooks(i int) {
	mc := &m.cs[i]
	if mc.expired || mc.done || m.tk.ended {
		mc.leads = false
		m.await(i)
	}
}

// releaseHolder makes the reader goroutine or poller that holds the
// token free it (onWatch's releaseLocked; a poller's unpollLocked or,
// its wait satisfied, lingerLocked).
func (m *msgModel) releaseHolder() {
	switch {
	case m.reader:
		m.reader = false
		m.releaseBy("the reader goroutine", false, true)
	case m.poller:
		m.poller = false
		if m.rng.IntN(2) == 0 {
			m.releaseBy("the poller", true, true)
		} else {
			m.releaseBy("the poller", false, true)
		}
	}
}

// leading reports whether a caller believes it holds the token.
func (m *msgModel) leading() bool {
	for i := range m.cs {
		if m.cs[i].leads {
			return true
		}
	}
	return false
}

// end ends the stream: its holder's read failed, or (with nobody
// holding) the reader goroutine's did.
func (m *msgModel) end() {
	who := "its holder's read"
	if !m.reader && !m.poller && !m.leading() {
		who = "the reader goroutine's set" // readLoop's endLocked: with a granted follower asleep too
	}
	m.tk.end()
	m.reader, m.poller = false, false
	m.step("the stream ends (%s failed)", who)
	m.wake("endLocked")
}

func (m *msgModel) run() {
	for n := 0; n < 80; n++ {
		switch r := m.rng.IntN(12); {
		case r < 2: // a caller starts a call
			i := m.rng.IntN(tokenCallers)
			if mc := &m.cs[i]; !mc.active && !m.gone { // after the end is reported, requests fail before they wait
				mc.active, mc.done, mc.expired, mc.granted, mc.asleep, mc.leads = true, false, false, false, false, false
				m.step("caller %d starts a call", i)
				m.await(i)
			}
		case r < 4: // the holder applies some caller's reply
			i := m.rng.IntN(tokenCallers)
			if mc := &m.cs[i]; m.tk.held() && mc.active && !mc.done {
				mc.done = true
				m.step("the holder applies caller %d's reply", i)
				if !mc.leads {
					m.signal(i, "reply applied")
				}
			}
		case r == 4: // the watchdog: a deadline passes
			i := m.rng.IntN(tokenCallers)
			mc := &m.cs[i]
			switch {
			case !mc.active || mc.done || mc.expired:
			case mc.c.queued:
				m.tk.unqueue(&mc.c)
				mc.expired = true
				m.step("caller %d expires while queued", i)
				m.signal(i, "expired")
			case m.tk.holder == &mc.c:
				mc.expired = true
				m.step("caller %d expires holding the token", i)
				m.send(tokenMsg{kind: msgKick, describe: "kick caller " + strconv.Itoa(i) + " (expired)"})
			}
		case r < 8 && len(m.net) > 0: // the network delivers, copies or drops
			k := m.rng.IntN(len(m.net))
			msg := m.net[k]
			drop := m.droppable(msg) && m.rng.IntN(3) == 0
			m.deliver(k, drop, m.rng.IntN(4) == 0)
		case r == 8: // a leading caller looks up
			for i := range m.cs {
				if m.cs[i].leads {
					if m.rng.IntN(2) == 0 {
						m.cs[i].done = true // its reply arrived
						m.step("caller %d reads its reply", i)
					}
					m.holderLooks(i)
					break
				}
			}
		case r == 9: // the reader goroutine or a poller
			switch {
			case m.reader || m.poller:
				m.releaseHolder()
			case m.tk.take(heldPoller, nil):
				m.poller = true
				m.took()
				m.step("a poller takes the token")
			}
		case r == 10: // bytes arrive; a wait parks or unparks
			switch m.rng.IntN(3) {
			case 0:
				m.arrived = true
				m.step("bytes arrive")
				if !m.tk.ended && !m.tk.wantQuiet() {
					m.wake("the socket is readable")
				} else if m.tk.held() {
					m.took() // the holder reads them
				}
			case 1:
				m.parked++
				m.step("a wait parks (%d parked)", m.parked)
				grant, wake, freed := m.tk.unlinger(m.pending, m.frameBuffered, false)
				if freed {
					m.step("Park frees the lingering token: grant %d, wake %v", m.idx(grant), wake)
				}
				m.handed(grant, wake)
			default:
				if m.parked > 0 {
					m.parked--
					m.step("a parked wait ends (%d parked)", m.parked)
				}
			}
		case r == 11 && m.rng.IntN(6) == 0 && !m.tk.ended:
			m.end()
		}
		m.check()
	}
	m.drain()
}

// drain starts nothing new and lets every goroutine finish: messages
// still owed are delivered, copies and droppable ones may go, holders
// read their replies and hand on. An expired holder's reply may never
// come (that is why it expired): it leaves only when kicked.
func (m *msgModel) drain() {
	m.step("drain")
	m.parked = 0
	for n := 0; ; n++ {
		if n > 1000 {
			m.fail("no end to the drain")
		}
		lead := -1
		for i := range m.cs {
			if m.cs[i].leads {
				lead = i
			}
		}
		switch {
		case len(m.net) > 0:
			k := m.rng.IntN(len(m.net))
			msg := m.net[k]
			drop := m.droppable(msg) && m.rng.IntN(2) == 0
			m.deliver(k, drop, false)
		case lead >= 0 && !m.cs[lead].expired:
			m.cs[lead].done = true
			m.step("caller %d reads its reply", lead)
			m.holderLooks(lead)
		case m.reader || m.poller:
			m.releaseHolder()
		default:
			m.check()
			for i := range m.cs {
				if mc := &m.cs[i]; mc.active {
					m.fail("caller %d never returns (done %v, expired %v, asleep %v, queued %v): token %v", i, mc.done, mc.expired, mc.asleep, mc.c.queued, m.tk.kind)
				}
			}
			if !m.tk.ended && (m.tk.kind != heldNone || m.buffered || m.arrived) {
				m.fail("the network is quiet with the token %v, a frame buffered %v, bytes unread %v", m.tk.kind, m.buffered, m.arrived)
			}
			return
		}
		m.check()
	}
}

// check asserts token.go's invariants and that the goroutines agree on
// who holds the token.
func (m *msgModel) check() {
	tk := &m.tk
	if err := tokenInvariants(tk, m.pending); err != nil {
		m.fail("%v (holder caller %d)", err, m.idx(tk.holder))
	}
	var holders []string
	for i := range m.cs {
		if m.cs[i].leads {
			holders = append(holders, "caller "+strconv.Itoa(i))
			if !tk.ended && tk.holder != &m.cs[i].c {
				m.fail("caller %d reads while the token says %v (caller %d)", i, tk.kind, m.idx(tk.holder))
			}
		}
	}
	if m.reader {
		holders = append(holders, "the reader goroutine")
	}
	if m.poller {
		holders = append(holders, "a poller")
	}
	if len(holders) > 1 {
		m.fail("two holders: %v", holders)
	}
	if (m.reader && tk.kind != heldReader) || (m.poller && tk.kind != heldPoller) {
		m.fail("the reader goroutine (%v) or a poller (%v) reads while the token says %v", m.reader, m.poller, tk.kind)
	}
	if tk.kind == heldLinger {
		last := false
		for _, msg := range m.net {
			last = last || (msg.kind == msgExpire && msg.arm == m.arms)
		}
		if !last {
			m.fail("a token lingers with no linger timer run to come")
		}
		if m.parked > 0 {
			m.fail("a token lingers while %d waits are parked", m.parked)
		}
	}
}
