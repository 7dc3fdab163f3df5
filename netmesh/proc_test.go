package netmesh

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"
)

// The latency benchmarks also run with the peer PE in a separate process,
// as in a real job, so that the two PEs do not share one Go scheduler.
// TestBenchPeerProcess is that process's body.

const peerEnv = "GOSHMEM_NETMESH_BENCH_PEER"

// TestBenchPeerProcess runs only as the child of a benchmark: PE 1 of a
// 2-PE job plus a raw TCP echo server; it prints both addresses, serves
// until its standard input closes, then closes.
func TestBenchPeerProcess(t *testing.T) {
	if os.Getenv(peerEnv) == "" {
		t.Skip("only runs as a benchmark's peer process")
	}
	mem := make([]byte, 8<<20)
	busy := os.Getenv(peerEnv) == "busy"
	m, err := Listen(Config{Rank: 1, Size: 2, JobID: testJob, Key: testKey, Mem: mem, Atomics: heapAtomics(mem), Listen: "127.0.0.1:0", Spin: spinMode(busy)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 1<<20)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					c.Write(buf[:n])
				}
			}()
		}
	}()
	fmt.Printf("ADDRS %s %s\n", m.Addr(), ln.Addr())
	if err := m.Connect(context.Background(), map[int]string{0: ""}); err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, os.Stdin)
}

// peerProcess starts the peer process and returns PE 0's link to it and
// the address of its raw echo server. With busy, both PEs run with
// Config.Spin = SpinOn.
func peerProcess(b *testing.B, busy bool) (*Link, string) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchPeerProcess$")
	mode := "1"
	if busy {
		mode = "busy"
	}
	cmd.Env = append(os.Environ(), peerEnv+"="+mode)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	var meshAddr, rawAddr string
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "ADDRS %s %s", &meshAddr, &rawAddr); err == nil {
			break
		}
	}
	go io.Copy(io.Discard, stdout)
	p := newPE(b, 0, 2, 8<<20, "127.0.0.1", func(c *Config) { c.Spin = spinMode(busy) })
	b.Cleanup(func() { p.m.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.m.Connect(ctx, map[int]string{1: meshAddr}); err != nil {
		b.Fatal(err)
	}
	return p.m.Link(1), rawAddr
}

// rawPingPongTo returns a function doing one 8-byte ping-pong with the
// echo server at addr.
func rawPingPongTo(b *testing.B, addr string) func() {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	buf := make([]byte, 8)
	return func() {
		c.Write(buf)
		io.ReadFull(c, buf)
	}
}
