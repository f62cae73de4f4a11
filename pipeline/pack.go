package pipeline

import (
	"github.com/apache/arrow-go/v18/arrow"

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

// rowDigest asks the in-memory read for the hashes detectSorted decides
// from: per row, of the query key (group 0, by value, as the key is
// compared) and of the columns the plan's probe left in doubt (group 1,
// exact, as the detector compares them). Nil without a probe.
func rowDigest(probe *plan.Probe, schema *arrow.Schema, queryCols []int) *partition.RowDigest {
	if probe == nil {
		return nil
	}
	cand, err := candidates(probe, schema, queryCols)
	if err != nil {
		return nil // the detector reads the rows
	}
	group := make([]int, schema.NumFields())
	for c := range group {
		group[c] = -1
	}
	for _, c := range queryCols {
		group[c] = 0
	}
	for _, c := range cand {
		group[c] = 1
	}
	return &partition.RowDigest{Group: group, Exact: []bool{false, true}}
}

// detectSorted decides the detection of a table held in memory, in its
// sorted order ord, from the read's row digests, as a detect task does from
// its map tasks' (detectByDigests): if no two neighbouring rows with the
// same query key hash have different candidate hashes, every candidate is
// constant inside every query (up to a 64-bit collision of the candidates'
// hashes, the fingerprint's assumption), and the detection is the probe's.
// The detector, comparing the same neighbours by their keys, would find
// the same: a pair of rows with equal keys has equal key hashes, and the
// columns the probe saw vary vary in the table too. ok is false when some
// query's rows differ: the detector must read them to say where.
func detectSorted(ord []int64, dig *partition.RowDigest, probe *plan.Probe) (det dedupe.Detection, ok bool) {
	if dig == nil || len(dig.Hashes) == 0 || probe == nil {
		return det, false
	}
	// Without group 1 no column is in doubt: the probe saw every other
	// one vary.
	if len(dig.Hashes) > 1 {
		q, c := dig.Hashes[0], dig.Hashes[1]
		for j := 1; j < len(ord); j++ {
			a, b := ord[j-1], ord[j]
			if q[a] == q[b] && c[a] != c[b] {
				return det, false
			}
		}
	}
	return probeDetectionOf(probe), true
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
