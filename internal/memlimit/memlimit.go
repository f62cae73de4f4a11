// Package memlimit keeps Go's soft memory limit at what a process's own
// memory limit leaves after the memory Go does not account for: above all
// the binary's resident pages.
//
// Go's limit covers the heap and the runtime, not the executable's text
// and read-only data mapped from the page cache. How much of those is
// resident depends on how the kernel holds the binary in its page cache:
// the same code built six times peaked at 106 to 117 MB at --memory-limit
// 128MiB, the file-backed part 29 to 44 MiB (measured in
// docs/benchmarks.md), and one such build under load reached the limit. A
// fixed reserve for it is too small for some builds, so a Keeper reads the
// process's file-backed resident memory (RssFile in /proc/self/status)
// every interval and lowers the soft limit by what it holds beyond the
// reserve the plan counted.
package memlimit

import (
	"bytes"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"time"
)

// Keeper holds the soft limit while it runs; Stop restores the one set
// before Start.
type Keeper struct {
	limit, base, margin int64
	rss                 func() (int64, bool)
	mu                  sync.Mutex
	set                 int64
	prev                int64
	stop, done          chan struct{}
}

// Start sets the soft limit to base, and every interval to the lower of base
// and limit - RssFile - margin (at least limit/2): margin is what else
// the process holds outside Go's accounting, and the overshoot of a
// collector that lags under load. Where /proc/self/status has no RssFile
// (not Linux), the limit stays base.
func Start(limit, base, margin int64, every time.Duration) *Keeper {
	return start(limit, base, margin, every, rssFile)
}

func start(limit, base, margin int64, every time.Duration, rss func() (int64, bool)) *Keeper {
	k := &Keeper{limit: limit, base: base, margin: margin, rss: rss, stop: make(chan struct{}), done: make(chan struct{})}
	k.set = base
	k.prev = debug.SetMemoryLimit(base)
	k.adjust()
	go func() {
		defer close(k.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-k.stop:
				return
			case <-t.C:
				k.adjust()
			}
		}
	}()
	return k
}

// Limit is the soft limit set now.
func (k *Keeper) Limit() int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.set
}

// adjust sets the soft limit for the file-backed memory resident now.
func (k *Keeper) adjust() {
	file, ok := k.rss()
	if !ok {
		return
	}
	want := max(min(k.base, k.limit-file-k.margin), k.limit/2)
	k.mu.Lock()
	defer k.mu.Unlock()
	if want != k.set {
		k.set = want
		debug.SetMemoryLimit(want)
	}
}

// Stop stops adjusting and restores the soft limit set before Start.
func (k *Keeper) Stop() {
	close(k.stop)
	<-k.done
	k.mu.Lock()
	defer k.mu.Unlock()
	debug.SetMemoryLimit(k.prev)
}

// rssFile reads the process's file-backed resident memory.
func rssFile() (int64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	return parseRssFile(b)
}

// parseRssFile finds "RssFile: N kB" in a /proc/PID/status.
func parseRssFile(status []byte) (int64, bool) {
	i := bytes.Index(status, []byte("\nRssFile:"))
	if i < 0 {
		return 0, false
	}
	line := status[i+len("\nRssFile:"):]
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	f := bytes.Fields(line)
	if len(f) != 2 || string(f[1]) != "kB" {
		return 0, false
	}
	n, err := strconv.ParseInt(string(f[0]), 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n << 10, true
}
