package loader

import "github.com/relayout/relayout/internal/hugepages"

// AdviseHugePages asks Linux for transparent huge pages for this process's
// Go heap, where they pay, until stop is called; it reports whether it
// asked, and if not, why. A reader's window buffers are fresh heap memory,
// faulted in a page at a time; with 2 MiB pages that is 512 times fewer
// faults. On a VM where a 4 KiB fault costs 11 us of CPU, a fresh
// Dataset's window-order epoch of the 93 MB dense bench output took 75-95
// ms against 121-136 ms; a warm reader's, 55-69 ms against 57-72 ms, is
// about the same (docs/benchmarks.md).
//
// It asks where the kernel's setting is "madvise" (with "always" the heap
// has huge pages already), except in a VM whose kernel gives free memory
// back to the hypervisor and where a 4 KiB fault is cheap: there each huge
// page is backed afresh by the host and costs more than it saves (the
// rule `relayout run --huge-pages auto` follows). It is opt-in, called
// once by the program (NumPy asks for huge pages for its large arrays by
// default; Go's runtime has not since Go 1.21.1), because it changes the
// whole process's heap: its resident set grows in 2 MiB steps.
//
// expect is about what the program's readers will hold at once (their
// shuffle windows: ReadOptions.WindowBytes each, DefaultWindowBytes unless set):
// the heap is first grown by that much without touching it and advised,
// so the buffers made next land in advised memory (0: none). A goroutine
// advises heap mappings added later, every 10 ms, until stop.
func AdviseHugePages(expect int64) (stop func(), asked bool, why string) {
	done, why := hugepages.Advise(expect)
	return func() { done() }, why == "", why
}
