package netmesh

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A poller that holds a stream's token keeps its socket quiet (watch.go:
// no readiness below quietLowat bytes). When a frame's payload arrives
// in two parts, the poller reads the first and then waits in conn.Read
// for the rest, which parks in Go's netpoller: the socket must signal
// again first (stream.loud), or a rest shorter than quietLowat waits for
// the peer's next bytes — a heartbeat, here an hour away. The test sends
// the second part only once the poller has taken the first from the
// socket.
func TestPollerReadsSplitPayload(t *testing.T) {
	p, r := rawJob(t, 1<<16, func(c *Config) { c.Heartbeat = time.Hour; c.Spin = SpinOn })
	st := p.m.Link(0).streams[0]
	before := p.applied.Load()
	applied := func() bool { return p.applied.Load() != before }
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for deadline := time.Now().Add(30 * time.Second); !applied() && time.Now().Before(deadline); {
			p.m.Poll(time.Second, applied)
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s within 5 s", what)
			}
			runtime.Gosched()
		}
	}
	waitFor("no poller made the socket quiet", func() bool {
		st.rmu.Lock()
		defer st.rmu.Unlock()
		return st.tok.kind == heldPoller && st.w8.quiet
	})
	payload := bytes.Repeat([]byte{0xAB}, 1000)
	frame := append(appendPut(nil, 128, uint32(len(payload))), payload...)
	cut := len(frame) - 900
	r.send(frame[:cut])
	waitFor("the poller did not take the first part from the socket", func() bool {
		var queued int
		var err error
		if cerr := st.raw.Control(func(fd uintptr) { queued, err = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); cerr != nil || err != nil {
			t.Fatal(cerr, err)
		}
		return queued == 0
	})
	if applied() {
		t.Fatal("the PUT was applied before its payload's second part was sent")
	}
	r.send(frame[cut:])
	waitFor("lost wake-up: the poller never read the payload's second part (900 bytes)", applied)
	<-polled
	p.sync()
	if !bytes.Equal(p.mem[128:128+len(payload)], payload) {
		t.Fatal("the PUT's payload is not in the segment")
	}
}
