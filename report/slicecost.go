package report

import (
	"bytes"
	"context"
	"encoding/binary"
	"maps"
	"math/bits"
	"sort"

	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/par"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/partition"
	"github.com/relayout/relayout/source"
)

// The read-cost model. A reader answering SELECT * WHERE <slice> over
// Parquet (DuckDB; Spark and pyarrow similarly) reads every footer, skips
// the row groups whose min/max statistics exclude the slice, reads the
// filter (slice-key) columns of the others in full, and then fetches the
// other columns only where rows matched: the data pages overlapping a
// VectorRows-row vector with a match, plus the column's dictionary page.
// Where page locations are unknown the whole column chunk counts.

// colCost is one column chunk.
type colCost struct {
	bytes int64 // compressed chunk bytes
	dict  int64 // bytes before the first data page (the dictionary page)
	// pageRows[i] is data page i's first row, upTo[i] the bytes of pages 0
	// through i; nil: page locations unknown.
	pageRows, upTo []int64
}

// setPages records the data pages' first rows and sizes.
func (c *colCost) setPages(firstRows, sizes []int64) {
	c.pageRows = firstRows
	c.upTo = make([]int64, len(sizes))
	var n int64
	for i, b := range sizes {
		n += b
		c.upTo[i] = n
	}
}

// fetch returns the bytes read of the column when the rows that matched
// lie in vectors: the dictionary page and the pages from the first through
// the last one overlapping a matched vector.
func (c colCost) fetch(vectors []uint64, rows int64) int64 {
	last := lastVector(vectors)
	if last < 0 {
		return 0
	}
	if c.pageRows == nil {
		return c.bytes
	}
	row := min((last+1)*partition.VectorRows, max(rows, 1)) - 1
	// The last page whose first row is at or before row.
	i := sort.Search(len(c.pageRows), func(i int) bool { return c.pageRows[i] > row }) - 1
	if i < 0 {
		return 0
	}
	return c.dict + c.upTo[i]
}

// lastVector returns the highest set vector, or -1.
func lastVector(v []uint64) int64 {
	for w := len(v) - 1; w >= 0; w-- {
		if v[w] != 0 {
			return int64(w)*64 + int64(63-bits.LeadingZeros64(v[w]))
		}
	}
	return -1
}

// vectorsOf returns the bitset of the vectors overlapping rows [lo, hi).
func vectorsOf(rows, lo, hi int64) []uint64 {
	v := make([]uint64, (rows/partition.VectorRows+64)/64)
	if hi <= lo {
		return v
	}
	for k := lo / partition.VectorRows; k <= (hi-1)/partition.VectorRows; k++ {
		v[k/64] |= 1 << (k % 64)
	}
	return v
}

// rgCost is what the model knows of one row group.
type rgCost struct {
	rows     int64
	bytes    int64 // all column chunks
	keyBytes int64 // the slice-key (filter) columns' chunks
	others   []colCost
	stats    []partition.StatsRange
	// vectors holds, by slice rank, the vectors holding its rows; nil:
	// unknown (every candidate row group is read in full).
	vectors *partition.RowGroupSlices
}

// TableCost is a table as the model sees it. Footer is what a reader reads
// of every file before deciding anything: the footers and their 8-byte
// trailers. In a Hive-partitioned table (every file under folders named by
// the same leading slice keys) a reader prunes folders by the slice's
// values first (DuckDB's hive_partitioning, Spark, pyarrow datasets) and
// reads the footers of the slice's folder alone (folderBytes holds them by
// folder), plus the first file's, which gives it the schema (DuckDB reads
// it to bind the query: 10.8 KB more than the folder's file and footer,
// measured). Counting every file's footer for every slice priced a slice
// of a 1,739-folder output at 18 MB, where its folder held 15 KB.
type TableCost struct {
	rgs    []rgCost
	footer int64
	// files is the files modelled; folderKeys the leading slice keys
	// every one's folders name (0: none, or files that differ), and
	// folderBytes their footers by folder (folderKey of its key parts).
	files       int
	folderKeys  int
	folderBytes map[string]int64
	firstFooter int64 // the first file's
	// noStats counts row groups with a slice-key column without min/max.
	noStats int
}

