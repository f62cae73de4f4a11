// Package verify checks a committed output against its manifest, and a
// run's output before it commits: file sizes and hashes, footers against
// the recorded row groups and their byte ranges, key order and slice
// boundaries against the slice index, key statistics, the tensor shards'
// sizes, hashes and headers, and, deep, every value's content fingerprint
// and the shards re-derived from the Parquet rows.
package verify
