//go:build race

package hugepages

// raceEnabled: the race detector maps shadow memory for every heap
// allocation, so a resident set measures it too.
const raceEnabled = true
