package main

import (
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"

	"github.com/relayout/relayout/internal/testutil"
)

// writeDictionaryNoStats writes 2^20 rows of a key k and 100 distinct
// 44-byte URLs, held as a dictionary, in one row group without statistics
// (as writers with statistics off, or the older ones whose string
// statistics arrow-go discards, leave them): the footer says 2 bytes a
// URL, which decode to 48 and more.
func writeDictionaryNoStats(t *testing.T, path string) {
	const rows = 1 << 20
	sc := arrow.NewSchema([]arrow.Field{{Name: "k", Type: arrow.PrimitiveTypes.Int32}, {Name: "url", Type: arrow.BinaryTypes.String}}, nil)
	kb := array.NewInt32Builder(memory.DefaultAllocator)
	ub := array.NewStringBuilder(memory.DefaultAllocator)
	defer kb.Release()
	defer ub.Release()
	for i := 0; i < rows; i++ {
		kb.Append(int32(i % 8))
		ub.Append(fmt.Sprintf("https://example.com/catalog/category/%d/items", (i*2654435761)%100))
	}
	k, u := kb.NewArray(), ub.NewArray()
	defer k.Release()
	defer u.Release()
	testutil.WriteArrow(t, path, array.NewRecordBatch(sc, []arrow.Array{k, u}, rows),
		parquet.WithStats(false), parquet.WithDictionaryDefault(true), parquet.WithMaxRowGroupLength(rows), parquet.WithCompression(compress.Codecs.Zstd))
}
