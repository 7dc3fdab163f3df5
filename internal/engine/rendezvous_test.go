package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/boot"
	"github.com/goshmem/goshmem/internal/errs"
)

var testKeyHex = strings.Repeat("5a", KeySize)

// startAll runs Start for every rank of e's job as goroutines and checks
// that the clients can run a round together. keys[r], if set, replaces
// rank r's GOSHMEM_KEY.
func startAll(t *testing.T, e Engine, keys map[int]string) ([]*Job, []error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	jobs := make([]*Job, e.Size)
	errs := make([]error, e.Size)
	var wg sync.WaitGroup
	for r := range e.Size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			er := e
			er.Rank, er.LocalRank = r, r%max(e.LocalSize, 1)
			k := testKeyHex
			if s, ok := keys[r]; ok {
				k = s
			}
			jobs[r], errs[r] = Start(ctx, er, 1, envOf("GOSHMEM_KEY="+k))
		}()
	}
	wg.Wait()
	return jobs, errs
}

// roundAndFinish runs one Allgather over the joined ranks, then ends the
// job as Finalize does.
func roundAndFinish(t *testing.T, jobs []*Job) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for r, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			parts, err := j.Client.Allgather(ctx, []byte(strconv.Itoa(r)))
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
				return
			}
			for q, p := range parts {
				if string(p) != strconv.Itoa(q) {
					t.Errorf("rank %d: part %d is %q", r, q, p)
				}
			}
			j.Client.Close()
			j.Finish(5 * time.Second)
		}()
	}
	wg.Wait()
}

func TestStartSingleNodeUnix(t *testing.T) {
	e := Engine{Launcher: OpenMPI, Size: 3, LocalSize: 3, JobID: "ompi-" + t.Name(), PMIFD: -1}
	jobs, errs := startAll(t, e, nil)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if !strings.HasPrefix(jobs[1].Addr, boot.UnixPrefix+"@goshmem-rdv-") || jobs[0].Server() == nil || jobs[1].Server() != nil {
		t.Fatalf("address %q, servers %v %v: want rank 0 serving an abstract socket", jobs[1].Addr, jobs[0].Server(), jobs[1].Server())
	}
	roundAndFinish(t, jobs)
	// Nothing left: the name is free again once rank 0 finished.
	name := strings.TrimPrefix(jobs[0].Addr, boot.UnixPrefix)
	ln, err := net.Listen("unix", name)
	if err != nil {
		t.Fatalf("the rendezvous socket outlived the job: %v", err)
	}
	ln.Close()
}

func TestStartSlurmDerivedPort(t *testing.T) {
	e := Engine{Launcher: Slurm, Size: 3, LocalSize: 2, JobID: "slurm-" + t.Name(), PMIFD: -1, FirstNode: "127.0.0.1", Nodes: 2}
	// Another job's server holds the first candidate port: rank 0 moves
	// to the next, and the others pass over the stranger.
	ports := slurmPorts(e.JobID + ".g1")
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(ports[0]))
	if err != nil {
		t.Skipf("port %d is busy on this machine: %v", ports[0], err)
	}
	other := boot.NewServer(ln, "another-job", make([]byte, KeySize), 1)
	go other.Serve(context.Background())
	defer other.Close()
	jobs, errs := startAll(t, e, nil)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if want := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])); jobs[2].Addr != want {
		t.Fatalf("rank 2 joined at %s, want %s (the first free candidate of %v)", jobs[2].Addr, want, ports)
	}
	roundAndFinish(t, jobs)
}

func TestStartExplicitRendezvous(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	e := Engine{Launcher: OpenMPI, Size: 2, LocalSize: 1, JobID: "ompi-" + t.Name(), PMIFD: -1, Rendezvous: addr}
	jobs, errs := startAll(t, e, nil)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if jobs[1].Addr != addr || jobs[1].How != "GOSHMEM_RENDEZVOUS" {
		t.Fatalf("rank 1 dialed %s via %s", jobs[1].Addr, jobs[1].How)
	}
	roundAndFinish(t, jobs)
}

func TestStartWrongKeyRefusedAtOnce(t *testing.T) {
	e := Engine{Launcher: OpenMPI, Size: 3, LocalSize: 3, JobID: "ompi-" + t.Name(), PMIFD: -1}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Rank 0 (the server) and rank 1 join; rank 2 holds another key.
	var j0, j1 *Job
	var e0, e1 error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); j0, e0 = Start(ctx, e, 1, envOf("GOSHMEM_KEY="+testKeyHex)) }()
	go func() {
		defer wg.Done()
		e1r := e
		e1r.Rank = 1
		j1, e1 = Start(ctx, e1r, 1, envOf("GOSHMEM_KEY="+testKeyHex))
	}()
	e2 := e
	e2.Rank = 2
	_, err := Start(ctx, e2, 1, envOf("GOSHMEM_KEY="+strings.Repeat("00", KeySize)))
	if !errors.Is(err, errs.Auth) || errors.Is(err, errs.Timeout) || !strings.Contains(err.Error(), "GOSHMEM_KEY") {
		t.Fatalf("rank 2 with another key: %v; want an immediate errs.Auth naming the key's source", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the refusal took %v", d)
	}
	wg.Wait()
	if e0 != nil || e1 != nil {
		t.Fatalf("ranks 0, 1: %v, %v", e0, e1)
	}
	j1.Client.Close()
	j0.Client.Close()
	j0.Abandon()
}

func TestStartRefusesWhatItCannotJoin(t *testing.T) {
	ctx := context.Background()
	key := envOf("GOSHMEM_KEY=" + testKeyHex)
	e := Engine{Launcher: OpenMPI, Size: 4, LocalSize: 2, JobID: "ompi-x", PMIFD: -1}
	if _, err := Start(ctx, e, 1, key); !errors.Is(err, errs.Invalid) || !strings.Contains(err.Error(), "GOSHMEM_RENDEZVOUS") {
		t.Errorf("Open MPI over two nodes: %v; want errs.Invalid naming GOSHMEM_RENDEZVOUS", err)
	}
	s := Engine{Launcher: Slurm, Size: 4, LocalSize: 2, JobID: "slurm-x", PMIFD: -1, FirstNode: "n1", NodeID: 1}
	if _, err := Start(ctx, s, 1, key); !errors.Is(err, errs.Invalid) || !strings.Contains(err.Error(), "first node") {
		t.Errorf("rank 0 off the first node: %v", err)
	}
	e.Rendezvous = "no-port"
	if _, err := Start(ctx, e, 1, key); !errors.Is(err, errs.Invalid) {
		t.Errorf("GOSHMEM_RENDEZVOUS without a port: %v", err)
	}
	if _, err := Start(ctx, Engine{Launcher: OpenMPI, Size: 2, LocalSize: 2, JobID: "j", PMIFD: -1}, 1, envOf()); !errors.Is(err, errs.Invalid) {
		t.Errorf("no key at all: %v", err)
	}
}

func TestSlurmPortsInRange(t *testing.T) {
	for i := range 1000 {
		ps := slurmPorts(fmt.Sprintf("slurm-%d.0.g1", i))
		if len(ps) != slurmPortTries {
			t.Fatal(ps)
		}
		for _, p := range ps {
			if p < slurmPortBase || p >= slurmPortBase+slurmPortSpan {
				t.Fatalf("port %d outside [%d, %d)", p, slurmPortBase, slurmPortBase+slurmPortSpan)
			}
		}
	}
}
