package pipeline

import (
	"github.com/relayout/relayout/dedupe"
	"github.com/relayout/relayout/fingerprint"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/partition"
	"github.com/relayout/relayout/plan"
	"github.com/relayout/relayout/source"
)

// detectUnit feeds a sorted unit to the detector.
func detectUnit(det *dedupe.Detector, src *partition.UnitRows) error {
	return det.AddBatches(src.Batches(), src.Ord)
}

// decidePacking fixes the packed layout from the detection over all rows.
func decidePacking(tbl *source.Table, keys plan.Keys, det dedupe.Detection, opts RunOptions) (*dedupe.Decision, error) {
	return dedupe.Decide(tbl.Schema, keys.Query, keys.Slice, det, dedupe.DecideOptions{QueryColumns: opts.QueryColumns, OnQueryConflict: opts.OnQueryConflict})
}

// slicesInQueries returns the slices counted in queries (queries per
// slice rank, from the key pass).
func slicesInQueries(hist *partition.Histogram, queries []int64) []partition.Slice {
	out := make([]partition.Slice, len(hist.Slices))
	var start int64
	for i, s := range hist.Slices {
		s.Rows, s.Start = queries[i], start
		start += s.Rows
		out[i] = s
	}
	return out
}

// packedManifest is the manifest of a packed run: slices counted in
// queries (queries per slice rank, from the key pass), with their items.
func packedManifest(tbl *source.Table, dec *dedupe.Decision, pk *dedupe.Packer, hist *partition.Histogram, queries []int64, files []manifests.File, cfgJSON []byte, cfgHash string, opts RunOptions, inFP fingerprint.Sum, inBytes int64) *manifests.Manifest {
	m := buildManifest(tbl, dec.Layout.Packed, slicesInQueries(hist, queries), files, cfgJSON, cfgHash, opts, inFP)
	k := 0 // manifest slices are the histogram's non-empty slices, in order
	for _, hs := range hist.Slices {
		if hs.Rows > 0 {
			m.Slices[k].Items = hs.Rows
			k++
		}
	}
	m.SortKeys = nonNil(opts.QueryKey)
	m.Packing = dec.Manifest(pk, opts.ItemOrder, inBytes, m.Totals.Bytes)
	return m
}
