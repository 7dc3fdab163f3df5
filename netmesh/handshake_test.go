package netmesh

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/goshmem/goshmem/internal/errs"
)

func serverParams() *hsParams {
	return &hsParams{key: testKey, jobID: testJob, rank: 3, size: 4, streams: 2, memSize: 1 << 20}
}

func clientParams() *hsParams {
	return &hsParams{key: testKey, jobID: testJob, rank: 1, size: 4, streams: 2, memSize: 1 << 16}
}

// runHandshake runs both sides over a pipe.
func runHandshake(t *testing.T, cp, sp *hsParams, admit func(*hello) byte) (uint64, error, hello, error) {
	t.Helper()
	return runHandshakeKind(t, cp, sp, 1, hsKindLink, admit)
}

// runHandshakeKind is runHandshake for a stream of kind with index stream.
func runHandshakeKind(t *testing.T, cp, sp *hsParams, stream int, kind byte, admit func(*hello) byte) (uint64, error, hello, error) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	type res struct {
		h   hello
		err error
	}
	sc := make(chan res, 1)
	go func() {
		h, err := serverHandshake(b, sp, admit)
		b.Close()
		sc <- res{h, err}
	}()
	pm, cerr := clientHandshake(a, cp, 3, stream, kind)
	a.Close()
	s := <-sc
	return pm, cerr, s.h, s.err
}

func TestHandshake(t *testing.T) {
	admitted := 0
	pm, cerr, h, serr := runHandshake(t, clientParams(), serverParams(), func(*hello) byte { admitted++; return 0 })
	if cerr != nil || serr != nil {
		t.Fatalf("client %v, server %v", cerr, serr)
	}
	if pm != 1<<20 || h.memSize != 1<<16 || h.client != 1 || h.server != 3 || h.stream != 1 || h.streams != 2 || h.jobID != testJob || admitted != 1 {
		t.Fatalf("exchanged %d / %+v, admitted %d", pm, h, admitted)
	}

	refusals := []struct {
		name       string
		edit       func(c, s *hsParams)
		admit      byte
		clientCode byte // the refusal the client sees (0: it refuses itself)
	}{
		// The server checks the client's proof first and refuses in the
		// key exchange: the client hears of it as a refusal either way.
		{"wrong key on the client", func(c, s *hsParams) { c.key = bytes.Repeat([]byte{1}, 32) }, 0, refuseAuth},
		{"wrong key on the server", func(c, s *hsParams) { s.key = bytes.Repeat([]byte{1}, 32) }, 0, refuseAuth},
		{"wrong job", func(c, s *hsParams) { c.jobID = "other" }, 0, refuseJob},
		{"stream count", func(c, s *hsParams) { c.streams = 1 }, 0, refuseStreams},
		{"client rank not lower", func(c, s *hsParams) { c.rank = 3 }, 0, refuseRank},
		{"admit refuses", func(c, s *hsParams) {}, refuseDuplicate, refuseDuplicate},
	}
	for _, r := range refusals {
		t.Run(r.name, func(t *testing.T) {
			cp, sp := clientParams(), serverParams()
			r.edit(cp, sp)
			admitted := false
			_, cerr, _, serr := runHandshake(t, cp, sp, func(*hello) byte { admitted = true; return r.admit })
			if !errors.Is(cerr, errs.Auth) || !errors.Is(serr, errs.Auth) {
				t.Fatalf("client %v, server %v: want errs.Auth on both sides", cerr, serr)
			}
			var rf *refusal
			if r.clientCode != 0 && (!errors.As(cerr, &rf) || rf.code != r.clientCode || !rf.remote) {
				t.Fatalf("client error %v, want refusal code %d", cerr, r.clientCode)
			}
			if admitted && r.admit == 0 {
				t.Fatal("admitted a peer that failed the handshake")
			}
		})
	}
}

