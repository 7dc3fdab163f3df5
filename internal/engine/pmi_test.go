package engine

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/errs"
)

// fakePMI is a PMI-1 server for size clients, written from the wire
// table in pmi.go (the same one Hydra and Slurm's pmi2 plugin speak):
// a shared KVS and a barrier.
type fakePMI struct {
	size int
	mu   sync.Mutex
	kvs  map[string]string
	in   int
	gen  chan struct{} // closed when the current barrier completes
	// reply, if set, replaces the server's answer to a request.
	reply func(req string) (string, bool)
}

func newFakePMI(size int) *fakePMI {
	return &fakePMI{size: size, kvs: map[string]string{}, gen: make(chan struct{})}
}

func (f *fakePMI) serve(nc net.Conn, portMode bool) {
	defer nc.Close()
	r := bufio.NewReader(nc)
	say := func(s string) { fmt.Fprintf(nc, "%s\n", s) }
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		req := strings.TrimSpace(line)
		if f.reply != nil {
			if out, ok := f.reply(req); ok {
				say(out)
				continue
			}
		}
		w, _ := ParsePMIReply(req)
		switch w["cmd"] {
		case "initack":
			say("cmd=initack")
			say(fmt.Sprintf("cmd=set size=%d", f.size))
			say("cmd=set rank=" + w["pmiid"])
			say("cmd=set debug=0")
		case "init":
			say("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0")
		case "get_maxes":
			say("cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024 rc=0")
		case "get_my_kvsname":
			say("cmd=my_kvsname kvsname=kvs_test_0 rc=0")
		case "put":
			f.mu.Lock()
			f.kvs[w["key"]] = w["value"]
			f.mu.Unlock()
			say("cmd=put_result rc=0 msg=success")
		case "barrier_in":
			f.mu.Lock()
			g := f.gen
			f.in++
			if f.in == f.size {
				f.in = 0
				close(f.gen)
				f.gen = make(chan struct{})
			}
			f.mu.Unlock()
			<-g
			say("cmd=barrier_out")
		case "get":
			f.mu.Lock()
			v, ok := f.kvs[w["key"]]
			f.mu.Unlock()
			if ok {
				say("cmd=get_result rc=0 value=" + v)
			} else {
				say("cmd=get_result rc=-1 msg=key_" + w["key"] + "_not_found")
			}
		case "finalize":
			say("cmd=finalize_ack")
		default:
			say("cmd=unknown rc=-1")
		}
	}
}

// listen serves the fake over TCP (PMI_PORT).
func (f *fakePMI) listen(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go f.serve(nc, true)
		}
	}()
	return ln.Addr().String()
}

// fd serves the fake over a socketpair and returns the client's end, as
// Hydra passes PMI_FD.
func (f *fakePMI) fd(t *testing.T) int {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	srv := os.NewFile(uintptr(fds[1]), "pmi-server")
	nc, err := net.FileConn(srv)
	srv.Close()
	if err != nil {
		t.Fatal(err)
	}
	go f.serve(nc, false)
	return fds[0]
}

