package pipeline

import (
	"os"
	"runtime"
	"time"

	"github.com/relayout/relayout/internal/gcfloor"
	"github.com/relayout/relayout/internal/memlimit"
	"github.com/relayout/relayout/plan"
	"github.com/relayout/relayout/writer"
)

// heldMemory is a process's memory regime while it runs a job or a step's
// tasks (holdMemory): Go's soft memory limit under --memory-limit, a low
// GC target, and idle zstd encoders kept where the limit has room.
type heldMemory struct {
	ml       *memlimit.Keeper
	gc       *gcfloor.Tuner // nil when GOGC is set
	encoders int            // KeepIdleEncoders before
}

// holdMemory sets the regime for a process given limit bytes and parallel
// goroutines, until release; floored, the GC target of a run (below).
//
// A soft memory limit plus, floored, a low GC target: decoded columns are
// large and short-lived, and collecting early keeps peak RSS near the
// live data (measured: GOGC 30 was both faster and 40% smaller than 100
// for run).
// Go's limit covers the heap and runtime, not the binary's resident text,
// so it leaves room for it: --memory-limit applies to the whole process.
// UnitHeadroom stays inside it: with it left out too (a 64 MiB soft limit
// at --memory-limit 128MiB) the heap sat at the limit, and the runtime
// spent 40-50% of a run's CPU scavenging pages it would fault back in and
// collecting (measured at 1x and 4x the generated log: CPU 36 -> 21 s and
// ~290 -> 145 s; peak RSS +3 MiB at 1x). The binary's resident pages vary
// by build and page cache (29 to 44 MiB at 128 MiB, where the reserve
// leaves 48 for them and the runtime): the soft limit follows them
// (internal/memlimit).
func holdMemory(limit int64, parallel int, floored bool) *heldMemory {
	h := &heldMemory{ml: memlimit.Start(limit, max(limit-plan.RuntimeReserve, limit/2), fileMargin, 100*time.Millisecond)}
	if floored && os.Getenv("GOGC") == "" {
		h.gc = gcfloor.Start(30, gcFloor(limit))
	}
	// Idle zstd encoders (about 2.5 MiB each) kept through the collections
	// this limit makes frequent: one per 256 MiB of it, up to one per
	// goroutine (none at 128 MiB, where their memory is the unit's).
	h.encoders = writer.KeepIdleEncoders(min(max(parallel, 1), int(limit/(256<<20))))
	return h
}

// spilling sets the GC target of a process that holds a unit or a row
// group at a time, its heap bounded by the soft limit: GOGC 50 and no
// floor. At GOGC 30 the collector ran 100 times a second. 50 measured
// fastest (run at --memory-limit 128MiB, the 1M-row log: 5.7 -> 4.6 s;
// 4x: 23.5 -> 21.4 s; 100 was slower at 4x, the heap at the limit and its
// pages returned and faulted back) and the peak RSS grew 5 MB. No floor
// either: the soft limit bounds the heap, and a floor let it grow 8 MiB
// nearer the limit (--memory-limit 128MiB).
func (h *heldMemory) spilling() {
	if h.gc != nil {
		h.gc.Set(50, 0) // release restores what was set before
	}
}

// release restores what holdMemory set.
func (h *heldMemory) release() {
	writer.KeepIdleEncoders(h.encoders)
	if h.gc != nil {
		h.gc.Stop()
	}
	h.ml.Stop()
}

// HoldStepMemory holds a step's process (map, detect, reduce, commit, a
// key task) to its --memory-limit: Go's soft limit under it, as run's. A
// process running several tasks at once holds its whole limit once. Its
// GC target stays Go's (or GOGC): a task holds a row group, a unit or a
// file at a time, and below the soft limit GOGC 100 measured as fast as
// run's targets at --memory-limit 128MiB and a few percent faster at 4GiB.
// Without the soft limit a map task of the 1M-row log at --memory-limit
// 128MiB peaked at 212-227 MB and a reduce task at 150-178 MB; with it,
// 110-113 MB each. It returns the release.
func HoldStepMemory(limit int64, parallel int) (release func()) {
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	return holdMemory(limit, parallel, false).release
}
