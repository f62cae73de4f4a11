// Package source opens a set of Parquet objects as one table and reads it
// column-at-a-time into Arrow arrays.
//
// Decoding uses arrow-go (the Go port of the Apache C++ reader), which covers
// the widest range of writers, encodings and legacy layouts. Every call into
// the decoder runs under errs.Recover so a malformed file becomes a one-line
// bad-input error naming the file, row group and column, never a panic.
//
// The table's schema is the first file's. Every other file must have the same
// column names and types; column order may differ (columns are matched by
// name) and a column that is required in one file and optional in another is
// read as optional.
package source
