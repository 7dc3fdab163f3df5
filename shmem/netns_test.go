package shmem_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/launch"
	"github.com/goshmem/goshmem/internal/testproc"
	"github.com/goshmem/goshmem/shmem"
)

// Real hosts: network namespaces g1 and g2 made by .ci/netns.sh, each
// with its own host name and address 10.77.0.i. .ci/run creates them and
// sets GOSHMEM_NETNS=1; elsewhere these tests skip.
//
// goshrun runs inside g1 with its rendezvous on 10.77.0.1; a wrapper
// puts ranks 0 and 1 in g1 and ranks 2 and 3 in g2, so each pair shares
// memory and the pairs talk over TCP across the bridge.

func netnsAvailable(t testing.TB) string {
	t.Helper()
	if os.Getenv("GOSHMEM_NETNS") == "" {
		t.Skip("no network namespaces: .ci/run makes them as root and sets GOSHMEM_NETNS=1")
	}
	script, err := filepath.Abs("../.ci/netns.sh")
	if err != nil {
		t.Fatal(err)
	}
	return script
}

// netnsJob runs scenario name on 4 PEs spread over g1 and g2 and returns the
// exit code and output. extra is added to every PE's environment;
// during, if set, runs while the job does (e.g. to inject a fault).
func netnsJob(t testing.TB, name string, extra []string, during func(dir string)) (int, string) {
	script := netnsAvailable(t)
	goshrun, cleanup, err := launch.Build("../cmd/goshrun")
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	dir := t.TempDir()
	wrapper := filepath.Join(dir, "place.sh")
	// Ranks 0,1 stay in g1 (where goshrun runs); ranks 2,3 enter g2.
	body := "#!/bin/sh\nif [ \"$GOSHMEM_RANK\" -ge 2 ]; then exec " + script + " run g2 \"$@\"; fi\nexec \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"run", "g1", goshrun, "-n", "4", "--timeout", "3m", "--tag-output", "--rendezvous", "10.77.0.1:0",
		"--env", envScenario + "=" + name, "--env", "GOSHMEM_TIMEOUT=30s", "--env", "SHMEM_SYMMETRIC_SIZE=16M",
		"--env", "GOSHMEM_TEST_DIR=" + dir}
	for _, kv := range extra {
		args = append(args, "--env", kv)
	}
	args = append(args, wrapper, os.Args[0], "-test.run=^$")
	cmd := exec.CommandContext(context.Background(), script, args...)
	var out testproc.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if during != nil {
		during(dir)
	}
	err = cmd.Wait()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String()
}

// netnsScenarios are the scenarios TestNetnsScenarios runs across two
// real hosts, 4 PEs: every scenario the route tests run with each (all
// of them pass at 4 PEs, whatever counts their own tests use;
// TestNetnsCoversScenarios keeps the list whole), and routes-tcp. Left
// out are the scenarios run by eachTimeout and eachWith, which need a
// short PE timeout or debug options of their own.
var netnsScenarios = []string{
	"atomics-contended", "barriers", "block-strided", "context-pipelines", "context-streams", "contexts",
	"cswap-race", "error-paths", "every-type", "fence-order", "finalize-concurrently", "finalize-wakes-waiters",
	"float-atomics", "lock-goroutines", "lock-mutex", "lock-state-freed", "many-nbi", "nbi-fetch", "put-signal",
	"put-signal-nbi", "slices-after-finalize", "slices-and-zero-length", "strided-and-nbi", "strided-bounds",
	"striped-transfers", "team-contexts", "team-malloc", "team-malloc-errors", "teams", "vector-waits",
	"wait-collective-misuse", "wait-from-misuse", "waits", "routes-tcp",
}

// The behavioural scenarios across two real hosts.
func TestNetnsScenarios(t *testing.T) {
	netnsAvailable(t)
	for _, name := range netnsScenarios {
		t.Run(name, func(t *testing.T) {
			code, out := netnsJob(t, name, nil, nil)
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
		})
	}
}