// folderKey is a folder's map key: its encoded key parts, each
// length-prefixed.
func folderKey(parts [][]byte) string {
	var k []byte
	for _, p := range parts {
		k = binary.AppendUvarint(k, uint64(len(p)))
		k = append(k, p...)
	}
	return string(k)
}

// footerFor is what a reader of the slice with key parts reads of the
// table's footers: those of its folder where folders name slice keys,
// else every file's.
func (t *TableCost) footerFor(parts [][]byte) int64 {
	if t.folderKeys == 0 || len(parts) < t.folderKeys {
		return t.footer
	}
	return t.firstFooter + t.folderBytes[folderKey(parts[:t.folderKeys])]
}

// addFooters adds p's files' footers (a model of other files) to t's.
func (t *TableCost) addFooters(p *TableCost) {
	switch {
	case t.files == 0:
		t.folderKeys, t.folderBytes, t.firstFooter = p.folderKeys, maps.Clone(p.folderBytes), p.footer
	case t.folderKeys != p.folderKeys:
		t.folderKeys, t.folderBytes = 0, nil
	case t.folderKeys > 0:
		for k, v := range p.folderBytes {
			t.folderBytes[k] += v
		}
	}
	t.footer += p.footer
	t.files += p.files
}

// NumRowGroups returns the row groups modelled.
func (t *TableCost) NumRowGroups() int { return len(t.rgs) }

// readsFor returns how many row groups a reader reads (does not skip by
// statistics) and how many bytes in all for slice `rank` with key parts.
func (t *TableCost) readsFor(rank int32, parts [][]byte) (int, int64) {
	n, b := 0, t.footerFor(parts)
	for r := range t.rgs {
		rg := &t.rgs[r]
		if !rg.mayContain(parts) {
			continue
		}
		n++
		b += rg.filterBytes(rg.vectors != nil)
		if v, ok := rg.vectors.Vectors(rank); ok {
			b += rg.fetchBytes(v)
		}
	}
	return n, b
}

// readsAll is readsFor of every slice (by rank), in time that grows with
// the pairs of a row group and a slice its first key's statistics do not
// exclude, not with all pairs: a row group's candidates are found by binary
// search, the slices being sorted by their first key. Calling readsFor per
// slice visited every row group for every slice, which for a Hive output
// of 95,000 folders (a row group each) was 9 billion checks: a dry run of
// 100,000 rows took 6 minutes. Slices not sorted that way (not from a
// Histogram) are priced one by one.
func (t *TableCost) readsAll(slices []partition.Slice) ([]int, []int64) {
	n, b := make([]int, len(slices)), make([]int64, len(slices))
	first := func(i int) []byte { return slices[i].Parts[0] }
	sorted := true
	for i := range slices {
		if len(slices[i].Parts) == 0 || i > 0 && bytes.Compare(first(i-1), first(i)) > 0 {
			sorted = false
			break
		}
	}
	if !sorted {
		for i, s := range slices {
			n[i], b[i] = t.readsFor(int32(i), s.Parts)
		}
		return n, b
	}
	for i := range b {
		b[i] = t.footerFor(slices[i].Parts)
	}
	// Empty first parts (which every row group may hold), then nulls,
	// then values, in the order of their encodings.
	empty := sort.Search(len(slices), func(i int) bool { return len(first(i)) > 0 })
	nulls := empty + sort.Search(len(slices)-empty, func(j int) bool { return slices[empty+j].Parts[0][0] != partition.TagNull })
	visit := func(rg *rgCost, from, to int) {
		for i := from; i < to; i++ {
			if !rg.mayContain(slices[i].Parts) {
				continue
			}
			n[i]++
			b[i] += rg.filterBytes(rg.vectors != nil)
			if v, ok := rg.vectors.Vectors(int32(i)); ok {
				b[i] += rg.fetchBytes(v)
			}
		}
	}
	for r := range t.rgs {
		rg := &t.rgs[r]
		if len(rg.stats) == 0 {
			visit(rg, 0, len(slices))
			continue
		}
		st := rg.stats[0]
		visit(rg, 0, empty)
		if st.MayHaveNulls {
			visit(rg, empty, nulls)
		}
		lo, hi := nulls, len(slices)
		if st.MinMax {
			lo = nulls + sort.Search(hi-nulls, func(j int) bool { return bytes.Compare(first(nulls+j), st.Lo) >= 0 })
			hi = lo + sort.Search(hi-lo, func(j int) bool { return bytes.Compare(first(lo+j), st.Hi) > 0 })
		}
		visit(rg, lo, hi)
	}
	return n, b
}

