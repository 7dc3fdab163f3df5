package shmem

// White-box tests of the segment exchange (segexchange.go): its pinned
// constants, its hello codec, and an acceptor that local strangers try
// to stall or fool while the real peer connects.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goshmem/goshmem/heap"
	"github.com/goshmem/goshmem/internal/boot"
)

func TestSegExchangeConstants(t *testing.T) {
	if segMagic != "GSHMSEG4" || segVersion != 4 || segHelloSize != 16 || segFD != 0x53 || segBye != 0x42 || segLabel != "goshmem-seg4" {
		t.Fatalf("segment exchange constants changed: %q %d %d %#x %#x %q", segMagic, segVersion, segHelloSize, segFD, segBye, segLabel)
	}
	h := segHello{version: segVersion, rank: 0x01020304}
	b := appendSegHello(nil, h)
	want := []byte("GSHMSEG4\x04\x00\x00\x00\x01\x02\x03\x04")
	if !bytes.Equal(b, want) {
		t.Fatalf("hello bytes\n got %x\nwant %x", b, want)
	}
	got, err := parseSegHello(b)
	if err != nil || got != h {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for n := 0; n < len(b); n++ {
		if _, err := parseSegHello(b[:n]); !errors.Is(err, ErrProtocol) {
			t.Fatalf("%d-byte prefix: %v, want ErrProtocol", n, err)
		}
	}
	for _, i := range []int{0, 7, 8, 9, 11} {
		bad := bytes.Clone(b)
		bad[i] ^= 0x40
		if _, err := parseSegHello(bad); !errors.Is(err, ErrProtocol) {
			t.Fatalf("flipped byte %d: %v, want ErrProtocol", i, err)
		}
	}
}

// The socket name fits a Unix socket address for the longest job id
// the boot protocol allows, and the PE can listen on it.
func TestSegSockName(t *testing.T) {
	name := segSockName(strings.Repeat("j", 4096), 1<<20)
	if len(name) > 107 {
		t.Fatalf("socket name of %d bytes: %q", len(name), name)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if segSockName("a", 0) == segSockName("a", 0) {
		t.Fatal("two names for the same PE are equal: no nonce")
	}
}

func FuzzParseSegHello(f *testing.F) {
	f.Add(appendSegHello(nil, segHello{version: segVersion, rank: 3}))
	f.Add([]byte("GSHMSEG2\x02\x00\x00\x00\x00\x00\x00\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseSegHello(b)
		if err == nil && !bytes.Equal(appendSegHello(nil, h), b) {
			t.Fatalf("accepted %x, which does not re-encode to itself", b)
		}
	})
}

// testSegPE is a PE with a small segment of its own, for the exchange.
func testSegPE(t *testing.T, rank, npes int) *PE {
	t.Helper()
	seg, err := heap.Create(heap.HeapBase + 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	seg.WriteHeader(rank, os.Getpid())
	pe, err := newPE(rank, npes, Config{HeapSize: 1 << 20, Timeout: 30 * time.Second}, "h", seg, 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pe.closeProcess(false) })
	return pe
}

// Local strangers connect to PE 0's exchange socket before the real PE 1
// does: one stays silent, one sends garbage, one sends a well-formed
// hello and a wrong proof. PE 0 maps PE 1's segment at once (the silent
// one stalls nothing), and no stranger gets PE 0's descriptor.
func TestSegExchangeStrangers(t *testing.T) {
	key := make([]byte, boot.KeySize)
	rand.Read(key)
	env := boot.Env{JobID: "seg-test", Key: key}
	a, d := testSegPE(t, 0, 2), testSegPE(t, 1, 2)
	var nonce [8]byte
	rand.Read(nonce[:])
	sock := "@goshmem-seg-test-" + hex.EncodeToString(nonce[:])
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	a.unixLn = ln
	eps := []endpoint{{Rank: 0, Host: "h", Sock: sock, SegSize: a.seg.Size()}, {Rank: 1, Host: "h", SegSize: d.seg.Size()}}

	dialStranger := func() *net.UnixConn {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	dialStranger() // silent
	dialStranger().Write(bytes.Repeat([]byte{0xAA}, 100))
	liar := dialStranger()
	liar.Write(appendSegHello(nil, segHello{version: segVersion, rank: 1}))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	errc := make(chan error, 2)
	go func() { errc <- a.exchangeSegments(ctx, env, eps) }()
	// The liar reads PE 0's hello and CHALLENGE, answers with a proof
	// made without the key, and must get no descriptor: an auth REFUSE
	// and the end of the connection instead.
	var h [segHelloSize + 36]byte
	if _, err := io.ReadFull(liar, h[:]); err != nil {
		t.Fatalf("liar reading PE 0's hello and challenge: %v", err)
	}
	resp := append([]byte{0x01, 0xA2, 0, 0}, make([]byte, 64)...)
	liar.Write(resp)
	if fds, _, err := heap.RecvFDs(liar, make([]byte, 64), 2); err == nil {
		heap.CloseFD(fds[0])
		heap.CloseFD(fds[1])
		t.Fatal("a stranger with a wrong proof received PE 0's segment descriptor")
	}
	go func() { errc <- d.exchangeSegments(ctx, env, eps) }()
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if el := time.Since(start); el >= segHandshakeTimeout {
		t.Fatalf("the exchange took %v: a silent stranger held it up", el)
	}
	if a.peers[1].mem == nil || d.peers[0].mem == nil || !a.peers[1].seg.CheckHeader(1) || !d.peers[0].seg.CheckHeader(0) {
		t.Fatal("the PEs did not map each other's segments")
	}
}

// A same-host PE with another job key fails the key exchange: the dialer
// gets ErrAuth at once (no retries until the deadline), and neither side
// maps the other's segment.
func TestSegExchangeWrongKey(t *testing.T) {
	for _, wrongDialer := range []bool{true, false} {
		key, other := make([]byte, boot.KeySize), make([]byte, boot.KeySize)
		rand.Read(key)
		rand.Read(other)
		envA, envD := boot.Env{JobID: "seg-test", Key: key}, boot.Env{JobID: "seg-test", Key: key}
		if wrongDialer {
			envD.Key = other
		} else {
			envA.Key = other
		}
		a, d := testSegPE(t, 0, 2), testSegPE(t, 1, 2)
		var nonce [8]byte
		rand.Read(nonce[:])
		sock := "@goshmem-seg-test-" + hex.EncodeToString(nonce[:])
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		a.unixLn = ln
		eps := []endpoint{{Rank: 0, Host: "h", Sock: sock, SegSize: a.seg.Size()}, {Rank: 1, Host: "h", SegSize: d.seg.Size()}}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		errA := make(chan error, 1)
		go func() { errA <- a.exchangeSegments(ctx, envA, eps) }()
		errD := d.exchangeSegments(ctx, envD, eps)
		if !errors.Is(errD, ErrAuth) || errors.Is(errD, ErrTimeout) {
			t.Errorf("wrong key on the dialer %v: dialer %v, want ErrAuth", wrongDialer, errD)
		}
		cancel()
		if err := <-errA; err == nil {
			t.Errorf("wrong key on the dialer %v: the acceptor completed", wrongDialer)
		}
		if a.peers[1].mem != nil || d.peers[0].mem != nil {
			t.Errorf("wrong key on the dialer %v: a segment was mapped", wrongDialer)
		}
	}
}
