package main

import (
	"fmt"

	"github.com/relayout/relayout/internal/hugepages"
)

// freshMemory reports what memory a process has not touched before costs
// on this machine now (hugepages.FreshMemoryCost): CPU milliseconds per
// MiB for the first write to each page, in 4 KiB pages and with
// transparent huge pages asked for.
//
// Every tool in the comparisons pays it for each MiB its peak memory
// reaches. On ordinary Linux it is a few tenths of a millisecond; on the
// VMs these benchmarks have run on (PVM guests: page tables shadowed by
// the host, free memory reported back to it) 2-4 ms in 4 KiB pages,
// enough to put a quarter of a run's CPU time in the kernel's clear_page
// and to move the ratios against peers that use more memory by a third
// (docs/benchmarks.md). Printed before the sections so that figures from
// different runs can be compared knowing the machine's state.
func freshMemory() map[string]float64 {
	ms := func(huge bool) float64 { return float64(hugepages.FreshMemoryCost(huge).Microseconds()) / 1e3 }
	out := map[string]float64{"first_touch_ms_per_mib_4k": ms(false), "first_touch_ms_per_mib_huge": ms(true)}
	fmt.Printf("machine: fresh memory costs %.2f CPU-ms/MiB on first touch in 4 KiB pages, %.2f with huge pages; peak memory costs each tool that much\n",
		out["first_touch_ms_per_mib_4k"], out["first_touch_ms_per_mib_huge"])
	return out
}