// filterBytes is what a reader of a slice the statistics do not exclude
// reads of the row group before it knows where the slice's rows lie: the
// slice-key columns, or with the rows' places unknown (no vectors) all of
// it.
func (rg *rgCost) filterBytes(vectorsKnown bool) int64 {
	if !vectorsKnown {
		return rg.bytes
	}
	return rg.keyBytes
}

// fetchBytes is what it reads of the other columns where the slice's rows
// lie (in vectors).
func (rg *rgCost) fetchBytes(vectors []uint64) int64 {
	var b int64
	for _, c := range rg.others {
		b += c.fetch(vectors, rg.rows)
	}
	return b
}

// mayContain reports whether the row group's statistics let a reader skip
// the slice with key parts (false) or not.
func (rg *rgCost) mayContain(parts [][]byte) bool {
	for c, sr := range rg.stats {
		if c < len(parts) && !sr.MayContain(parts[c]) {
			return false
		}
	}
	return true
}

// costOfTable reads the row groups' slice-key statistics and page
// locations from the footers and page indexes (by name, so it also serves a
// packed output), with vectors[i] saying where each slice's rows lie in
// row group i (nil: unknown).
func costOfTable(tbl *source.Table, sliceKeys []string, vectors []*partition.RowGroupSlices) (tc TableCost, err error) {
	return costOfFiles(tbl, sliceKeys, vectors, costScope{end: -1, pages: true}, nil)
}

// costScope is the row groups a model covers, [first, end) of the table's
// RowGroups() (end -1: to the last), and whether it reads page locations.
type costScope struct {
	first, end int
	pages      bool
}

// costOfFiles is costOfTable that, when perFile is set, hands it the
// model after each file and then drops that file's row groups (the footer
// and noStats keep adding up): memory for one file, not the whole input.
func costOfFiles(tbl *source.Table, sliceKeys []string, vectors []*partition.RowGroupSlices, sc costScope, perFile func(*TableCost)) (tc TableCost, err error) {
	end := sc.end
	if end < 0 {
		end = tbl.NumRowGroups()
	}
	// The files in scope, each with its first row group's index.
	var files []*source.File
	var firsts []int
	i := 0
	for _, f := range tbl.Files {
		if i+len(f.RowGroupRows) > sc.first && i < end {
			files, firsts = append(files, f), append(firsts, i)
		}
		i += len(f.RowGroupRows)
	}
	// Windows of files are read at once (a file's footer and page index:
	// opening it again, a footer parse and on an object store a request or
	// two each) and added in order, so that a table of many small files
	// is not read one file at a time, and at most a window's models are
	// held.
	for w := 0; w < len(files); w += costWindow {
		parts := make([]TableCost, min(costWindow, len(files)-w))
		err := par.ForEach(context.Background(), len(parts), tbl.Readers(costParallel), func(k int) error {
			var err error
			parts[k], err = costOfFile(tbl, files[w+k], firsts[w+k], sliceKeys, vectors, sc, end)
			return err
		})
		if err != nil {
			return tc, err
		}
		for k := range parts {
			tc.addFile(&parts[k])
			if perFile != nil {
				perFile(&tc)
				tc.rgs = tc.rgs[:0]
			}
		}
	}
	return tc, nil
}

