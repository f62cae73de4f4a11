package memlimit

import (
	"os"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"
)

// TestKeeperFollowsFileBackedMemory: the soft limit is the base while the
// binary's resident pages leave room for it, falls by what they hold
// beyond that, never below half the limit, comes back when they shrink,
// and is restored by Stop.
func TestKeeperFollowsFileBackedMemory(t *testing.T) {
	const mib = 1 << 20
	before := debug.SetMemoryLimit(-1)
	var file atomic.Int64
	file.Store(30 * mib)
	k := start(128*mib, 80*mib, 12*mib, time.Millisecond, func() (int64, bool) { return file.Load(), true })
	wait := func(want int64) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if k.Limit() == want && debug.SetMemoryLimit(-1) == want {
				return
			}
		}
		t.Fatalf("soft limit %d MiB (runtime %d MiB), want %d MiB", k.Limit()/mib, debug.SetMemoryLimit(-1)/mib, want/mib)
	}
	wait(80 * mib) // 128 - 30 - 12 = 86: the base is lower
	file.Store(41 * mib)
	wait(75 * mib)
	file.Store(100 * mib)
	wait(64 * mib) // half the limit at least
	file.Store(20 * mib)
	wait(80 * mib)
	k.Stop()
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Fatalf("after Stop the soft limit is %d, was %d", got, before)
	}
}

// TestParseRssFile reads RssFile from this process's status and refuses
// lines it does not know.
func TestParseRssFile(t *testing.T) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatalf("this test needs Linux's /proc: %v", err)
	}
	n, ok := parseRssFile(b)
	if !ok || n <= 0 {
		t.Fatalf("RssFile %d, %v in\n%s", n, ok, b)
	}
	for _, s := range []string{"Name:\tx\nRssFile:\t12 kB\nRssShmem:\t0 kB\n", "Name:\tx\nRssFile:\t12 kB"} {
		if n, ok := parseRssFile([]byte(s)); !ok || n != 12<<10 {
			t.Fatalf("%q: %d, %v", s, n, ok)
		}
	}
	for _, s := range []string{"Name:\tx\n", "Name:\tx\nRssFile:\t12 MB\n", "Name:\tx\nRssFile:\tmany kB\n", "Name:\tx\nRssFile:\t-4 kB\n"} {
		if n, ok := parseRssFile([]byte(s)); ok {
			t.Fatalf("%q: read %d", s, n)
		}
	}
}
