package netmesh

import (
	"sync"
	"sync/atomic"
)

// A call is a request that expects a reply: a GET, a fetching ATOMIC or a
// FLUSH. Calls live in their link's table under an id from the time the
// request is queued until exactly one party removes them:
//
//   - whoever reads the stream when the reply arrives (the reader
//     goroutine or a blocked caller leading the stream, see lead.go); it
//     then fills dst and completes the call;
//   - the link's failure path, which completes every call it removes
//     with the link's error;
//   - a blocking caller whose deadline passed; it removes its own call so
//     nothing writes its dst afterwards. If a reader removed it first,
//     the caller waits for the completion that is already under way.
//
// Whoever removes a call completes it exactly once, and a pooled call is
// reused only after its owner saw it completed or removed it itself.
type call struct {
	id    uint32
	st    *stream // the stream the request goes on and the reply comes back on
	kind  byte    // typeGet, typeAtomic or typeFlush
	dst   []byte  // GET: the destination, exactly the requested length
	old   *uint64
	width byte
	nbi   bool // nobody waits: the reader recycles it
	val   uint64
	mark  uint64 // the request's number among the frames its stream's Flush covers (q.sent)
	err   error
	state atomic.Uint32 // callPending or callDone; err is set before callDone

	// Waiting (lead.go). granted and expired are set under the stream's
	// rmu; deadline and the queue links are guarded by it.
	granted  atomic.Bool // the stream's read token was handed to this call's owner
	expired  atomic.Bool // the deadline passed (set by the watchdog)
	asleep   atomic.Bool // the owner sleeps on wake: the next waker sends
	wake     chan struct{}
	deadline int64 // mono() time after which the wait gives up
	queued   bool
	// The cost controller's view of the wait (spin.go): how the owner
	// waited for its reply when it read it itself, and whether it ever
	// followed another reader (then its wait is no sample).
	way      callWay
	explore  bool
	followed bool
	prev     *call
	next     *call
}

// How a caller waited for its reply (the cost controller, spin.go).
type callWay uint8

const (
	wayNone   callWay = iota // it has not read yet
	wayPolled                // it polled first (and maybe parked when the budget ran out)
	wayParked                // it parked at once
)

// Call states.
const (
	callPending = iota
	callDone
)

var callPool = sync.Pool{New: func() any { return &call{wake: make(chan struct{}, 1)} }}

func getCall() *call { return callPool.Get().(*call) }

func putCall(c *call) {
	c.dst, c.old, c.err, c.val, c.nbi, c.st = nil, nil, nil, 0, false, nil
	c.way, c.explore, c.followed = wayNone, false, false
	c.state.Store(callPending)
	c.granted.Store(false)
	c.expired.Store(false)
	callPool.Put(c)
}

// complete finishes c with err (nil: the reply arrived). A non-blocking
// call is recycled only after its reply arrived: one that fails is left
// to the garbage collector, because the goroutine that queued it may
// still look at it (Link.request's failure path).
func (c *call) complete(err error) {
	if c.nbi {
		if err == nil {
			putCall(c)
		}
		return
	}
	c.err = err
	c.state.Store(callDone)
	c.signal()
}

// on sets the stream c's request goes on.
func (c *call) on(st *stream) { c.st = st }

func (c *call) done() bool { return c.state.Load() == callDone }

// signal wakes c's owner if it sleeps. Whoever changes what the owner
// waits for (completion, a hand-over, expiry) calls it afterwards.
func (c *call) signal() {
	if c.asleep.Load() && c.asleep.Swap(false) {
		c.wake <- struct{}{} // capacity 1, and only the waker that cleared asleep sends
	}
}

// sleep parks the owner until signal, unless ready already holds. ready
// is checked after asleep is set, so a change made before the check is
// seen and one made after it signals.
func (c *call) sleep(ready func(*call) bool) {
	c.asleep.Store(true)
	if ready(c) {
		if c.asleep.Swap(false) {
			return // nobody claimed the wake-up
		}
		// A waker cleared asleep and sends: take its value.
	}
	<-c.wake
}

// block waits, without a timeout, for a completion that is sure to come
// (the call was removed by someone else).
func (c *call) block() {
	for !c.done() {
		c.sleep((*call).done)
	}
}

// callTable holds a stream's calls in flight: those whose requests went
// on it, whose replies come back on it. Each stream has its own, so
// callers on different streams (a PE's contexts, each on a channel
// stream of its own) take no common lock.
type callTable struct {
	mu   sync.Mutex
	room sync.Cond // on mu: a call left while the table was full
	m    map[uint32]*call
	next uint32
	err  error // set when the link fails or closes: no call is added after it
}

func (t *callTable) init() {
	t.m = make(map[uint32]*call)
	t.room.L = &t.mu
}

// add gives c a fresh non-zero id and enters it, waiting while
// MaxOutstanding calls are in flight.
func (t *callTable) add(c *call) error {
	t.mu.Lock()
	for len(t.m) >= MaxOutstanding && t.err == nil {
		t.room.Wait()
	}
	if t.err != nil {
		err := t.err
		t.mu.Unlock()
		return err
	}
	for {
		t.next++
		if t.next == 0 {
			continue // 0 means "no reply" on the wire
		}
		if _, used := t.m[t.next]; !used { // ids wrap after 2^32 calls
			break
		}
	}
	c.id = t.next
	t.m[c.id] = c
	t.mu.Unlock()
	return nil
}

// remove takes the call with id out of the table, or returns nil if it
// is not there.
func (t *callTable) remove(id uint32) *call {
	t.mu.Lock()
	c := t.m[id]
	if c != nil {
		delete(t.m, id)
		if len(t.m) == MaxOutstanding-1 {
			t.room.Broadcast()
		}
	}
	t.mu.Unlock()
	return c
}

// removeIf removes c if it is still in the table and reports whether it
// was.
func (t *callTable) removeIf(c *call) bool {
	t.mu.Lock()
	ok := t.m[c.id] == c
	if ok {
		delete(t.m, c.id)
		t.room.Broadcast()
	}
	t.mu.Unlock()
	return ok
}

// failAll completes every call in the table with err, and with close
// set refuses new calls with err.
func (t *callTable) failAll(err error, close bool) {
	t.mu.Lock()
	if close && t.err == nil {
		t.err = err
	}
	failed := make([]*call, 0, len(t.m))
	for id, c := range t.m {
		delete(t.m, id)
		failed = append(failed, c)
	}
	t.room.Broadcast()
	t.mu.Unlock()
	for _, c := range failed {
		c.complete(err)
	}
}
