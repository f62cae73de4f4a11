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
