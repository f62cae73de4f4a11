//go:build !amd64

package loader

// ntLines: rows are stored around the caches on amd64 only.
const ntLines = false

// scatterLines stores nothing here: the typed stores do (scatterRows).
func scatterLines(dst, src []byte, slot []int64, per int64) bool { return false }

// prefetchRows asks for nothing here (amd64 only).
func prefetchRows(dst []byte, fill0, fill []int64, batch, per, windowBytes int64) bool { return false }
