package pipeline

import "github.com/relayout/relayout/internal/hugepages"

// hugePagesFloor is the smallest --memory-limit under which a process asks
// for huge pages: below it a 2 MiB page is a visible share of the budget.
const hugePagesFloor = 512 << 20

// decodedPerInput is how many decoded (Arrow) bytes an uncompressed input
// byte becomes, for sizing the heap a task expects (the 1M-row generated
// log: 270 decoded bytes per row from 220).
const decodedPerInput = 1.5

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
func (o RunOptions) adviseHeap(held int64) (stop func()) {
	if o.HugePages == HugePagesOff || o.sample || o.MemoryLimit < hugePagesFloor {
		return func() {}
	}
	expect := min(4*held, o.MemoryLimit/2)
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
