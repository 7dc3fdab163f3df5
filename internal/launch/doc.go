// Package launch starts a goshmem job of N PE processes on this machine:
// the engine behind cmd/goshrun.
//
// Job.Run builds the program if it is a Go package (BuildLog: it says so
// when the build takes more than a second, and its directory does not
// outlive a killed launcher), starts a
// boot.Server on Job.Listen (127.0.0.1:0 by default) with a fresh job id (NewJobID) and key
// (NewKey), starts the N PEs, and supervises them until the job ends.
//
// # Environment contract
//
// Every PE gets os.Environ() (minus inherited GOSHMEM_ contract names),
// then Job.Env, then (names defined in package boot, read by shmem.Init
// through boot.ParseEnv):
//
//	GOSHMEM_RANK        boot.EnvRank        the PE's rank, 0 .. N-1
//	GOSHMEM_SIZE        boot.EnvSize        N
//	GOSHMEM_JOBID       boot.EnvJobID       the job id, "gosh-" + 16 hex digits
//	GOSHMEM_KEY         boot.EnvKey         the 32-byte job key, 64 hex digits
//	GOSHMEM_RENDEZVOUS  boot.EnvRendezvous  host:port of the boot server
//	GOSHMEM_LAUNCHER    boot.EnvLauncher    "goshrun"
//	GOSHMEM_HOST        boot.EnvHost        Job.Hosts[rank], only when Hosts is set
//	GOSHMEM_MACHINE_PES boot.EnvMachinePEs  N: every PE runs on this machine
//
// # Ending a job
//
// A PE fails when it exits non-zero, is killed by a signal, or its boot
// connection drops without Bye (a PE that exits 0 without closing its
// boot client fails too: it left its peers' rounds hanging). The first
// failure is reported in one line ("PE 2 exited with status 3", "PE 1
// killed by signal killed"); every other PE's process group then gets
// SIGTERM and, Job.Grace later, SIGKILL. Exit codes:
//
//	0                   every PE exited 0, or a PE called GlobalExit(0)
//	status              the first failed PE's exit status
//	128 + n             the first failed PE was killed by signal n, or the
//	                    launcher forwarded signal n (Job.Signals)
//	code                a PE called GlobalExit(code); it is not sent SIGTERM
//	1 (CodeFailure)     a PE lost its boot connection but exited 0 or kept
//	                    running; the job could not start; ctx was done
//	124 (CodeTimeout)   Job.Timeout passed
//
// Each PE leads its own process group (signals reach what it started)
// and has a parent-death signal of SIGKILL, so PEs die with the launcher
// even when it is killed with SIGKILL. Processes a PE started die with
// the group when the launcher ends the job; after an uncatchable kill of
// the launcher they may survive.
//
// # Across hosts
//
// With Job.Remote, Run starts no PE itself: for each host it runs, through
// Job.Rsh, goshrun in agent mode (Job.Join), which starts that host's PEs
// with the job's id, key (sent on the agent's standard input) and
// rendezvous, supervises them as Run does, and ends them when its input
// closes (the launching goshrun is gone). Exit codes pass through the
// agents; the launcher names the host whose agent failed first.
//
// # Caveats
//
//   - PEs get no standard input.
//   - The job key is in the PEs' environment, readable by the same user.
//   - With TagOutput, a line longer than 64 KiB is split into tagged
//     pieces, and a final line without a newline gets one.
//   - Untagged output to an *os.File goes straight to that file, as in a
//     shell; other writers receive each Write whole, under one lock.
package launch
