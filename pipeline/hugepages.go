package pipeline

import (
	"github.com/relayout/relayout/internal/hugepages"
	"github.com/relayout/relayout/source"
)

// hugePagesFloor is the smallest --memory-limit under which a process asks
// for huge pages: below it a 2 MiB page is a visible share of the budget.
const hugePagesFloor = 512 << 20

// decodedPerInput is how many decoded (Arrow) bytes an uncompressed input
// byte becomes, for sizing the heap a task expects (the 1M-row generated
// log: 270 decoded bytes per row from 220).
const decodedPerInput = 1.5

// keyPassHeld is what a key pass over tbl (rows of rowBytes uncompressed
// bytes) holds at once, for adviseHeap: up to parallel of its row groups
// decoded (their key columns; the first whole, for the encoding sample).
// Unadvised, the plan step of the 1M-row log faulted 17,000 4 KiB pages
// (0.15 s of system time of its 0.29 s); advised, 4,000 (0.05-0.11 s).
func keyPassHeld(tbl *source.Table, rowBytes float64, parallel int) int64 {
	return rowGroupsHeld(tbl.LargestRowGroup(), rowBytes, parallel)
}

// rowGroupsHeld is parallel row groups of rows rows of rowBytes
// uncompressed bytes, decoded (decodedPerInput).
func rowGroupsHeld(rows int64, rowBytes float64, parallel int) int64 {
	return int64(float64(rows*int64(max(parallel, 1))) * rowBytes * decodedPerInput)
}

// adviseHeap asks the kernel for transparent huge pages for the heap of a
// process that will hold about held decoded bytes at once, and returns
// the function that stops asking (internal/hugepages). Faulting a fresh
// heap in 4 KiB pages cost a quarter of a run's CPU on a VM
// (docs/benchmarks.md). It asks only with --huge-pages auto, where
// huge pages are worthwhile (hugepages.Worthwhile: not in a VM that gives
// free memory back to its host), with a
// --memory-limit of at least 512 MiB, and for processes whose decoded
// rows the plan holds to a fifth of the budget (an in-memory run; a map or
// reduce task): their measured peak is about 3x what they hold, so the
// coarser resident set of huge pages (about 10% more) stays within it.
// Tasks run together (RunOptions.Together) share one heap, so each asks
// for room for all of them: the first to ask makes it (the room is the
// process's; hugepages.AdviseGranted). The map tasks of the 1M-row log,
// two at a time, asked for one task's decoding (87 MB) while their heap
// grew to 220 MB: 30,000-36,000 4 KiB faults, and the first two tasks
// took twice as long as the next; with room for both and their shuffles
// (mapRows), 8,100, and the step 1.17 s against 1.44 (medians of 6).
// The room asked for is in the debug log ("heap room").
func (o RunOptions) adviseHeap(held int64) (stop func()) {
	if o.HugePages == HugePagesOff || o.sample || o.MemoryLimit < hugePagesFloor {
		return func() {}
	}
	expect := min(4*held, o.MemoryLimit/2) * int64(max(o.Together, 1))
	if o.Log != nil {
		o.Log.Debug("heap room", "bytes", expect, "together", max(o.Together, 1))
	}
	var done func() int
	if o.HugePages == HugePagesOn { // the mechanism, worthwhile here or not
		done = hugepages.AdviseGranted(expect)
	} else {
		var why string
		if done, why = hugepages.Advise(expect); why != "" {
			if o.Log != nil {
				o.Log.Debug("huge pages not asked for", "why", why)
			}
			return func() {}
		}
	}
	return func() {
		if n := done(); n > 0 && o.Log != nil {
			o.Log.Debug("heap advised for huge pages", "mappings", n)
		}
	}
}
