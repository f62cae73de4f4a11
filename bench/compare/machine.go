package main

import (
	"fmt"
	"syscall"
	"time"
)

// freshMemory measures what memory the process has not touched before
// costs on this machine, in milliseconds per MB: the first write to each
// page of a new anonymous mapping, in 4 KiB pages and with transparent huge
// pages asked for (MADV_HUGEPAGE), and a second write to the same pages.
//
// Every tool in the comparisons pays the first-touch cost for each MB its
// peak memory reaches. On an ordinary Linux machine it is about 0.1-0.3
// ms/MB; on the VMs these benchmarks have run on (a PVM guest: page
// tables shadowed by the host, free memory reported back to it) it was
// 2-4 ms/MB, enough to put a quarter of a run's CPU time in the kernel's
// clear_page and to move the ratios against peers that use more memory
// by a third (docs/benchmarks.md). Printed before the sections so that
// figures from different runs can be compared knowing the machine's state.
func freshMemory() map[string]float64 {
	const size = 128 << 20
	out := map[string]float64{}
	for _, c := range []struct {
		name string
		huge bool
	}{{"4k", false}, {"huge", true}} {
		b, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
		if err != nil {
			return out
		}
		if c.huge {
			// MADV_HUGEPAGE (14): not every kernel has it, and a refusal
			// leaves 4 KiB pages, which the figure then shows.
			syscall.Madvise(b, 14)
		}
		touch := func(v byte) float64 {
			t0 := time.Now()
			for i := 0; i < len(b); i += 4096 {
				b[i] = v
			}
			return float64(time.Since(t0).Microseconds()) / 1e3 / (size / 1e6)
		}
		out["first_touch_ms_per_mb_"+c.name] = touch(1)
		out["again_ms_per_mb_"+c.name] = touch(2)
		syscall.Munmap(b)
	}
	fmt.Printf("machine: fresh memory costs %.2f ms/MB on first touch in 4 KiB pages, %.2f with huge pages (%.3f touched again); peak memory costs each tool that much CPU\n",
		out["first_touch_ms_per_mb_4k"], out["first_touch_ms_per_mb_huge"], out["again_ms_per_mb_4k"])
	return out
}
