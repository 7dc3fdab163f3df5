//go:build race

package collective

const raceOn = true