// addFile adds the model of the next file.
func (tc *TableCost) addFile(part *TableCost) {
	tc.addFooters(part)
	tc.noStats += part.noStats
	tc.rgs = append(tc.rgs, part.rgs...)
}

// costWindow and costParallel are how many files costOfFiles reads ahead
// and at once (more where they are in an object store: Table.Readers).
const (
	costWindow   = 32
	costParallel = 8
)

// costOfFile is the model of file f's row groups in scope (its first row
// group is row group i of the table).
func costOfFile(tbl *source.Table, f *source.File, i int, sliceKeys []string, vectors []*partition.RowGroupSlices, sc costScope, end int) (tc TableCost, err error) {
	defer errs.Recover(&err, "read page indexes")
	err = f.WithParquet(func(pq *file.Reader) error {
		md := pq.MetaData()
		tc.footer += int64(md.Size()) + 8
		tc.files = 1
		// The leading slice keys the file's folders name.
		var folder [][]byte
		for _, name := range sliceKeys {
			fi, err := tbl.FieldIndex(name)
			if err != nil {
				break
			}
			v := f.PartitionValue(fi)
			if v == nil {
				break
			}
			folder = append(folder, partition.AppendKey(nil, v, 0))
			v.Release()
		}
		if len(folder) > 0 {
			tc.folderKeys, tc.folderBytes = len(folder), map[string]int64{folderKey(folder): tc.footer}
		}
		keyLeaf := map[int]bool{}
		for _, name := range sliceKeys {
			if idx := md.Schema.ColumnIndexByName(name); idx >= 0 {
				keyLeaf[idx] = true
			}
		}
		var pir *metadata.PageIndexReader
		if sc.pages {
			pir = pq.GetPageIndexReader()
		}
		for g := range f.RowGroupRows {
			if i < sc.first || i >= end {
				i++
				continue
			}
			rg := md.RowGroup(g)
			rc := rgCost{rows: f.RowGroupRows[g]}
			var rgIdx *metadata.RowGroupPageIndexReader
			if pir != nil {
				rgIdx, _ = pir.RowGroup(g)
			}
			for c := 0; c < rg.NumColumns(); c++ {
				cc, err := rg.ColumnChunk(c)
				if err != nil {
					continue
				}
				size := cc.TotalCompressedSize()
				rc.bytes += size
				if keyLeaf[c] {
					rc.keyBytes += size
					continue
				}
				col := colCost{bytes: size}
				if rgIdx != nil {
					if idx, err := rgIdx.GetOffsetIndex(c); err == nil && idx != nil {
						locs := idx.GetPageLocations()
						start := cc.DataPageOffset()
						if cc.HasDictionaryPage() && cc.DictionaryPageOffset() > 0 && cc.DictionaryPageOffset() < start {
							start = cc.DictionaryPageOffset()
						}
						if len(locs) > 0 {
							col.dict = max(locs[0].Offset-start, 0)
							first, sizes := make([]int64, len(locs)), make([]int64, len(locs))
							for i, l := range locs {
								first[i], sizes[i] = l.FirstRowIndex, int64(l.CompressedPageSize)
							}
							col.setPages(first, sizes)
						}
					}
				}
				rc.others = append(rc.others, col)
			}
			missing := false
			for _, name := range sliceKeys {
				sr := partition.StatsRange{MayHaveNulls: true}
				fi, err := tbl.FieldIndex(name)
				idx := md.Schema.ColumnIndexByName(name)
				if v := f.PartitionValue(fi); err == nil && v != nil {
					sr = partition.ConstantStats(v)
					v.Release()
				} else if err == nil && idx >= 0 {
					if cc, err := rg.ColumnChunk(idx); err == nil {
						if st, err := cc.Statistics(); err == nil && st != nil {
							sr = partition.StatsFor(tbl.Schema.Field(fi).Type, st)
						}
					}
				}
				if !sr.MinMax {
					missing = true
				}
				rc.stats = append(rc.stats, sr)
			}
			if missing && len(sliceKeys) > 0 {
				tc.noStats++
			}
			if vectors != nil && vectors[i-sc.first].HasVectors() {
				rc.vectors = vectors[i-sc.first] // else where its rows lie is unknown
			}
			tc.rgs = append(tc.rgs, rc)
			i++
		}
		return nil
	})
	return tc, err
}

