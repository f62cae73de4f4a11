package report

import (
	"encoding/binary"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/relayout/relayout/partition"
)

// TestReadsAllIsReadsForEachSlice: pricing every slice at once (candidate
// row groups by binary search on the first key) gives each slice exactly
// the row groups and bytes that pricing it alone over every row group
// gives: over random tables of row groups with tight, wide, null-only,
// missing and absent statistics and vectors, slices of one and two keys
// with nulls, and slices out of order (priced one by one).
func TestReadsAllIsReadsForEachSlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 140))
	val := func(x uint64) []byte { return binary.BigEndian.AppendUint64([]byte{1}, x) }
	null := []byte{partition.TagNull}
	for trial := range 300 {
		keys := 1 + rng.IntN(2)
		// Slices: distinct tuples, sorted as a histogram's are.
		seen := map[string]bool{}
		var sl []partition.Slice
		for len(sl) < 1+rng.IntN(60) {
			var parts [][]byte
			var key []byte
			for range keys {
				p := val(uint64(rng.IntN(40)))
				if rng.IntN(8) == 0 {
					p = null
				}
				parts = append(parts, p)
				key = append(key, p...)
			}
			if !seen[string(key)] {
				seen[string(key)] = true
				sl = append(sl, partition.Slice{Key: key, Parts: parts, Rows: 1})
			}
		}
		sort.Slice(sl, func(a, b int) bool { return string(sl[a].Key) < string(sl[b].Key) })
		tc := TableCost{footer: int64(rng.IntN(100))}
		for range rng.IntN(30) {
			rg := rgCost{rows: 1000, bytes: int64(1 + rng.IntN(1000)), keyBytes: int64(1 + rng.IntN(50))}
			rg.others = []colCost{{bytes: int64(1 + rng.IntN(500))}}
			if rng.IntN(6) > 0 {
				for range keys {
					var sr partition.StatsRange
					switch rng.IntN(5) {
					case 0: // no usable range
						sr.MayHaveNulls = rng.IntN(2) == 0
					case 1: // nulls only
						sr.MayHaveNulls = true
					default:
						a, b := uint64(rng.IntN(40)), uint64(rng.IntN(40))
						if rng.IntN(3) == 0 {
							b = a // one value, as an output row group of one slice
						}
						sr.Lo, sr.Hi, sr.MinMax, sr.MayHaveNulls = val(min(a, b)), val(max(a, b)), true, rng.IntN(3) == 0
					}
					rg.stats = append(rg.stats, sr)
				}
			}
			if rng.IntN(2) == 0 { // where some slices' rows lie
				var ids []int32
				for i := range sl {
					if rng.IntN(3) == 0 {
						ids = append(ids, int32(i))
					}
				}
				rg.vectors = &partition.RowGroupSlices{IDs: ids, Words: 1, Bits: make([]uint64, len(ids))}
				for k := range rg.vectors.Bits {
					rg.vectors.Bits[k] = rng.Uint64()
				}
			}
			tc.rgs = append(tc.rgs, rg)
		}
		check := func(what string, sl []partition.Slice) {
			n, b := tc.readsAll(sl)
			for i, s := range sl {
				wn, wb := tc.readsFor(int32(i), s.Parts)
				if n[i] != wn || b[i] != wb {
					t.Fatalf("trial %d, %s, slice %d of %d: %d row groups and %d bytes, alone %d and %d", trial, what, i, len(sl), n[i], b[i], wn, wb)
				}
			}
		}
		check("sorted", sl)
		rng.Shuffle(len(sl), func(a, b int) { sl[a], sl[b] = sl[b], sl[a] })
		check("shuffled", sl)
	}
}
