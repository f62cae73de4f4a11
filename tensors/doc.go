// Package tensors turns Arrow record batches into the dense, little-endian
// tensors relayout writes into safetensors shards.
//
// A Plan maps the table's columns to named tensors: by default one tensor per
// column (integers and floats keep their width, bool becomes uint8, strings
// and binary become int64 ids, the xxhash64 of their bytes, list columns
// become [N, D] when every list has length D and values plus offsets
// otherwise, nullable columns add a uint8 validity tensor). A Spec, read from
// YAML, groups columns into one [N, F] tensor, casts, hashes into buckets,
// sets fill values, renames and drops. In packed outputs tensors live at two
// levels: query.<col> once per query and item.<col> once per item, with
// query.item_offsets (CSR) between them.
//
// The package holds no I/O: writer.Tensors cuts shards and writes them, and
// package loader reads them back.
package tensors
