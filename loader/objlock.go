package loader

import (
	"slices"

	"github.com/cespare/xxhash/v2"
)

// A download holds a lock on each object it fetches (its cache file name),
// so two readers sharing a cache folder (goroutines, processes, Go and
// Python) do not download one object at once, and downloads of different
// objects never wait for each other. On Linux the locks are byte-range
// locks of open file descriptions (F_OFD_SETLKW) on one file, blocks.lock:
// one byte per object, at an offset hashed from its name (lockOffsets), so
// no file is created per download (relayout builds for Linux only: its
// storage package uses Linux calls too).
//
// Until 2026-12-04 headers and blocks shared 32 lock files, held across
// their requests: a run of blocks held many of them and a reader's own
// runs waited for each other. A lock file per object then cost file
// creations that many downloads at once contend for (docs/benchmarks.md).

// objLocks is the cache folder's file of per-object byte-range locks.
const objLocks = "blocks.lock"

// lockOffsets are the byte offsets locking the named objects, ascending
// (the order every reader takes them in) and distinct: the name's
// xxhash64 shifted right by 2 bits (a positive off_t).
func lockOffsets(names []string) []int64 {
	out := make([]int64, len(names))
	for i, n := range names {
		out[i] = int64(xxhash.Sum64String(n) >> 2)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
