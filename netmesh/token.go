package netmesh

// A stream's read token as a pure state machine (lead.go says who reads
// a stream and why): no I/O, no locks, no goroutines. The stream calls
// its methods under st.rmu and carries out what they report: it makes
// the socket quiet or not to match wantQuiet, signals a follower it was
// granted the token, wakes the reader goroutine, kicks a holder, arms the
// linger timer. TestTokenRandom drives it with
// random interleavings of takes, queues, completions, expiries,
// releases and ends, checking the invariants below after every step;
// TestTokenMessages makes those outputs messages that arrive late, out of
// order, twice, or (where the real code tolerates it) never, and checks
// that every call still returns and nothing is left unread.
//
// Invariants:
//   - at most one holder: kind says which, and holder is the call exactly
//     when kind is heldCaller;
//   - a call is queued at most once and never while it holds the token;
//   - arrivals should signal the reader goroutine's watch exactly while
//     the token is free (and not lingering) or held by the reader
//     goroutine and the stream has not ended: then nobody else reads
//     them. The socket stays in the watch for the stream's life and is
//     quiet (wantQuiet: its receive low-water mark raised, so that an
//     arrival signals no epoll set at all, watch.go) exactly while a
//     caller or a poller holds the token or it lingers. A holder reads
//     with non-blocking reads while quiet; one that parks in conn.Read,
//     which needs the socket's readiness, lowers the mark first
//     (stream.loud);
//   - a lingering token (heldLinger: a caller or poller done with it
//     left it, still quiet, for the next one) is free to take for
//     anyone, and the stream frees it for good (release) within a
//     bounded time (the mesh's linger timer, spin.go): arrivals that
//     nobody reads meanwhile wait at most that long;
//   - no token lingers while a wait of the PE is parked (Mesh.Park):
//     parking frees the lingering ones and linger does not linger
//     meanwhile, so a remote write the parked wait needs is read by the
//     reader goroutine at once, never by the timer;
//   - release never frees the token while a follower whose call is still
//     pending is queued: it grants the token to the first such follower;
//   - release that frees the token with a whole frame in the read buffer
//     asks to wake the reader goroutine, since the socket cannot announce
//     bytes that were already read;
//   - after end nobody takes the token again.

// holderKind says who holds the read token.
type holderKind uint8

const (
	heldNone   holderKind = iota // free
	heldCaller                   // a caller blocked for its reply (token.holder)
	heldReader                   // the stream's reader goroutine
	heldPoller                   // a goroutine in Mesh.Poll
	heldLinger                   // nobody: free, but its socket kept quiet for the next caller or poller
)

type token struct {
	kind         holderKind
	holder       *call // the caller holding the token (kind == heldCaller)
	whead, wtail *call // followers, in arrival order
	queued       int   // followers queued
	ended        bool  // nobody reads the stream again
}

// free reports whether the token may be taken.
func (t *token) free() bool { return (t.kind == heldNone || t.kind == heldLinger) && !t.ended }

// held reports whether someone holds the token.
func (t *token) held() bool { return t.kind != heldNone && t.kind != heldLinger }

// wantQuiet reports whether the socket should be quiet: arrivals signal
// nobody, since the poller that holds the token reads them (watch.go).
func (t *token) wantQuiet() bool {
	return !t.ended && t.kind != heldNone && t.kind != heldReader
}

// take gives the free token (lingering or not) to a holder of kind k
// (and call c for heldCaller). It reports whether the token was free.
func (t *token) take(k holderKind, c *call) bool {
	if !t.free() {
		return false
	}
	t.kind = k
	if k == heldCaller {
		t.holder = c
	}
	return true
}

// queue appends c to the followers. It reports whether the holder must be
// kicked: a reader goroutine or a poller hands the token over only when
// it looks up, and it looks up when kicked.
func (t *token) queue(c *call) (kick bool) {
	if c.queued || t.holder == c {
		panic("netmesh: token.queue of a call that is queued or holds the token")
	}
	c.queued, c.prev, c.next = true, t.wtail, nil
	if t.wtail != nil {
		t.wtail.next = c
	} else {
		t.whead = c
	}
	t.wtail = c
	t.queued++
	return t.kind == heldReader || t.kind == heldPoller
}

// unqueue removes c from the followers if it is queued.
func (t *token) unqueue(c *call) {
	if !c.queued {
		return
	}
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		t.whead = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		t.wtail = c.prev
	}
	c.queued, c.prev, c.next = false, nil, nil
	t.queued--
}

// release ends the current holding. The token goes to the first follower
// whose call is still pending (returned: the stream signals it), passing
// over followers that need no token any more; else it is freed, and wake
// reports that the reader goroutine must look at the stream: a whole
// frame is buffered (frameBuffered) or the link is down (the reader
// goroutine finds the stream's end).
func (t *token) release(pending func(*call) bool, frameBuffered, linkDown bool) (grant *call, wake bool) {
	t.kind, t.holder = heldNone, nil
	if t.ended {
		return nil, false
	}
	for w := t.whead; w != nil; w = t.whead {
		t.unqueue(w)
		if pending(w) {
			t.kind, t.holder = heldCaller, w
			return w, false
		}
	}
	return nil, frameBuffered || linkDown
}

// linger ends a caller's or poller's holding as release does, except
// that a token it would free is left lingering (still quiet, for the next
// caller or poller to take without a system call) unless a whole frame
// is buffered, the link is down, or a wait of the PE is parked (parked:
// nobody may come back for the token soon, and what arrives may be what
// the wait needs): then it is freed, with the wake release asks for. The
// stream must free a lingering token (release) within a bounded time,
// and at once when a wait parks (Mesh.Park). It reports what release
// reports, and whether the token lingers.
func (t *token) linger(pending func(*call) bool, frameBuffered, linkDown, parked bool) (grant *call, wake, lingers bool) {
	grant, wake = t.release(pending, frameBuffered, linkDown)
	if grant != nil || wake || t.ended || parked {
		return grant, wake, false
	}
	t.kind = heldLinger
	return nil, false, true
}

// unlinger frees a lingering token as release does (the linger timer
// and Mesh.Park: freeLingering) and reports whether it lingered. A token
// in any other state is left alone. The timer is one per mesh and Reset
// at every linger, so a run may come late, twice, or after the token was
// taken and left lingering again; none of that needs a generation number:
// a token taken since it lingered is held (or was freed), which unlinger
// leaves alone, and one that lingers again is free for anyone, so
// freeing it early only costs the next taker its mark. frameBuffered is
// asked only of a lingering token: while someone holds it, the read
// buffer is the holder's, read and written without st.rmu.
func (t *token) unlinger(pending func(*call) bool, frameBuffered func() bool, linkDown bool) (grant *call, wake, freed bool) {
	if t.kind != heldLinger {
		return nil, false, false
	}
	grant, wake = t.release(pending, frameBuffered(), linkDown)
	return grant, wake, true
}

// end records that the stream ended: the token is freed for good. The
// reader goroutine must look (and report the end).
func (t *token) end() {
	t.ended = true
	t.kind, t.holder = heldNone, nil
}
