//go:build !race

package collective

const raceOn = false
