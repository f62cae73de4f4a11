// Package plan decides a run's layout before any row moves: the key pass
// over the slice and query key columns (Analyze), the output's row groups
// and files (Layout), how the memory budget splits into units
// (SizeMemory), and the plan itself (Build): partitions, units, the cuts
// that route slices split over units, and the map tasks. Run, the dry run
// and the distributed steps all start from it; plan.json is a Plan.
//
// Options are what fix the output's bytes (recorded and hashed as the
// config); Resources (memory, temporary folder, parallelism) never change
// them.
package plan
