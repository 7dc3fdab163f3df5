// Package suite holds goshbench's benchmarks and the machine limits they
// are held to, and runs them as the PEs of a goshbench job.
//
// The registry (registry.go) names every suite; each file registers a
// group: limits.go (the reference limits), rma.go (put and get latency,
// bandwidth and message rate), atomics.go, sync.go (barrier, WaitUntil
// ping-pong), ring.go (ring lane latency and message rate, each held to
// a plain put+signal measured in the same job and to the machine's
// limit), planned.go (suites whose runtime packages do not exist yet). Every suite runs on every PE of the job (SPMD); the harness in
// bench.go calibrates, repeats and times it, measuring the figure's
// limit in alternation with it, and PE 0 writes the raw repetitions for
// goshbench to summarise (package report).
//
// Caveats:
//   - The pairwise suites (OSU's osu_oshm_put, _get, _atomics, ...) run
//     in 2-PE jobs only; the others at every PE count.
//   - Limits that need a partner (cache-line and TCP round trips) run
//     between PEs 0 and 1; the other PEs of the job wait in a barrier.
//   - The ring suites run at their own sizes (8 B to 256 KiB) unless
//     the command line gives sizes, and enlarge the job's heap by one
//     figure's lanes (Config.HeapBytes).
//   - The raw cache-line spin yields the CPU after every 1024 checks
//     (about a microsecond), so that when PEs share a CPU it measures a
//     hand-over, not a time slice.
package suite
