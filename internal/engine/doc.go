// Package engine lets a goshmem program run unchanged under the job
// engines users already have: Open MPI's mpirun, MPICH's mpiexec.hydra
// (or any PMI-1 server) and Slurm's srun, with or without --mpi=pmi2.
// shmem.Init uses it when goshrun's own variables are absent.
//
// Detect reads rank, size, local rank and local size from the engine's
// environment (detect.go has the variables and their order). Start runs
// the job's rendezvous: rank 0 starts a boot server (package boot, the
// same protocol goshrun serves) and every PE dials it with the job id and
// the job key. The address is published through, in order:
// GOSHMEM_RENDEZVOUS (host:port, rank 0 listens there); the PMI-1 KVS
// where the engine serves PMI (pmi.go: put, barrier, get over PMI_FD or
// PMI_PORT); a port derived from the Slurm job and step ids on the
// step's first node (plain srun); an abstract Unix socket named by the
// user and the job when every PE is on one node (Open MPI, which serves
// only PMIx). The job key comes from GOSHMEM_KEY or the user's key file
// (key.go).
//
// # Why not PMIx
//
// Open MPI 4 and newer Slurm serve PMIx, a binary protocol over a Unix
// socket whose client is, in practice, the C library libpmix: its wire
// format is versioned per release and not specified independently, and
// speaking it from Go means cgo (which goshmem avoids) or tracking that
// format by hand. What a PMIx client would add here is small: the
// address exchange rank 0's own rendezvous already does, an authenticated
// channel the engine already trusts (no key file needed), and event
// notification of a dead rank (which the boot server's dropped
// connection gives at once). Open MPI jobs on one node need nothing
// more; across nodes they need GOSHMEM_RENDEZVOUS.
package engine
