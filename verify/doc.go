// Package verify holds the project-wide checks: the import rules of the
// layers (layers_test.go) and the index of the protocol checks
// (index_test.go). Its subpackage explore is the explicit-state explorer
// that the protocol checks use.
//
// The protocol checks themselves do not live here: they call the
// packages' unexported functions and test-only hooks, which a test in
// this package cannot reach, so they live beside the code they drive,
// as TestExplore* in ring, shmem, netmesh and collective. `go test
// ./verify/...` runs the explorer's own tests, the import rules, and
// TestVerificationIndex, which fails when docs/verification.md's index
// does not list exactly the TestExplore* functions there are. The
// checks run with
//
//	go test -run 'Explore|TestPartition|TestRingSchedule' ./verify/... ./ring ./shmem ./netmesh ./collective
//
// (GOSHMEM_EXPLORE_DEEP=1 for the deeper bounds). docs/verification.md
// lists every property, its bounds, the states explored, the mutants
// each check catches, and the fuzz targets.
package verify
