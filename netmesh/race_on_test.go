//go:build race

package netmesh

const raceEnabled = true
