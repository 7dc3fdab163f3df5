//go:build race

package ring

const raceOn = true
