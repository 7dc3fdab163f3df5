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
	pm, cerr := clientHandshake(a, cp, 3, 1, hsKindLink)
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
		{"wrong key on the client", func(c, s *hsParams) { c.key = bytes.Repeat([]byte{1}, 32) }, 0, 0},
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

// The server never admits anything that does not carry a client MAC made
// with the key, whatever bytes it is fed.
func FuzzHandshake(f *testing.F) {
	h := hello{jobID: testJob, client: 1, server: 3, stream: 0, streams: 2, memSize: 4096}
	raw := appendHello(nil, &h)
	f.Add(raw, []byte{})
	f.Add(raw, appendProof(nil, make([]byte, macLen)))
	f.Add([]byte("GSNM\x01\x01\xff\x00"), []byte{})
	f.Add([]byte("GSNM\x02\x01\x03\x00"), []byte{})
	f.Add([]byte("garbage"), []byte("more garbage"))
	// The answers a client may see.
	ch := appendChallenge(nil, &challenge{server: 3, memSize: 1})
	f.Add(ch, appendAccept(nil))
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
		// never succeeds either (the challenge cannot carry a valid MAC).
		in = io.MultiReader(bytes.NewReader(first), bytes.NewReader(second))
		rw.Reader = in
		if _, err := clientHandshake(rw, clientParams(), 3, 0, hsKindLink); err == nil {
			t.Fatal("client accepted fuzz input")
		}
		// The parsers never panic.
		parseHello(first)
		parseChallenge(first)
		parseProof(first)
		parseAnswer(first)
	})
}
