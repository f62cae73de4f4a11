package manifests

import "slices"

// SliceSpan is one planned slice: its key values and its global row range
// in the output (rows are queries when the output is packed, and Items its
// flat rows then).
type SliceSpan struct {
	Key   KeyValues
	Start int64
	Rows  int64
	Items int64
}

// SetFiles records the files written and indexes every non-empty slice in
// them: each slice gets one segment per row group it overlaps, with the
// row group's byte range (what a reader of one slice fetches). It also sets
// the totals. Files must be in output order and slices in key order.
func (m *Manifest) SetFiles(files []File, spans []SliceSpan) {
	type rgRef struct {
		file, rg     int
		start, rows  int64 // global
		first        int64 // within file
		offset, size int64
	}
	var rgs []rgRef
	m.Files = make([]File, 0, len(files))
	m.Totals = Totals{}
	for i, f := range files {
		if f.RowGroups == nil {
			f.RowGroups = []RowGroup{}
		}
		for j, g := range f.RowGroups {
			rgs = append(rgs, rgRef{file: i, rg: j, start: f.FirstRow + g.FirstRow, rows: g.Rows, first: g.FirstRow, offset: g.Offset, size: g.Length})
		}
		m.Files = append(m.Files, f)
		m.Totals.Bytes += f.Bytes
		m.Totals.Rows += f.Rows
		m.Totals.RowGroups += len(f.RowGroups)
	}
	m.Totals.Files = len(files)
	m.Slices = []Slice{}
	k := 0
	for _, s := range spans {
		if s.Rows == 0 {
			continue
		}
		ms := Slice{Key: s.Key, Rows: s.Rows, Items: s.Items, FirstRow: s.Start}
		if ms.Key == nil {
			ms.Key = KeyValues{}
		}
		end := s.Start + s.Rows
		for k < len(rgs) && rgs[k].start+rgs[k].rows <= s.Start {
			k++
		}
		for j := k; j < len(rgs) && rgs[j].start < end; j++ {
			g := rgs[j]
			lo, hi := max(g.start, s.Start), min(g.start+g.rows, end)
			ms.Segments = append(ms.Segments, Segment{
				File: g.file, RowGroup: g.rg, FirstRow: g.first + (lo - g.start), Rows: hi - lo,
				Offset: g.offset, Length: g.size,
			})
		}
		m.Slices = append(m.Slices, ms)
	}
	m.Totals.Slices = len(m.Slices)
}

// IndexShards returns the shards with each slice's rows in them indexed,
// and their totals, from m's slices (SetFiles first). Shards must be in
// output order.
func (m *Manifest) IndexShards(shards []Shard) ([]Shard, TensorTotals) {
	out := make([]Shard, 0, len(shards))
	var tot TensorTotals
	k := 0
	for _, s := range shards {
		s.Slices = []ShardSlice{}
		end := s.FirstRow + s.Rows
		for k < len(m.Slices) && m.Slices[k].FirstRow+m.Slices[k].Rows <= s.FirstRow {
			k++
		}
		for j := k; j < len(m.Slices) && m.Slices[j].FirstRow < end; j++ {
			sl := m.Slices[j]
			lo, hi := max(sl.FirstRow, s.FirstRow), min(sl.FirstRow+sl.Rows, end)
			if hi > lo {
				s.Slices = append(s.Slices, ShardSlice{Slice: j, FirstRow: lo - s.FirstRow, Rows: hi - lo})
			}
		}
		out = append(out, s)
		tot.Shards++
		tot.Bytes += s.Bytes
		tot.Rows += s.Rows
		tot.Items += s.Items
	}
	return out, tot
}

// DistributionOf summarises counts (it sorts a copy).
func DistributionOf(counts []int64) Distribution {
	if len(counts) == 0 {
		return Distribution{}
	}
	counts = slices.Clone(counts)
	slices.Sort(counts)
	q := func(f float64) int64 { return counts[min(int(f*float64(len(counts))), len(counts)-1)] }
	return Distribution{Min: counts[0], P50: q(0.5), P90: q(0.9), P99: q(0.99), Max: counts[len(counts)-1]}
}
