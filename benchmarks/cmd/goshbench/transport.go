package main

import (
	"fmt"
	"strings"
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
}

// transports lists what goshbench knows. tcp gives every PE its own
// host identity, so that goshmem routes them through netmesh over TCP
// loopback; until netmesh lands it is reported, never measured.
var transports = []transport{
	{name: "shm"},
	{name: "tcp", missing: "not available until netmesh lands (this build has no remote path; PEs on different hosts refuse to start)",
		hosts: func(n int) []string {
			h := make([]string, n)
			for i := range h {
				h[i] = fmt.Sprintf("goshbench-pe%d", i)
			}
			return h
		}},
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
			return nil, fmt.Errorf("goshbench: -transport %q: %q is not one of shm, tcp", s, f)
		}
		out = append(out, f)
	}
	return out, nil
}
