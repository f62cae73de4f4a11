package main

import (
	"os"
	"runtime/pprof"
)

// startProfile writes a CPU profile to $RELAYOUT_CPUPROFILE when set (for
// benchmarking; undocumented).
func startProfile() func() {
	p := os.Getenv("RELAYOUT_CPUPROFILE")
	if p == "" {
		return func() {}
	}
	f, err := os.Create(p)
	if err != nil {
		return func() {}
	}
	pprof.StartCPUProfile(f)
	return func() { pprof.StopCPUProfile(); f.Close() }
}
