// Package benchmarks will hold goshbench, an OSU-style suite that
// measures goshmem next to the machine's own limits measured in the same
// run. Until it lands, the shared-memory benchmarks are the go test
// benchmarks of package shmem:
//
//	go test -run '^$' -bench . ./shmem/
package benchmarks
