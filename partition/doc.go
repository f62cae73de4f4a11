// Package partition orders the rows of a table by slice keys and plans the
// output layout.
//
// Ordering: each row's slice-key tuple is encoded into an order-preserving
// byte string (EncodeKeys), so one bytes.Compare orders two tuples: nulls
// first, then values in the type's natural order (see keys.go for the exact
// encoding of each type). Rows are ordered by (slice key, sort key, input
// position), where the input position is the row's index in the concatenation
// of the input files in listing order. The order is total, so it is the same
// whatever the parallelism or memory limit.
//
// Layout: from the slices' row counts alone, Plan cuts the ordered rows into
// row groups that end at slice boundaries and into files. Because the layout
// depends only on the keys, the row counts and the input's bytes per row, the
// same input and configuration always give the same files, however the rows are
// later gathered (in memory or through spilled runs).
package partition
