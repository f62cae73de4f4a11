package gcfloor

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestPercent(t *testing.T) {
	for _, c := range []struct {
		percent     int
		floor, live uint64
		want        int
	}{
		{30, 64 << 20, 16 << 20, 400},   // a small heap: the floor, 64 MiB over 16
		{30, 64 << 20, 1 << 30, 30},     // a large one: GOGC 30 gives more than the floor
		{30, 64 << 20, 200 << 20, 32},   // just past the crossing (64/200 = 32%)
		{30, 64 << 20, 0, maxPercent},   // nothing live yet
		{30, 64 << 20, 100, maxPercent}, // a few bytes: capped
		{-1, 64 << 20, 16 << 20, -1},    // collection off stays off
		{50, 0, 16 << 20, 50},           // no floor
		{100, 64 << 20, 64 << 20, 100},  // equal: the caller's
		{30, 16 << 20, 40 << 20, 40},    // 16 MiB over 40 MiB
	} {
		if got := Percent(c.percent, c.floor, c.live); got != c.want {
			t.Errorf("Percent(%d, %d, %d) = %d, want %d", c.percent, c.floor, c.live, got, c.want)
		}
	}
}

// TestTunerKeepsTheFloor starts a tuner with a floor far above this test
// binary's small live heap, allocates garbage so that the collector runs,
// and checks that the GOGC in force is the floor's, that it followed the
// collections, that Set without a floor puts the caller's GOGC back, and
// that Stop restores the GOGC found at Start.
func TestTunerKeepsTheFloor(t *testing.T) {
	before := debug.SetGCPercent(77)
	defer debug.SetGCPercent(before)
	tu := Start(30, 256<<20)
	defer tu.Stop()
	if got := gogc(); got <= 30 {
		t.Fatalf("GOGC %d after Start with a 256 MiB floor over a small heap; want far above 30", got)
	}
	for i := 0; i < 5; i++ {
		runtime.GC()
	}
	waitAdjusted(t, tu, 3)
	if got := gogc(); got <= 30 {
		t.Fatalf("GOGC %d after collections; want the floor's, far above 30", got)
	}
	tu.Set(50, 0)
	if got := gogc(); got != 50 {
		t.Fatalf("GOGC %d after Set(50, 0), want 50", got)
	}
	n := tu.Adjusted.Load()
	runtime.GC()
	runtime.GC()
	if got := gogc(); got != 50 {
		t.Fatalf("GOGC %d after collections without a floor, want 50", got)
	}
	tu.Set(30, 256<<20) // a floor again: the tuner re-arms
	for i := 0; i < 5; i++ {
		runtime.GC()
	}
	waitAdjusted(t, tu, n+3)
	tu.Stop()
	if got := gogc(); got != 77 {
		t.Fatalf("GOGC %d after Stop, want the 77 set before Start", got)
	}
}

// gogc returns the GOGC in force.
func gogc() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// waitAdjusted waits until the tuner has run at least n times (cleanups
// run on their own goroutine after a collection).
func waitAdjusted(t *testing.T, tu *Tuner, n int64) {
	t.Helper()
	for i := 0; i < 200 && tu.Adjusted.Load() < n; i++ {
		runtime.GC()
		runtime.Gosched()
	}
	if got := tu.Adjusted.Load(); got < n {
		t.Fatalf("the tuner ran %d times over 200 collections, want at least %d", got, n)
	}
}
