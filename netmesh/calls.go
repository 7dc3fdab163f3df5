package netmesh

import (
	"sync"
	"sync/atomic"
	"time"
)

// A call is a request that expects a reply: a GET, a fetching ATOMIC or a
// FLUSH. Calls live in their link's table under an id from the time the
// request is queued until exactly one party removes them:
//
//   - the stream's reader, when the reply arrives (it then fills dst and
//     completes the call);
//   - the link's failure path, which completes every call it removes
//     with the link's error;
//   - a blocking caller whose wait timed out; it removes its own call so
//     nothing writes its dst afterwards. If the reader removed it first,
//     the caller waits for the completion that is already under way.
//
// Whoever removes a call completes it exactly once, so a call's done
// channel (capacity 1) receives at most one value, and a pooled call is
// reused only after its completion was received or after its owner
// removed it.
type call struct {
	id     uint32
	stream int
	kind   byte   // typeGet, typeAtomic or typeFlush
	dst    []byte // GET: the destination, exactly the requested length
	old    *uint64
	width  byte
	nbi    bool // nobody waits: the reader recycles it
	val    uint64
	err    error
	state  atomic.Uint32 // callPending, callDone or callAsleep
	done   chan struct{} // receives one value if the waiter went to sleep
	timer  *time.Timer
}

// Call states. complete stores err, then swaps in callDone. A waiter
// swaps callPending for callAsleep before it sleeps on done; if that
// fails, the call completed already and err is set. complete sends on
// done only when it finds callAsleep, so nothing is sent to a waiter that
// never slept.
const (
	callPending = iota
	callDone
	callAsleep
)

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

func getCall() *call { return callPool.Get().(*call) }

func putCall(c *call) {
	c.dst, c.old, c.err, c.val, c.nbi = nil, nil, nil, 0, false
	c.state.Store(callPending)
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
	if c.state.Swap(callDone) == callAsleep {
		c.done <- struct{}{}
	}
}

// block waits, without a timeout, for a completion that is sure to come
// (the call was removed by someone else).
func (c *call) block() {
	if c.state.CompareAndSwap(callPending, callAsleep) {
		<-c.done
	}
}

// callTable holds a link's calls in flight.
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

// failStream completes every call sent on stream (or on any stream, for
// stream < 0) with err, and with close set refuses new calls with err.
func (t *callTable) failStream(stream int, err error, close bool) {
	t.mu.Lock()
	if close && t.err == nil {
		t.err = err
	}
	var failed []*call
	for id, c := range t.m {
		if stream < 0 || c.stream == stream {
			delete(t.m, id)
			failed = append(failed, c)
		}
	}
	t.room.Broadcast()
	t.mu.Unlock()
	for _, c := range failed {
		c.complete(err)
	}
}

// wait blocks until c completes or timeout passes. On a timeout it
// removes c, so no reply writes its destination afterwards, and returns
// errWaitTimeout; if the reply is already being applied, it waits for it.
// c may be reused when wait returns.
func (t *callTable) wait(c *call, timeout time.Duration) error {
	// No spinning here: polling with runtime.Gosched saves a wake-up on an
	// idle machine but takes the processor from the readers on a busy one
	// (more PEs than cores), where it measured twice as slow.
	if !c.state.CompareAndSwap(callPending, callAsleep) {
		return c.err // completed meanwhile
	}
	if c.timer == nil {
		c.timer = time.NewTimer(timeout)
	} else {
		c.timer.Reset(timeout)
	}
	select {
	case <-c.done:
		c.timer.Stop()
		return c.err
	case <-c.timer.C:
	}
	if t.removeIf(c) {
		return errWaitTimeout
	}
	<-c.done
	return c.err
}