func TestPMIOverPortAndFD(t *testing.T) {
	f := newFakePMI(3)
	addr := f.listen(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	got := make([]string, 3)
	errc := make(chan error, 3)
	for r := range 3 {
		e := Engine{Rank: r, Size: 3, PMIFD: -1}
		if r == 1 {
			e.PMIFD = f.fd(t)
		} else {
			e.PMIPort, e.PMIID, e.Rank, e.Size = addr, r, 0, 0 // the server tells
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := DialPMI(ctx, &e)
			if err != nil {
				errc <- err
				return
			}
			defer c.Finalize()
			if c.Rank != r || c.Size != 3 || c.KVSName != "kvs_test_0" {
				errc <- fmt.Errorf("rank %d: client says rank %d size %d kvs %q", r, c.Rank, c.Size, c.KVSName)
				return
			}
			if r == 0 {
				if err := c.Put(ctx, "k", "127.0.0.1:9"); err != nil {
					errc <- err
					return
				}
			}
			if err := c.Barrier(ctx); err != nil {
				errc <- err
				return
			}
			if got[r], err = c.Get(ctx, "k"); err != nil {
				errc <- err
			}
			if _, err := c.Get(ctx, "missing"); err == nil || !strings.Contains(err.Error(), "not_found") {
				errc <- fmt.Errorf("rank %d: Get of a missing key: %v", r, err)
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	for r, v := range got {
		if v != "127.0.0.1:9" {
			t.Errorf("rank %d got %q", r, v)
		}
	}
}

func TestPMIBadServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for name, reply := range map[string]string{
		"wrong cmd":     "cmd=maxes rc=0",
		"wrong version": "cmd=response_to_init pmi_version=2 rc=0",
		"garbage":       "hello there",
		"failure":       "cmd=response_to_init pmi_version=1 rc=-1 msg=no",
	} {
		f := newFakePMI(1)
		f.reply = func(req string) (string, bool) { return reply, strings.HasPrefix(req, "cmd=init ") }
		e := Engine{Size: 1, PMIFD: f.fd(t)}
		if c, err := DialPMI(ctx, &e); err == nil {
			c.Close()
			t.Errorf("%s: DialPMI succeeded", name)
		}
	}
	// A server that never answers: the context bounds the wait.
	f := newFakePMI(1)
	f.reply = func(req string) (string, bool) { select {} }
	short, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	e := Engine{Size: 1, PMIFD: f.fd(t)}
	if _, err := DialPMI(short, &e); !errors.Is(err, errs.Timeout) {
		t.Errorf("silent server: %v, want errs.Timeout", err)
	}
	// Values PMI cannot carry are refused before they are sent.
	g := newFakePMI(1)
	c, err := DialPMI(ctx, &Engine{Size: 1, PMIFD: g.fd(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, v := range []string{"", "a b", "a=b", "a\nb"} {
		if err := c.Put(ctx, "k", v); !errors.Is(err, errs.Invalid) {
			t.Errorf("Put(%q): %v, want errs.Invalid", v, err)
		}
	}
}

func TestParsePMIReply(t *testing.T) {
	r, err := ParsePMIReply("cmd=get_result rc=0 value=10.0.0.1:4000")
	if err != nil || r["cmd"] != "get_result" || r["value"] != "10.0.0.1:4000" || r.rc() != 0 {
		t.Fatalf("got %v, %v", r, err)
	}
	if r, err := ParsePMIReply("cmd=x value="); err != nil || r["value"] != "" {
		t.Fatalf("empty value: %v, %v", r, err)
	}
	for _, bad := range []string{"", "rc=0", "cmd=a cmd=b", "cmd=a =b", "cmd=a b", strings.Repeat("x", maxPMILine+1)} {
		if r, err := ParsePMIReply(bad); !errors.Is(err, errs.Protocol) {
			t.Errorf("ParsePMIReply(%.20q) = %v, %v; want errs.Protocol", bad, r, err)
		}
	}
}

func FuzzParsePMIReply(f *testing.F) {
	for _, s := range []string{"cmd=barrier_out", "cmd=get_result rc=0 value=a:1", "cmd=set size=4", "==", "cmd= rc=x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParsePMIReply(s)
		if err != nil {
			if !errors.Is(err, errs.Protocol) {
				t.Fatalf("error %v does not wrap errs.Protocol", err)
			}
			return
		}
		// A parsed reply prints back to a line that parses the same.
		var words []string
		for k, v := range r {
			if k == "" || strings.ContainsAny(k, " \t\n=") || strings.ContainsAny(v, " \t\n") {
				t.Fatalf("ParsePMIReply(%q) gave word %q=%q", s, k, v)
			}
			words = append(words, k+"="+v)
		}
		r2, err := ParsePMIReply(strings.Join(words, " "))
		if err != nil || len(r2) != len(r) {
			t.Fatalf("round trip of %q: %v, %v", s, r2, err)
		}
		_ = r.rc()
	})
}