// Channel streams (HELLO stream kind 0x01): either rank may dial, the
// index is a slot below maxChanStreams, the stream count must still
// agree; the kind is authenticated like every other field.
func TestHandshakeChannelStream(t *testing.T) {
	higher := clientParams()
	higher.rank = 3
	server := serverParams()
	server.rank = 1
	for _, c := range []struct {
		name     string
		cp, sp   *hsParams
		server   int
		slot     int
		wantCode byte // 0: accepted
	}{
		{"lower rank dials", clientParams(), serverParams(), 3, 5, 0},
		{"higher rank dials", higher, server, 1, maxChanStreams - 1, 0},
		{"slot past the bound", clientParams(), serverParams(), 3, maxChanStreams, refuseStreams},
		{"to itself", serverParams(), serverParams(), 3, 0, refuseRank},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			var got hello
			sc := make(chan error, 1)
			go func() {
				h, err := serverHandshake(b, c.sp, func(*hello) byte { return 0 })
				got = h
				b.Close()
				sc <- err
			}()
			_, cerr := clientHandshake(a, c.cp, c.server, c.slot, hsKindChan)
			a.Close()
			serr := <-sc
			if c.wantCode == 0 {
				if cerr != nil || serr != nil {
					t.Fatalf("client %v, server %v", cerr, serr)
				}
				if got.kind != hsKindChan || int(got.stream) != c.slot {
					t.Fatalf("server saw kind %d slot %d", got.kind, got.stream)
				}
				return
			}
			var rf *refusal
			if !errors.As(cerr, &rf) || rf.code != c.wantCode || !errors.Is(serr, errs.Auth) {
				t.Fatalf("client %v, server %v: want refusal %d", cerr, serr, c.wantCode)
			}
		})
	}
	// A link stream from the higher rank is still refused.
	_, cerr, _, _ := runHandshakeKind(t, higher, server, 0, hsKindLink, func(*hello) byte { return 0 })
	var rf *refusal
	if !errors.As(cerr, &rf) || rf.code != refuseRank {
		t.Fatalf("link stream from the higher rank: %v", cerr)
	}
	// Any other kind, and reserved bytes after the kind, are malformed.
	h := hello{jobID: testJob, client: 1, server: 3, streams: 2, kind: hsKindChan}
	raw := appendHello(nil, &h)
	if p, err := parseHello(raw); err != nil || p.kind != hsKindChan {
		t.Fatalf("parse a channel HELLO: %+v, %v", p, err)
	}
	for _, at := range []int{20, 21, 22, 23} {
		bad := append([]byte(nil), raw...)
		bad[at] = 2
		if _, err := parseHello(bad); err == nil {
			t.Fatalf("HELLO with byte %d = 2 parsed", at)
		}
	}
}

// FuzzParseHello: whatever parseHello accepts re-encodes to the same
// bytes (every field, the stream kind included, is read from where
// appendHello writes it, and nothing else is ignored), and checkHello
// judges it without panicking.
func FuzzParseHello(f *testing.F) {
	for _, k := range []byte{hsKindLink, hsKindChan, 2} {
		h := hello{jobID: testJob, client: 1, server: 3, stream: 1, streams: 2, kind: k, memSize: 4096}
		f.Add(appendHello(nil, &h))
	}
	f.Add([]byte("GSNM\x01\x01\x01\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHello(b)
		if err != nil {
			return
		}
		if h.kind != hsKindLink && h.kind != hsKindChan {
			t.Fatalf("parsed a HELLO of kind %d", h.kind)
		}
		if re := appendHello(nil, &h); !bytes.Equal(re, b) {
			t.Fatalf("HELLO re-encodes differently:\n% x\n% x", b, re)
		}
		checkHello(&h, serverParams())
	})
}

// The server never admits anything that does not carry a client proof
// made with the key, whatever bytes it is fed; the client never accepts
// a server that did not prove it.
func FuzzHandshake(f *testing.F) {
	h := hello{jobID: testJob, client: 1, server: 3, stream: 0, streams: 2, memSize: 4096}
	raw := appendHello(nil, &h)
	resp := append([]byte{0x01, 0xA2, 0, 0}, make([]byte, 64)...) // an auth RESPONSE with a zero proof
	f.Add(raw, []byte{})
	f.Add(raw, resp)
	hc := h
	hc.kind = hsKindChan
	f.Add(appendHello(nil, &hc), resp)
	f.Add([]byte("GSNM\x02\x01\xff\x00"), []byte{})
	f.Add([]byte("GSNM\x01\x01\x03\x00"), []byte{})
	f.Add([]byte("garbage"), []byte("more garbage"))
	// The answers a client may see.
	rp := appendReply(nil, &reply{server: 3, memSize: 1})
	f.Add(rp, append([]byte{0x01, 0xA1, 0, 0}, make([]byte, 32)...))
	f.Add(rp, append(append([]byte{0x01, 0xA1, 0, 0}, make([]byte, 32)...), append([]byte{0x01, 0xA3, 0, 0}, make([]byte, 32)...)...))
	f.Add(rp, appendAccept(nil))
	f.Add(appendRefuse(nil, refuseAuth), []byte{})
	f.Fuzz(func(t *testing.T, first, second []byte) {
		in := io.MultiReader(bytes.NewReader(first), bytes.NewReader(second))
		rw := struct {
			io.Reader
			io.Writer
		}{in, io.Discard}
		if _, err := serverHandshake(rw, serverParams(), func(*hello) byte {
			t.Fatal("admitted without the key")
			return 0
		}); err == nil || !errors.Is(err, errs.Auth) {
			t.Fatalf("server accepted fuzz input: %v", err)
		}
		// The client side, fed the fuzz bytes as the server's answers,
		// never succeeds either (no input can carry a proof over the
		// nonce it draws).
		in = io.MultiReader(bytes.NewReader(first), bytes.NewReader(second))
		rw.Reader = in
		if _, err := clientHandshake(rw, clientParams(), 3, 0, hsKindLink); err == nil {
			t.Fatal("client accepted fuzz input")
		}
		// The parsers never panic.
		parseHello(first)
		parseReply(first)
		parseAnswer(first)
	})
}
