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
	checkScatter(dst, src, slot, per)
	scatterLinesNT(unsafe.Pointer(unsafe.SliceData(dst)), unsafe.Pointer(unsafe.SliceData(src)), unsafe.SliceData(slot), len(slot), int(per/64))
	return true
}

// checkScatter panics where storing row i of src (per bytes) at row
// slot[i] of dst would go out of either: the bounds Go's stores check, for
// the assembly's.
func checkScatter(dst, src []byte, slot []int64, per int64) {
	n := int64(len(dst)) / per
	for _, sl := range slot {
		if uint64(sl) >= uint64(n) {
			panic("loader: scatter slot out of range")
		}
	}
	if int64(len(src)) < per*int64(len(slot)) {
		panic("loader: scatter source too short")
	}
}

// scatterAhead8, 4, 2 and 1 store rows of that many bytes, and
// scatterAheadWords rows of words 8-byte words, asking ahead for their
// lines (scatter_amd64.s); scatterRowsAhead checks their bounds.
//
//go:noescape
func scatterAhead8(dst, src unsafe.Pointer, slot *int64, n int)

//go:noescape
func scatterAhead4(dst, src unsafe.Pointer, slot *int64, n int)

//go:noescape
func scatterAhead2(dst, src unsafe.Pointer, slot *int64, n int)

//go:noescape
func scatterAhead1(dst, src unsafe.Pointer, slot *int64, n int)

//go:noescape
func scatterAheadWords(dst, src unsafe.Pointer, slot *int64, n, words int)

// scatterRowsAhead is scatterRows for one tensor of a window of
// windowBytes, its rows of 1, 2, 4 or 8 bytes, or of whole 8-byte words
// below 64 bytes, stored with the line each row goes to asked for 64 rows
// ahead (PREFETCHW). A window's rows go to a line per batch, which the
// hardware prefetchers do not follow: each store to a new line waited for
// it to come from memory (docs/benchmarks.md). Rows of whole lines are
// stored around the caches (scatterLines) where that applies; other rows,
// and a small window's, as scatterRows stores them. It reports whether it
// asked ahead.
func scatterRowsAhead(dst, src []byte, slot []int64, per, windowBytes int64) bool {
	words := per%8 == 0 && per < 64
	if windowBytes < aheadMinBytes || len(slot) == 0 || !(per == 1 || per == 2 || per == 4 || words) {
		scatterRows(dst, src, slot, per)
		return false
	}
	checkScatter(dst, src, slot, per)
	d, s, sp := unsafe.Pointer(unsafe.SliceData(dst)), unsafe.Pointer(unsafe.SliceData(src)), unsafe.SliceData(slot)
	switch per {
	case 8:
		scatterAhead8(d, s, sp, len(slot))
	case 4:
		scatterAhead4(d, s, sp, len(slot))
	case 2:
		scatterAhead2(d, s, sp, len(slot))
	case 1:
		scatterAhead1(d, s, sp, len(slot))
	default:
		scatterAheadWords(d, s, sp, len(slot), int(per/8))
	}
	return true
}
