// Command goshbench measures goshmem the way OSU Micro-Benchmarks
// measure OpenSHMEM, and holds every figure to a limit of this machine
// measured in the same run.
//
//	go run ./benchmarks/cmd/goshbench            # from the repository root
//	goshbench -quick                             # a smoke run of a few seconds
//	goshbench -transport shm,tcp                 # shared memory, then TCP loopback (netmesh)
//	goshbench -suites rma -sizes 1-4M -json out.json -svg plots/
//	goshbench -list                              # every suite and group
//
// goshbench starts each job itself, as separate PE processes through
// the goshmem launcher (internal/launch): it re-executes its own binary
// with GOSHBENCH_PE=1, and each PE calls shmem.Init; in a tcp job each PE
// has a host identity of its own, so that every pair talks through
// netmesh over TCP loopback. It prints a table
// on stdout (progress on stderr), and optionally writes JSON (-json),
// Go benchmark lines for benchstat (-bench-format) and SVG plots (-svg).
// docs/performance.md describes the method.
package main

import (
	"os"

	"github.com/goshmem/goshmem/benchmarks/suite"
)

func main() {
	if suite.IsPE() {
		os.Exit(suite.PEMain())
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
