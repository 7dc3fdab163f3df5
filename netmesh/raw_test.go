package netmesh

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// rawPeer is a test's hand-driven end of an authenticated connection: it
// completed the real client handshake as rank `as` and then writes and
// reads frames byte by byte, so a test can send what an honest mesh
// never would.
type rawPeer struct {
	t       testing.TB
	c       *net.TCPConn
	peerMem uint64
}

// rawJob starts PE 1 of a 2-PE job and connects a raw peer to it as PE 0.
func rawJob(t testing.TB, memSize int, edit func(*Config)) (*tpe, *rawPeer) {
	t.Helper()
	p := newPE(t, 1, 2, memSize, "127.0.0.1", func(c *Config) {
		c.Streams = 1 // the raw peer speaks one stream
		if edit != nil {
			edit(c)
		}
	})
	t.Cleanup(func() { p.m.Close() })
	done := make(chan error, 1)
	go func() { done <- p.m.Connect(context.Background(), map[int]string{0: ""}) }()
	r := dialRaw(t, p.m.Addr(), hsParams{key: testKey, jobID: testJob, rank: 0, size: 2, streams: 1, memSize: 1 << 20}, 1, 0)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return p, r
}

func dialRaw(t testing.TB, addr string, hp hsParams, target, stream int) *rawPeer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	pm, err := clientHandshake(c, &hp, target, stream, hsKindLink)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Time{})
	t.Cleanup(func() { c.Close() })
	return &rawPeer{t: t, c: c.(*net.TCPConn), peerMem: pm}
}

func (r *rawPeer) send(b []byte) {
	r.t.Helper()
	if _, err := r.c.Write(b); err != nil {
		r.t.Fatal(err)
	}
}

// read reads one whole frame (within d) and decodes it.
func (r *rawPeer) read(d time.Duration) (Frame, error) {
	r.c.SetReadDeadline(time.Now().Add(d))
	defer r.c.SetReadDeadline(time.Time{})
	b := make([]byte, prefixLen, maxHdrLen)
	if _, err := io.ReadFull(r.c, b); err != nil {
		return Frame{}, err
	}
	_, hl, err := parsePrefix(b)
	if err != nil {
		return Frame{}, err
	}
	b = b[:hl]
	if _, err := io.ReadFull(r.c, b[prefixLen:]); err != nil {
		return Frame{}, err
	}
	var plen int
	switch b[1] {
	case typePut, typeGetResp:
		if b[1] == typePut {
			plen = int(le.Uint32(b[2:6]))
		} else {
			plen = int(le.Uint32(b[8:12]))
		}
	case typePutSignal:
		plen = int(le.Uint32(b[4:8]))
	case typeError:
		plen = int(le.Uint16(b[4:6]))
	}
	if plen > MaxPayload {
		return Frame{}, io.ErrShortBuffer
	}
	full := append(b, make([]byte, plen)...)
	if _, err := io.ReadFull(r.c, full[hl:]); err != nil {
		return Frame{}, err
	}
	f, _, err := ParseFrame(full)
	return f, err
}

// readUntil reads frames, skipping heartbeats, until one of type t.
func (r *rawPeer) readUntil(t byte, d time.Duration) (Frame, error) {
	deadline := time.Now().Add(d)
	for {
		f, err := r.read(time.Until(deadline))
		if err != nil || f.Type == t {
			return f, err
		}
	}
}
