// Command pe is the test PE of package launch: it joins the job the
// launcher environment describes, runs one Allgather of its rank, and
// then does what PE_TEST_MODE says for its rank.
//
// PE_TEST_MODE is a comma-separated list of rank=mode or *=mode (the
// default for ranks not listed; "ok" if none). Modes:
//
//	ok          Close, exit 0
//	exit3       Close, exit 3
//	nobye       exit 0 without Close
//	kill9       kill itself with SIGKILL
//	sleep       sleep forever
//	sleepchild  start a child that sleeps forever, then sleep forever
//	ignoreterm  ignore SIGTERM, sleep forever
//	termok      on SIGTERM print "terminated" and exit 0
//	exit7       GlobalExit(7): Exit(7), then exit 7
//	exit0       GlobalExit(0): Exit(0), then exit 0
//	print       print lines to stdout and stderr in pieces, Close, exit 0
//	env         print the launcher variables and PE_TEST_EXTRA, Close, exit 0
//	kill9slow   start a child that keeps this PE's output open for 0.4 s,
//	            then kill itself with SIGKILL: the launcher reaps it late
//	lostexit7   wait until the boot server reports a lost PE, then exit 7
//	            (a survivor that fails because a peer died)
//
// If PE_TEST_PIDDIR is set, the PE writes its pid (and its child's) to
// PE_TEST_PIDDIR/<rank> after the Allgather, and waits until every PE
// has written its file before it acts on its mode.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goshmem/goshmem/internal/boot"
)

func main() {
	if os.Getenv("PE_TEST_CHILD") != "" {
		if d, err := time.ParseDuration(os.Getenv("PE_TEST_CHILD_FOR")); err == nil {
			time.Sleep(d)
			os.Exit(0)
		}
		sleepForever()
	}
	env, ok, err := boot.ParseEnv(os.LookupEnv)
	if err != nil || !ok {
		fail("environment: ok=%v %v", ok, err)
	}
	mode := modeFor(env.Rank)
	if mode == "nojoin" {
		os.Exit(0) // never dials the boot server
	}
	if mode == "termok" {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		go func() {
			<-sig
			fmt.Println("terminated")
			os.Exit(0)
		}()
	}
	if mode == "ignoreterm" {
		signal.Ignore(syscall.SIGTERM)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := boot.Dial(ctx, env.Rendezvous, env.JobID, env.Key, env.Rank, env.Size)
	if err != nil {
		fail("dial: %v", err)
	}
	parts, err := c.Allgather(ctx, []byte(strconv.Itoa(env.Rank)))
	if err != nil {
		fail("allgather: %v", err)
	}
	for r, p := range parts {
		if string(p) != strconv.Itoa(r) {
			fail("part %d = %q", r, p)
		}
	}
	pids := []int{os.Getpid()}
	if mode == "sleepchild" || mode == "kill9slow" {
		child := exec.Command(os.Args[0])
		child.Env = append(os.Environ(), "PE_TEST_CHILD=1")
		if mode == "kill9slow" {
			child.Env = append(child.Env, "PE_TEST_CHILD_FOR=400ms")
			child.Stdout, child.Stderr = os.Stdout, os.Stderr
		}
		if err := child.Start(); err != nil {
			fail("child: %v", err)
		}
		pids = append(pids, child.Process.Pid)
	}
	if dir := os.Getenv("PE_TEST_PIDDIR"); dir != "" {
		var b strings.Builder
		for _, p := range pids {
			fmt.Fprintln(&b, p)
		}
		tmp := filepath.Join(dir, "."+strconv.Itoa(env.Rank))
		os.WriteFile(tmp, []byte(b.String()), 0o644)
		os.Rename(tmp, filepath.Join(dir, strconv.Itoa(env.Rank)))
		// Wait for every PE's file, so that a test sees all pids even
		// when this PE is about to end the job.
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if files, _ := filepath.Glob(filepath.Join(dir, "[0-9]*")); len(files) >= env.Size {
				break
			}
		}
	}

	switch mode {
	case "ok":
		c.Close()
	case "exit3":
		c.Close()
		os.Exit(3)
	case "nobye":
		os.Exit(0)
	case "kill9", "kill9slow":
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		sleepForever()
	case "lostexit7":
		<-c.Trouble()
		os.Exit(7)
	case "sleep", "sleepchild", "ignoreterm", "termok":
		sleepForever()
	case "exit7", "exit0":
		code := 7
		if mode == "exit0" {
			code = 0
		}
		if err := c.Exit(code); err != nil {
			fail("exit: %v", err)
		}
		os.Exit(code)
	case "print":
		os.Stdout.WriteString("hello ")
		time.Sleep(10 * time.Millisecond)
		os.Stdout.WriteString("from " + strconv.Itoa(env.Rank) + "\nsecond line\nno newline")
		os.Stderr.WriteString("err line\n")
		c.Close()
	case "env":
		for _, k := range []string{boot.EnvRank, boot.EnvSize, boot.EnvJobID, boot.EnvRendezvous, boot.EnvLauncher, boot.EnvHost, "PE_TEST_EXTRA"} {
			fmt.Printf("%s=%s\n", k, os.Getenv(k))
		}
		fmt.Printf("keylen=%d\n", len(os.Getenv(boot.EnvKey)))
		c.Close()
	default:
		fail("unknown mode %q", mode)
	}
}

func modeFor(rank int) string {
	mode := "ok"
	for _, item := range strings.Split(os.Getenv("PE_TEST_MODE"), ",") {
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			continue
		}
		if k == strconv.Itoa(rank) {
			return v
		}
		if k == "*" {
			mode = v
		}
	}
	return mode
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pe: "+format+"\n", args...)
	os.Exit(2)
}

func sleepForever() {
	for {
		time.Sleep(time.Hour)
	}
}