// statsOfSlices is the statistics a writer records for a row group holding
// (some rows of) these slices: per key column the least and greatest
// non-null encoded part.
func statsOfSlices(slices []partition.Slice, nkeys int) []partition.StatsRange {
	out := make([]partition.StatsRange, nkeys)
	for c := range out {
		sr := partition.StatsRange{}
		for _, s := range slices {
			p := s.Parts[c]
			if partition.IsNullKey(p) {
				sr.MayHaveNulls = true
				continue
			}
			if !sr.MinMax || string(p) < string(sr.Lo) {
				sr.Lo = p
			}
			if !sr.MinMax || string(p) > string(sr.Hi) {
				sr.Hi = p
			}
			sr.MinMax = true
		}
		if !sr.MinMax {
			sr.MayHaveNulls = true
		}
		out[c] = sr
	}
	return out
}

// Before is every slice's read cost on the input, computed right after
// the key pass so the per-row-group vectors need not be kept.
type Before struct {
	// SliceRowGroups and SliceBytes are, per slice rank, the row groups
	// and bytes a reader of that slice fetches from the input.
	SliceRowGroups []int
	SliceBytes     []int64
	// NoStats of RowGroups input row groups lack slice-key statistics.
	NoStats, RowGroups int
}

// CostsBefore reads the input's page indexes and prices every slice.
func CostsBefore(tbl *source.Table, sliceKeys []string, hist *partition.Histogram, vectors []*partition.RowGroupSlices) (Before, error) {
	b := Before{SliceRowGroups: make([]int, len(hist.Slices)), SliceBytes: make([]int64, len(hist.Slices))}
	// File by file: a slice's cost is a sum over row groups, plus every
	// footer, so the model never holds more than one file's row groups.
	tc, err := costOfFiles(tbl, sliceKeys, vectors, costScope{end: -1, pages: true}, func(tc *TableCost) {
		footer, folders := tc.footer, tc.folderKeys
		tc.footer, tc.folderKeys = 0, 0 // added once, at the end
		n, by := tc.readsAll(hist.Slices)
		for i := range n {
			b.SliceRowGroups[i] += n[i]
			b.SliceBytes[i] += by[i]
		}
		tc.footer, tc.folderKeys = footer, folders
		b.RowGroups += len(tc.rgs)
	})
	if err != nil {
		return Before{}, err
	}
	for i, s := range hist.Slices {
		b.SliceBytes[i] += tc.footerFor(s.Parts)
	}
	b.NoStats = tc.noStats
	return b, nil
}

// PresentBytes is a key task's share of CostsBefore, for the row groups
// [first, end) of the table it read: per slice of the task (parts[s]), the
// bytes a reader of that slice fetches from the columns other than the
// slice keys of the row groups holding its rows (vectors[g-first] maps a
// slice index to the vectors holding its rows in row group g). It reads
// those row groups' page indexes.
func PresentBytes(tbl *source.Table, sliceKeys []string, first, end int, parts [][][]byte, vectors []*partition.RowGroupSlices) ([]int64, error) {
	out := make([]int64, len(parts))
	if len(sliceKeys) == 0 || first >= end {
		return out, nil // no vectors: the merge counts whole row groups
	}
	_, err := costOfFiles(tbl, sliceKeys, vectors, costScope{first: first, end: end, pages: true}, func(tc *TableCost) {
		for r := range tc.rgs {
			rg := &tc.rgs[r]
			if rg.vectors == nil {
				continue
			}
			for j, id := range rg.vectors.IDs {
				if int(id) < len(parts) && rg.mayContain(parts[id]) {
					out[id] += rg.fetchBytes(rg.vectors.VectorsAt(j))
				}
			}
		}
	})
	return out, err
}

