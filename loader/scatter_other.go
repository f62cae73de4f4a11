//go:build !amd64

package loader

// ntLines: rows are stored around the caches on amd64 only.
const ntLines = false

// scatterLines stores nothing here: the typed stores do (scatterRows).
func scatterLines(dst, src []byte, slot []int64, per int64) bool { return false }

// scatterRowsAhead stores as scatterRows does here (amd64 only asks for
// lines ahead).
func scatterRowsAhead(dst, src []byte, slot []int64, per, windowBytes int64) bool {
	scatterRows(dst, src, slot, per)
	return false
}
