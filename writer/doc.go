// Package writer holds relayout's output sinks.
//
// Parquet writes the re-laid table as <output>/parquet/part-NNNNN.parquet with
// arrow-go: zstd, data page V1, column statistics, a page index
// (ColumnIndex/OffsetIndex), sorting_columns for the slice and sort keys, and
// key-value metadata naming the relayout version and config hash, and a
// CRC32 in every page header (pagecrc.go: arrow-go writes none, so they are
// added to the bytes it produces and the footer's offsets moved;
// ParquetOptions.NoPageCRCs leaves them out). Row groups
// and files are cut exactly where the partition.Layout says, never by size
// heuristics inside the library, so the output is a pure function of the
// input rows and the layout.
//
// Every file is written through a blob writer whose content becomes visible
// only when it is closed successfully; a failed file is aborted (its context
// cancelled before Close), so no partial object is left behind. Data files are
// hashed (xxhash64) while they are written.
package writer