// CostsBeforeSummed is CostsBefore from the key tasks' PresentBytes,
// summed per slice rank (present): it adds what every reader of a slice
// reads regardless of where its rows lie (footers, and the slice-key
// columns of every row group the statistics do not exclude), from the
// footers alone.
func CostsBeforeSummed(tbl *source.Table, sliceKeys []string, hist *partition.Histogram, present []int64) (Before, error) {
	b := Before{SliceRowGroups: make([]int, len(hist.Slices)), SliceBytes: make([]int64, len(hist.Slices))}
	if len(present) != len(hist.Slices) {
		return b, errs.BadInputf("key pass: %d slice costs for %d slices", len(present), len(hist.Slices))
	}
	tc, err := costOfFiles(tbl, sliceKeys, nil, costScope{end: -1}, func(tc *TableCost) {
		for i, s := range hist.Slices {
			n, by := 0, int64(0)
			for r := range tc.rgs {
				rg := &tc.rgs[r]
				if !rg.mayContain(s.Parts) {
					continue
				}
				n++
				by += rg.filterBytes(len(sliceKeys) > 0) // the key pass records vectors whenever there are slice keys
			}
			b.SliceRowGroups[i] += n
			b.SliceBytes[i] += by
		}
		b.RowGroups += len(tc.rgs)
	})
	if err != nil {
		return Before{}, err
	}
	for i, s := range hist.Slices {
		b.SliceBytes[i] += tc.footerFor(s.Parts) + present[i]
	}
	b.NoStats = tc.noStats
	return b, nil
}

// SlicesOf fills the per-slice read costs before and after (out)
// for the histogram's slices, listing the largest `limit` (negative: all).
func SlicesOf(hist *partition.Histogram, keys []string, before Before, out *TableCost, queries []int64, limit int) Slices {
	rs := Slices{List: []Slice{}}
	var all []Slice
	afterRGs, afterBytes := out.readsAll(hist.Slices)
	for i, s := range hist.Slices {
		if s.Rows == 0 {
			continue
		}
		r := Slice{Key: manifests.KeyValues{}, Rows: s.Rows}
		for k, name := range keys {
			r.Key = append(r.Key, manifests.KV{Name: name, Value: s.Values[k]})
		}
		if queries != nil {
			r.Queries = queries[i]
		}
		r.RowGroupsBefore, r.ReadBytesBefore = before.SliceRowGroups[i], before.SliceBytes[i]
		r.RowGroupsAfter, r.ReadBytesAfter = afterRGs[i], afterBytes[i]
		rs.Totals.Rows += r.Rows
		rs.Totals.Queries += r.Queries
		rs.Totals.ReadBytesBefore += r.ReadBytesBefore
		rs.Totals.ReadBytesAfter += r.ReadBytesAfter
		rs.Totals.RowGroupsBefore += int64(r.RowGroupsBefore)
		rs.Totals.RowGroupsAfter += int64(r.RowGroupsAfter)
		all = append(all, r)
	}
	rs.Count = len(all)
	if rs.Totals.ReadBytesAfter > 0 {
		rs.Totals.ReadReduction = float64(rs.Totals.ReadBytesBefore) / float64(rs.Totals.ReadBytesAfter)
	}
	sort.SliceStable(all, func(a, b int) bool { return all[a].Rows > all[b].Rows })
	if limit >= 0 && len(all) > limit {
		all = all[:limit]
	}
	rs.List = append(rs.List, all...)
	rs.Listed = len(rs.List)
	return rs
}