// Every scenario a route test runs with each is in netnsScenarios: a new
// one is run across real hosts too, or this fails. (It reads this
// package's test sources; it needs no namespaces.)
func TestNetnsCoversScenarios(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	in := make(map[string]bool, len(netnsScenarios))
	for _, n := range netnsScenarios {
		in[n] = true
	}
	re := regexp.MustCompile(`\beach\(t, "([a-z0-9-]+)"`)
	found := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllSubmatch(b, -1) {
			found++
			if !in[string(m[1])] {
				t.Errorf("%s runs scenario %q with each, but TestNetnsScenarios does not run it across hosts (netnsScenarios)", f, m[1])
			}
		}
	}
	if found < 30 {
		t.Fatalf("found only %d each(t, ...) calls in the test sources: the pattern no longer matches them", found)
	}
}

// Every route is what the placement says: shm within a namespace, tcp
// across, with the peer's namespace address.
var _ = register("routes-tcp", func(pe *shmem.PE) error {
	in := pe.Info()
	for _, r := range in.Routes {
		want := "tcp"
		if r.PE == pe.MyPE() {
			want = "self"
		} else if r.PE/2 == pe.MyPE()/2 {
			want = "shm"
		}
		if os.Getenv("GOSHMEM_NETNS") == "" && want == "tcp" {
			continue // not placed across namespaces
		}
		if r.Kind != want {
			return fmt.Errorf("route to PE %d is %s, want %s", r.PE, r.Kind, want)
		}
		if want == "tcp" && !strings.HasPrefix(r.Addr, fmt.Sprintf("10.77.0.%d:", r.PE/2+1)) {
			return fmt.Errorf("route to PE %d goes to %s", r.PE, r.Addr)
		}
	}
	return nil
})

// A job under 5% random packet loss between the hosts still gets exact
// results (TCP retransmits; nothing above it may assume otherwise).
func TestNetnsLoss(t *testing.T) {
	script := netnsAvailable(t)
	if out, err := exec.Command(script, "loss", "g2", "5").CombinedOutput(); err != nil {
		t.Fatalf("cannot add loss rules (.ci/run installs nftables): %v %s", err, out)
	}
	defer exec.Command(script, "heal", "g2").Run()
	for _, name := range []string{"every-type", "put-signal", "cswap-race", "lock-mutex", "lock-goroutines",
		"waits", "barriers", "contexts", "many-nbi", "teams", "striped-transfers"} {
		start := time.Now()
		code, out := netnsJob(t, name, nil, nil)
		if code != 0 {
			t.Fatalf("%s under 5%% loss: exit %d:\n%s", name, code, out)
		}
		t.Logf("%s under 5%% loss: %v", name, time.Since(start))
	}
}

// A PE that loops barriers until its peers vanish.
var _ = register("barrier-loop", func(pe *shmem.PE) error {
	ready := filepath.Join(os.Getenv("GOSHMEM_TEST_DIR"), fmt.Sprintf("ready-%d", pe.MyPE()))
	for i := 0; ; i++ {
		if err := pe.BarrierAll(); err != nil {
			return err
		}
		if i == 100 {
			os.WriteFile(ready, nil, 0o644)
		}
		if i > 1_000_000 {
			return fmt.Errorf("never cut off")
		}
	}
})

// A partition between the hosts ends the job with an error naming a lost
// peer or a timeout, within the heartbeat and wait bounds: never a hang.
func TestNetnsPartition(t *testing.T) {
	script := netnsAvailable(t)
	start := time.Now()
	var cut time.Time
	code, out := netnsJob(t, "barrier-loop", []string{"GOSHMEM_HEARTBEAT=200ms"}, func(dir string) {
		deadline := time.Now().Add(60 * time.Second)
		for {
			if _, err := os.Stat(filepath.Join(dir, "ready-3")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Error("the job never reported ready")
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if b, err := exec.Command(script, "partition", "g1", "g2").CombinedOutput(); err != nil {
			t.Errorf("partition: %v %s", err, b)
		}
		cut = time.Now()
	})
	exec.Command(script, "heal", "g1").Run()
	t.Logf("job ended %v after the partition (%v in all), code %d", time.Since(cut), time.Since(start), code)
	if code == 0 {
		t.Fatalf("a partitioned job exited 0:\n%s", out)
	}
	if !strings.Contains(out, "peer lost") && !strings.Contains(out, "timeout") {
		t.Fatalf("the job did not say a peer was lost or a wait timed out:\n%s", out)
	}
}
