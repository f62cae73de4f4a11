//go:build !race

package hugepages

const raceEnabled = false
