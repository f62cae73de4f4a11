package loader

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// scatterLinesNT stores row i of src (lines 64-byte lines) at row slot[i]
// of dst with non-temporal stores (AVX2 VMOVNTDQ), then fences. dst must
// be 32-byte aligned. scatter_amd64.s.
//
//go:noescape
func scatterLinesNT(dst, src unsafe.Pointer, slot *int64, n, lines int)

// ntLines reports whether 64-byte rows are stored around the caches.
var ntLines = cpu.X86.HasAVX2

// scatterLines stores row i of src (per bytes, a multiple of 64) at row
// slot[i] of dst. A window's batch buffers are much larger than the
// caches, so an ordinary store of a row first reads its cache lines from
// memory (to own them) and later writes them back; non-temporal stores of
// whole lines write them once (docs/benchmarks.md). It reports false, and
// stores nothing, where they do not apply (no AVX2, a small or unaligned
// destination).
func scatterLines(dst, src []byte, slot []int64, per int64) bool {
	if !ntLines || len(dst) < ntMinBytes || len(slot) == 0 || per <= 0 || per%64 != 0 || uintptr(unsafe.Pointer(unsafe.SliceData(dst)))%32 != 0 {
		return false
	}
	// The bounds the copying loop would check.
	n := int64(len(dst)) / per
	for _, sl := range slot {
		if uint64(sl) >= uint64(n) {
			panic("loader: scatter slot out of range")
		}
	}
	if int64(len(src)) < per*int64(len(slot)) {
		panic("loader: scatter source too short")
	}
	scatterLinesNT(unsafe.Pointer(unsafe.SliceData(dst)), unsafe.Pointer(unsafe.SliceData(src)), unsafe.SliceData(slot), len(slot), int(per/64))
	return true
}

// prefetchSpans: scatter_amd64.s.
//
//go:noescape
func prefetchSpans(dst unsafe.Pointer, fill0, fill *int64, nb int, batchBytes, per int64)

// prefetchRows asks for the cache lines of dst that a chunk's scatter is
// about to store rows of per bytes to (batch b's slots fill0[b] to
// fill[b], for every b), to be written (PREFETCHW), before it stores
// them. The stores go to as many streams as the window has batches, each
// a line further every few rows, which the hardware prefetchers do not
// follow: each store to a new line waited for the line to come from
// memory, a few at a time in store order. Asked for at once, the lines
// come together (BenchmarkWindowEpochReuse on the 30-tensor flat output,
// a 256 MiB window: 307-320 -> 261-276 ms an epoch; docs/benchmarks.md).
// Rows of whole lines stored around the caches need nothing
// (scatterLines), nor do a window's destinations small enough together
// (all its tensors' rows: windowBytes) to stay cached. It reports
// whether it asked.
func prefetchRows(dst []byte, fill0, fill []int64, batch, per, windowBytes int64) bool {
	if len(fill) == 0 || windowBytes < ntMinBytes || per%64 == 0 && ntLines || len(fill0) < len(fill) {
		return false
	}
	// Every span lies inside dst (b*batch + fill[b] <= the window's
	// samples); a prefetch of an address outside would not fault anyway.
	prefetchSpans(unsafe.Pointer(unsafe.SliceData(dst)), unsafe.SliceData(fill0), unsafe.SliceData(fill), len(fill), batch*per, per)
	return true
}
