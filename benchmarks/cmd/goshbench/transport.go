package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/goshmem/goshmem/benchmarks/suite"
)

// transport is one way the PEs of a job can reach each other.
type transport struct {
	name string
	// missing, when set, says why this build cannot run the transport;
	// the run reports it instead of a figure.
	missing string
	// hosts gives the PEs host identities (launch.Job.Hosts); nil keeps
	// the machine's own, so same-host PEs map each other's heaps.
	hosts func(npes int) []string
	// place, when set, starts the PEs elsewhere than in this process's
	// network namespace: it writes what is needed into the job's
	// directory and returns the program to run instead of exe (given exe
	// as its arguments) and the address the boot server listens on. Its
	// error says why the job cannot run here.
	place func(npes int, dir, exe string) (program string, args []string, listen string, err error)
}

// transports lists what goshbench knows. tcp gives every PE its own
// host identity (launch.Job.Hosts, GOSHMEM_HOST), so that goshmem routes
// every pair through netmesh over TCP loopback; the PEs check that they
// got the routes their transport names (suite.checkRoutes).
var transports = []transport{
	{name: suite.TransportSHM},
	{name: suite.TransportTCP, hosts: hostsNamed(func(r int) string { return fmt.Sprintf("goshbench-pe%d", r) })},
	{name: suite.TransportNetns, hosts: hostsNamed(suite.NetnsHost), place: netnsPlace},
}

// hostsNamed gives PE r the host identity name(r).
func hostsNamed(name func(r int) string) func(npes int) []string {
	return func(npes int) []string {
		h := make([]string, npes)
		for r := range h {
			h[r] = name(r)
		}
		return h
	}
}

// Where .ci/netns.sh keeps its namespaces: the network namespace of host
// gi is /run/netns/gi (ip netns), its UTS namespace (its host name)
// netnsUTS/gi.
const (
	netnsDir = "/run/netns"
	netnsUTS = "/run/goshmem-uts"
)

// netnsPlace runs PE r in namespace g(r+1) of .ci/netns.sh, through a
// wrapper script that enters it (nsenter: root only). The launcher, and
// so goshbench, must run in g1 (.ci/netns.sh run g1 goshbench ...):
// the namespaces reach only each other, so the boot server listens on
// g1's address. The script needs the namespaces g1..g(npes).
func netnsPlace(npes int, dir, exe string) (string, []string, string, error) {
	const how = "run .ci/netns.sh up N (N >= PEs) and goshbench inside g1 as root: .ci/netns.sh run g1 goshbench -transport netns ..."
	for r := range npes {
		h := suite.NetnsHost(r)
		for _, p := range []string{filepath.Join(netnsDir, h), filepath.Join(netnsUTS, h)} {
			if _, err := os.Stat(p); err != nil {
				return "", nil, "", fmt.Errorf("no namespace %s for PE %d (%v): %s", h, r, err, how)
			}
		}
	}
	var mine, g1 syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/net", &mine); err != nil {
		return "", nil, "", fmt.Errorf("reading my network namespace: %w", err)
	}
	if err := syscall.Stat(filepath.Join(netnsDir, suite.NetnsHost(0)), &g1); err != nil {
		return "", nil, "", err
	}
	if mine.Dev != g1.Dev || mine.Ino != g1.Ino {
		return "", nil, "", fmt.Errorf("goshbench is not in namespace %s: %s", suite.NetnsHost(0), how)
	}
	script := filepath.Join(dir, "netns-place.sh")
	body := "#!/bin/sh\n# PE r runs in namespace g(r+1) (goshbench -transport netns)\nh=g$((GOSHMEM_RANK + 1))\n" +
		"exec nsenter --net=" + netnsDir + "/$h --uts=" + netnsUTS + "/$h -- \"$@\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		return "", nil, "", err
	}
	return script, []string{exe}, (&net.TCPAddr{IP: suite.NetnsIP(0)}).String(), nil
}

func lookupTransport(name string) *transport {
	for i := range transports {
		if transports[i].name == name {
			return &transports[i]
		}
	}
	return nil
}

func parseTransports(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if lookupTransport(f) == nil {
			return nil, fmt.Errorf("goshbench: -transport %q: %q is not one of shm, tcp, netns", s, f)
		}
		out = append(out, f)
	}
	return out, nil
}
