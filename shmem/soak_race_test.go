//go:build race

package shmem_test

// soakRace: the race detector is on. Its shadow memory and history grow
// with the run (64 to 131 MiB of RSS over 32 rounds), so the soak does
// not judge RSS then.
const soakRace = true
