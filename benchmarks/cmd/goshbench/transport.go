package main

import (
	"fmt"
	"strings"

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
}

// transports lists what goshbench knows. tcp gives every PE its own
// host identity (launch.Job.Hosts, GOSHMEM_HOST), so that goshmem routes
// every pair through netmesh over TCP loopback; the PEs check that they
// got the routes their transport names (suite.checkRoutes).
var transports = []transport{
	{name: suite.TransportSHM},
	{name: suite.TransportTCP,
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
