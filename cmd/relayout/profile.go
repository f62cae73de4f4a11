package main

import (
	"bytes"
	"fmt"
	"os"
	"runtime/metrics"
	"runtime/pprof"
	"runtime/trace"
	"time"
)

// startProfile writes a CPU profile to $RELAYOUT_CPUPROFILE, an execution
// trace (where wall time waits: go tool trace) to $RELAYOUT_TRACE and heap
// profiles every 2 s to $RELAYOUT_MEMPROFILE.N when set (for benchmarking
// and memory work; undocumented; RELAYOUT_MEMPROFILE_EVERY sets another
// interval, such as 300ms), and one more to $RELAYOUT_MEMPROFILE.final at
// the end, whose allocation counts cover the whole run.
func startProfile() func() {
	stop := func() {}
	if p := os.Getenv("RELAYOUT_CPUPROFILE"); p != "" {
		if f, err := os.Create(p); err == nil {
			pprof.StartCPUProfile(f)
			stop = func() { pprof.StopCPUProfile(); f.Close() }
		}
	}
	if p := os.Getenv("RELAYOUT_TRACE"); p != "" {
		if f, err := os.Create(p); err == nil && trace.Start(f) == nil {
			prev := stop
			stop = func() { trace.Stop(); f.Close(); prev() }
		}
	}
	if p := os.Getenv("RELAYOUT_MEMPROFILE"); p != "" {
		every := 2 * time.Second
		if d, err := time.ParseDuration(os.Getenv("RELAYOUT_MEMPROFILE_EVERY")); err == nil && d > 0 {
			every = d
		}
		done := make(chan struct{})
		go func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				case <-time.After(every):
				}
				if f, err := os.Create(fmt.Sprintf("%s.%d", p, i)); err == nil {
					pprof.Lookup("heap").WriteTo(f, 0)
					f.Close()
				}
			}
		}()
		prev := stop
		stop = func() {
			close(done)
			// One more at the end: its alloc_space covers the whole run.
			if f, err := os.Create(p + ".final"); err == nil {
				pprof.Lookup("heap").WriteTo(f, 0)
				f.Close()
			}
			prev()
		}
	}
	if p := os.Getenv("RELAYOUT_MEMSTATS"); p != "" {
		done := make(chan struct{})
		go memStats(p, done)
		prev := stop
		stop = func() { close(done); prev() }
	}
	return stop
}

// memStats appends, every 200 ms, the process's anonymous and file-backed
// resident memory beside the Go runtime's own accounting, in MiB, to file p.
func memStats(p string, done chan struct{}) {
	f, err := os.Create(p)
	if err != nil {
		return
	}
	defer f.Close()
	names := []string{"/memory/classes/total:bytes", "/memory/classes/heap/released:bytes", "/memory/classes/heap/objects:bytes",
		"/memory/classes/heap/free:bytes", "/memory/classes/heap/unused:bytes", "/memory/classes/heap/stacks:bytes", "/memory/classes/os-stacks:bytes", "/memory/classes/metadata/other:bytes", "/memory/classes/other:bytes"}
	samples := make([]metrics.Sample, len(names))
	for i, n := range names {
		samples[i].Name = n
	}
	fmt.Fprintln(f, "t anon file total released objects free unused stacks osstacks meta other")
	t0 := time.Now()
	for {
		select {
		case <-done:
			return
		case <-time.After(200 * time.Millisecond):
		}
		st, _ := os.ReadFile("/proc/self/status")
		var anon, file int64
		for _, line := range bytes.Split(st, []byte("\n")) {
			fmt.Sscanf(string(line), "RssAnon: %d", &anon)
			fmt.Sscanf(string(line), "RssFile: %d", &file)
		}
		metrics.Read(samples)
		fmt.Fprintf(f, "%.1f %d %d", time.Since(t0).Seconds(), anon>>10, file>>10)
		for _, s := range samples {
			fmt.Fprintf(f, " %d", s.Value.Uint64()>>20)
		}
		fmt.Fprintln(f)
	}
}
