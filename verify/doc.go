// Package verify holds the project-wide checks: the import rules of the
// layers (layers_test.go). Its subpackage explore is the explicit-state
// explorer that the protocol checks use; those checks live beside the
// code they drive, as TestExplore* in ring, shmem, netmesh and
// collective, so that they call the packages' own unexported functions.
// docs/verification.md lists every property, its bounds, the states
// explored, the mutants each check catches, and the fuzz targets.
package verify
