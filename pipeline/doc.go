// Package pipeline runs relayout's commands (run, verify, inspect) by wiring
// the packages that do the work: storage (where bytes live), source (decoding
// input Parquet), partition (ordering and layout), writer (output files),
// fingerprint (content checks) and manifests (the commit point).
//
// A run is a plan executed in one process:
//
//  1. plan:   read footers and the key columns only; order all rows
//     (partition.Build) and cut the order into row groups and files
//     (partition.PlanLayout) and into memory-sized units;
//  2. gather: when the table fits the memory budget, decode it once and gather
//     rows in output order; otherwise route every input row group's rows to
//     per-unit spill files in --tmp-dir (map), then load one unit at a time
//     (reduce);
//  3. write:  stream the ordered rows to the Parquet sink, which cuts row
//     groups and files where the layout says;
//  4. check:  re-read every written file and compare row counts, key order,
//     statistics and the content fingerprint with the input's;
//  5. commit: write manifest.json last.
//
// Because steps 2-3 only move rows to places fixed in step 1, the output is
// byte-identical whatever the memory limit or parallelism.
package pipeline
