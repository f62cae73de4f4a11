//go:build !amd64

package loader

// ntLines and ntMinBytes: rows are stored around the caches on amd64 only.
const (
	ntLines    = false
	ntMinBytes = 8 << 20
)

// scatterLines stores 64-byte row i of src at row slot[i] of dst.
func scatterLines(dst, src []byte, slot []int64) { scatterTyped(lines(dst), lines(src), slot) }
