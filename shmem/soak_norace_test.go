//go:build !race

package shmem_test

const soakRace = false
