//go:build !race

package netmesh

const raceEnabled = false
