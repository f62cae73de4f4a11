// Package dedupe packs recommendation queries: rows that share a query key
// (one row per (query, item) impression) become one row per query holding
// the query-level columns once and `items`, a LIST<STRUCT<item columns>>
// with that query's items in order. Unpack is the exact inverse.
//
// Rows arrive in key order (slice keys, query key, item order), so each
// query's items are contiguous; a query may span the record batches of the
// stream, and the Packer carries an incomplete trailing query to the next
// batch. The Detector finds, over all rows of the stream, which columns are
// constant within every query (nulls equal): the query-level columns.
package dedupe
