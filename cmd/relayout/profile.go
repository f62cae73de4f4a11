package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"time"
)

// startProfile writes a CPU profile to $RELAYOUT_CPUPROFILE and heap
// profiles every 2 s to $RELAYOUT_MEMPROFILE.N when set (for benchmarking
// and memory work; undocumented).
func startProfile() func() {
	stop := func() {}
	if p := os.Getenv("RELAYOUT_CPUPROFILE"); p != "" {
		if f, err := os.Create(p); err == nil {
			pprof.StartCPUProfile(f)
			stop = func() { pprof.StopCPUProfile(); f.Close() }
		}
	}
	if p := os.Getenv("RELAYOUT_MEMPROFILE"); p != "" {
		done := make(chan struct{})
		go func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				case <-time.After(2 * time.Second):
				}
				if f, err := os.Create(fmt.Sprintf("%s.%d", p, i)); err == nil {
					pprof.Lookup("heap").WriteTo(f, 0)
					f.Close()
				}
			}
		}()
		prev := stop
		stop = func() { close(done); prev() }
	}
	return stop
}
