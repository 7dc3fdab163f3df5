// Package benchmarks holds goshbench, an OSU-style suite that measures
// goshmem next to the machine's own limits measured in the same run. It
// needs nothing beyond the runtime's own dependencies (plots are
// hand-written SVG), so runtime users inherit nothing from it.
//
// Run, from the repository root:
//
//	go run ./benchmarks/cmd/goshbench                    # default suites, 2 and 4 PEs, shared memory
//	go run ./benchmarks/cmd/goshbench -transport shm,tcp # and over TCP loopback through netmesh
//	.ci/netns.sh up 4; .ci/netns.sh run g1 goshbench -transport netns  # across network namespaces (root)
//	go run ./benchmarks/cmd/goshbench -quick             # smoke run, seconds
//	go test ./benchmarks/...                             # -quick over shm and tcp, plus the JSON schema check
//
// Layout:
//
//	cmd/goshbench  flags, jobs (through internal/launch), outputs
//	suite          the registry, the suites, the limits, the PE side of a job
//	report         records and the JSON schema, statistics, table, benchmark lines, SVG plots
//	results        the runs quoted in docs/performance.md (goshbench-1..3 and their medians;
//	               2026-11-29/: the earlier runs over shm, tcp and the ring suites;
//	               2026-12-03/: goshmem beside Open MPI and OSHMEM in the same sittings)
//	peers          mpi_p2p.c, mpi_coll.c (Open MPI two-sided messages and collectives),
//	               oshmem_osu.c (OSHMEM one-sided operations and collectives), and run.sh,
//	               which builds and runs one of them: the C peers timed by the OSU
//	               definitions, to measure them beside goshbench (C, not built by go)
//
// docs/performance.md describes the method and the figures.
package benchmarks
