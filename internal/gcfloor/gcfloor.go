// Package gcfloor keeps Go's collector from running while the live heap is
// small. GOGC sets the next heap goal in proportion to the live heap: at
// the GOGC 30 a run uses, a live heap of 15 MB is collected after every
// 5 MB allocated. Parsing 10,000 input footers allocates gigabytes of
// short-lived thrift structures with a heap that small, and the run
// collected 1,100 times before it read a row (docs/benchmarks.md). A floor
// makes the goal at least the live heap plus a fixed number of bytes, so
// a small heap is collected as often as its allocations make worthwhile,
// and a large one at the GOGC the caller chose.
//
// The runtime has no such setting (the soft memory limit bounds the heap
// from above, not below), so the floor is kept by a tuner: after each
// collection it reads the live heap (runtime/metrics) and sets the GOGC
// that puts the next goal at max(live x (1 + gogc/100), live + floor).
// The soft memory limit still applies: the runtime takes the lower of the
// two goals, so a floor never lets the heap pass it.
package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// maxPercent bounds the GOGC the tuner sets (a heap of a few KB would
// otherwise ask for millions of percent).
const maxPercent = 100_000

var liveMetric = []metrics.Sample{{Name: "/gc/heap/live:bytes"}}

// Tuner holds the floor while it runs. Its zero value is not usable; see
// Start.
type Tuner struct {
	percent int    // the caller's GOGC, used above the floor
	floor   uint64 // bytes
	stopped atomic.Bool
	mu      sync.Mutex // serializes adjust and Stop's restore
	prev    int        // GOGC before Start, restored by Stop
	armed   bool       // a sentinel is waiting for a collection
	// Adjusted counts the collections after which the tuner ran (tests).
	Adjusted atomic.Int64
}

// sentinel is an object whose only purpose is to become unreachable: its
// cleanup runs after the collection that found it so. It holds a pointer,
// so it is not placed by the tiny allocator (whose objects may never be
// cleaned up).
type sentinel struct {
	p *int
	_ [24]byte
}

// Start sets GOGC to percent with a floor of floor bytes over the live
// heap, until Stop. floor <= 0 sets percent alone.
func Start(percent int, floor int64) *Tuner {
	t := &Tuner{percent: percent, floor: uint64(max(floor, 0))}
	t.prev = debug.SetGCPercent(percent)
	if t.floor > 0 {
		t.adjust()
		t.arm()
	}
	return t
}

// Stop ends the tuning and restores the GOGC Start found. It may be called
// more than once.
func (t *Tuner) Stop() {
	if t.stopped.Swap(true) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	debug.SetGCPercent(t.prev)
}

// Set changes the GOGC used above the floor, and the floor (0: none).
func (t *Tuner) Set(percent int, floor int64) {
	t.mu.Lock()
	t.percent = percent
	t.floor = uint64(max(floor, 0))
	if t.floor == 0 {
		if !t.stopped.Load() {
			debug.SetGCPercent(percent)
		}
		t.mu.Unlock()
		return
	}
	rearm := !t.armed
	t.mu.Unlock()
	t.adjust()
	if rearm {
		t.arm()
	}
}

// arm allocates a sentinel whose cleanup adjusts GOGC and arms the next.
func (t *Tuner) arm() {
	t.mu.Lock()
	t.armed = true
	t.mu.Unlock()
	s := &sentinel{}
	runtime.AddCleanup(s, func(t *Tuner) {
		t.mu.Lock()
		t.armed = false
		done := t.stopped.Load() || t.floor == 0 // Set arms again when a floor is set
		t.mu.Unlock()
		if done {
			return
		}
		t.adjust()
		t.arm()
	}, t)
}

// adjust sets the GOGC that puts the next goal at the larger of the
// caller's GOGC and the floor over the live heap.
func (t *Tuner) adjust() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped.Load() || t.floor == 0 {
		return
	}
	metrics.Read(liveMetric)
	var live uint64
	if liveMetric[0].Value.Kind() == metrics.KindUint64 {
		live = liveMetric[0].Value.Uint64()
	}
	debug.SetGCPercent(Percent(t.percent, t.floor, live))
	t.Adjusted.Add(1)
}

// Percent is the GOGC whose goal over a live heap of live bytes is the
// larger of percent's and live + floor.
func Percent(percent int, floor, live uint64) int {
	if percent < 0 {
		return percent // collection off stays off
	}
	if live == 0 {
		return maxPercent
	}
	p := floor * 100 / live
	if p <= uint64(percent) {
		return percent
	}
	return int(min(p, maxPercent))
}
