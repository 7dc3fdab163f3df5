// Package collective will hold barrier, broadcast, reductions,
// all-reduce, collect, fcollect, all-to-all and scans over teams, built
// from the shmem API alone (put, get, atomics, wait-until, barrier) so
// that every algorithm runs unchanged over shared memory, TCP or a mix.
// Not built yet.
package collective
