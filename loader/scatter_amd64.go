package loader

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// scatterLinesNT stores 64-byte row i of src at row slot[i] of dst with
// non-temporal stores (AVX2 VMOVNTDQ), then fences. dst must be 32-byte
// aligned. scatter_amd64.s.
//
//go:noescape
func scatterLinesNT(dst, src unsafe.Pointer, slot *int64, n int)

// ntLines reports whether 64-byte rows are stored around the caches.
var ntLines = cpu.X86.HasAVX2

// ntMinBytes is the smallest destination stored around the caches: a
// smaller one (a small window's batches) may still be in the cache when
// the batch is read.
const ntMinBytes = 8 << 20

// scatterLines stores 64-byte row i of src at row slot[i] of dst. A
// window's batch buffers are much larger than the caches, so an ordinary
// store of a row first reads its cache line from memory (to own it) and
// later writes it back; a non-temporal store of the whole line writes it
// once (docs/benchmarks.md).
func scatterLines(dst, src []byte, slot []int64) {
	if !ntLines || len(dst) < ntMinBytes || len(slot) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(dst)))%32 != 0 {
		scatterTyped(lines(dst), lines(src), slot)
		return
	}
	// The bounds the typed loop would check.
	n := int64(len(dst) / 64)
	for _, sl := range slot {
		if uint64(sl) >= uint64(n) {
			panic("loader: scatter slot out of range")
		}
	}
	if len(src) < 64*len(slot) {
		panic("loader: scatter source too short")
	}
	scatterLinesNT(unsafe.Pointer(unsafe.SliceData(dst)), unsafe.Pointer(unsafe.SliceData(src)), unsafe.SliceData(slot), len(slot))
}
