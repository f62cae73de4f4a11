// Package storage is relayout's boundary with file systems and object stores.
//
// Every input and output location is a gocloud.dev/blob bucket plus a key
// prefix. Locations are named by a local path (file, folder or glob) or by a
// URL that gocloud understands (file://, mem://, s3://, gs://, azblob://).
// Open resolves a name to a Location; List expands it to the Parquet objects it
// names; NewReaderAt gives the random-access reader Parquet needs, built on
// blob range reads, so that a reader fetches the footer and then only the
// column chunks it decodes. Reads and requests are counted (Counters) so that
// commands can report what they cost.
//
// mem:// buckets are process-wide: every Open of "mem://name" in one process
// returns the same bucket, which lets tests and benchmarks run whole commands
// against memory.
package storage
