package verify

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/cespare/xxhash/v2"

	"github.com/relayout/relayout/dedupe"
	"github.com/relayout/relayout/fingerprint"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/plan"
	"github.com/relayout/relayout/tensors"
)

// checkOutputFields checks the fields that describe the whole output and
// that checkManifestFields leaves: the recorded config against its hash and
// the keys, a packed output's column lists and item counts, the
// fingerprint's algorithm, the inputs' rows against the output's, and the
// tensor section's description of itself. A reduce task's check of its own
// partition (Part) skips them: its manifest holds one partition's files,
// without the packing's lists or the shards.
func checkOutputFields(m *manifests.Manifest) string {
	if p := checkConfig(m); p != "" {
		return p
	}
	if p := checkPacking(m); p != "" {
		return p
	}
	if m.Fingerprint.Algorithm != fingerprint.Algorithm {
		return fmt.Sprintf("fingerprint: algorithm %q; this relayout computes %q (a newer relayout wrote it, or the manifest is damaged)", m.Fingerprint.Algorithm, fingerprint.Algorithm)
	}
	if p := checkInputs(m); p != "" {
		return p
	}
	if m.Tensors != nil {
		return checkTensorFields(m)
	}
	return ""
}

// checkInputs checks that what went in is what came out: a run's inputs
// hold the output's flat rows (an unpack's inputs are a packed output's
// files, which count queries).
func checkInputs(m *manifests.Manifest) string {
	var in int64
	for k, i := range m.Inputs {
		if i.Path == "" || i.Bytes <= 0 {
			return fmt.Sprintf("inputs: input %d is %q of %d bytes", k, i.Path, i.Bytes)
		}
		if i.Rows < 0 || i.Rows > m.Fingerprint.Rows-in {
			return fmt.Sprintf("inputs: %s holds %d rows, where the inputs before it hold %d of the output's %d", i.Path, i.Rows, in, m.Fingerprint.Rows)
		}
		in += i.Rows
	}
	if in != m.Fingerprint.Rows && unpackOf(m) == "" {
		return fmt.Sprintf("inputs: %d rows went in, the fingerprint counts %d out", in, m.Fingerprint.Rows)
	}
	return ""
}

// unpackOf is the config_hash of the packed output an unpack's output was
// unpacked from ("" for a run's output, or a config that does not decode).
func unpackOf(m *manifests.Manifest) string {
	var c struct {
		UnpackOf string `json:"unpack_of"`
	}
	json.Unmarshal(m.Config, &c)
	return c.UnpackOf
}

// checkConfig checks the recorded options against their hash (config_hash,
// which the plan and every task manifest carry too) and against what the
// manifest says was made of them: the slice keys, a packed output's query
// key, and whether tensors were written and how they were cut. (Sort keys
// are compared with the files' sorting columns, checkSorting.)
func checkConfig(m *manifests.Manifest) string {
	// The hash is of the config as its writer marshaled it: a run's
	// options (plan.Options.Config), or an unpack's source and keys (a
	// map, so in key order). Decoded and marshaled again, the config
	// gives the same bytes whatever a tool reading and writing the
	// manifest did to its layout.
	o, err := plan.DecodeConfig(m.Config)
	if err != nil {
		return fmt.Sprintf("config: %v", err)
	}
	var b []byte
	if unpackOf(m) != "" {
		var c map[string]any
		if err := json.Unmarshal(m.Config, &c); err != nil {
			return fmt.Sprintf("config: %v", err)
		}
		b, _ = json.Marshal(c)
	} else {
		b, _ = o.Config()
	}
	if h := fmt.Sprintf("%016x", xxhash.Sum64(b)); h != m.ConfigHash {
		return fmt.Sprintf("config hashes to %s, config_hash says %s (the config or its hash was edited)", h, m.ConfigHash)
	}
	if !slices.Equal(o.SliceKeys, m.SliceKeys) {
		return fmt.Sprintf("slice_keys %q, the config's are %q", m.SliceKeys, o.SliceKeys)
	}
	if m.Packing != nil && !slices.Equal(o.QueryKey, m.Packing.QueryKey) {
		return fmt.Sprintf("packing: query_key %q, the config's is %q", m.Packing.QueryKey, o.QueryKey)
	}
	if (o.Tensors != nil) != (m.Tensors != nil) {
		return fmt.Sprintf("the config asks for tensors: %v; the manifest describes tensors: %v", o.Tensors != nil, m.Tensors != nil)
	}
	if t := m.Tensors; t != nil && (t.ShardBytes != o.Tensors.ShardBytes || t.Order.BlockSamples != o.Tensors.BlockSamples || t.ShardBlocks != o.Tensors.ShardBlocks) {
		return fmt.Sprintf("tensors: shard_bytes %d, block_samples %d and shard_blocks %d, the config's are %d, %d and %d", t.ShardBytes, t.Order.BlockSamples, t.ShardBlocks, o.Tensors.ShardBytes, o.Tensors.BlockSamples, o.Tensors.ShardBlocks)
	}
	return ""
}

// checkPacking checks a packed output's packing section against itself,
// the schema and the slices (and, for a flat output, that no slice counts
// items). What it checks is what `unpack`, a deep verify and the loaders
// rely on: the query and item columns partition the flat columns, the
// query key is among the query columns, the rows are sorted by the query
// key, and the items add up.
func checkPacking(m *manifests.Manifest) string {
	p := m.Packing
	if p == nil {
		for si, s := range m.Slices {
			if s.Items != 0 {
				return fmt.Sprintf("slice %d counts %d items, but the output is not packed", si, s.Items)
			}
		}
		return ""
	}
	const query, item = 1, 2
	level := map[string]int{}
	for _, l := range []struct {
		name  string
		cols  []string
		level int
	}{{"query_columns", p.QueryColumns, query}, {"item_columns", p.ItemColumns, item}} {
		for _, c := range l.cols {
			if c == "" || level[c] != 0 {
				return fmt.Sprintf("packing: %s names %q, which is empty or named twice", l.name, c)
			}
			level[c] = l.level
		}
	}
	if len(p.ItemColumns) == 0 {
		return "packing: no item_columns"
	}
	if len(p.FlatColumns) != len(level) {
		return fmt.Sprintf("packing: flat_columns names %d columns, query_columns and item_columns %d", len(p.FlatColumns), len(level))
	}
	flat := map[string]bool{}
	for _, c := range p.FlatColumns {
		if level[c] == 0 || flat[c] {
			return fmt.Sprintf("packing: flat_columns names %q, which is not a query or item column or is named twice", c)
		}
		flat[c] = true
	}
	if len(p.QueryKey) == 0 {
		return "packing: no query_key"
	}
	for i, k := range p.QueryKey {
		if level[k] != query || slices.Contains(p.QueryKey[:i], k) {
			return fmt.Sprintf("packing: query key %q is not a query column, or is named twice", k)
		}
	}
	for _, c := range p.MovedToItems {
		if level[c] != item {
			return fmt.Sprintf("packing: moved_to_items names %q, which is not an item column", c)
		}
	}
	for _, c := range p.ItemOrder {
		if !flat[c] {
			return fmt.Sprintf("packing: item_order names %q, which is not a column", c)
		}
	}
	if !slices.Equal(m.SortKeys, p.QueryKey) {
		return fmt.Sprintf("sort_keys %q: a packed output's rows are sorted by its query key %q", m.SortKeys, p.QueryKey)
	}
	// The schema: the query columns in order, then the items list.
	if len(m.Schema) != len(p.QueryColumns)+1 || m.Schema[len(m.Schema)-1].Name != dedupe.ItemsColumn {
		return fmt.Sprintf("packing: the schema has %d columns, want the %d query columns and %q last", len(m.Schema), len(p.QueryColumns), dedupe.ItemsColumn)
	}
	for i, c := range p.QueryColumns {
		if m.Schema[i].Name != c {
			return fmt.Sprintf("packing: query column %d is %q, the schema's column %d is %q", i, c, i, m.Schema[i].Name)
		}
	}
	// The items: at least one per query, adding up to the packing's.
	var items int64
	for si, s := range m.Slices {
		if s.Items < s.Rows || (s.Rows == 0) != (s.Items == 0) || s.Items > p.Items-items {
			return fmt.Sprintf("packing: slice %d holds %d items in %d queries, where every query holds at least one and the slices before it %d of the output's %d", si, s.Items, s.Rows, items, p.Items)
		}
		items += s.Items
	}
	if len(m.Slices) > 0 && items != p.Items {
		return fmt.Sprintf("packing: the slices hold %d items, packing says %d", items, p.Items)
	}
	d, q := p.ItemsPerQuery, p.Queries
	switch {
	case q == 0 && (p.Items != 0 || d != manifests.Distribution{}):
		return fmt.Sprintf("packing: %d items and items_per_query %+v in no queries", p.Items, d)
	case q > 0 && !(1 <= d.Min && d.Min <= d.P50 && d.P50 <= d.P90 && d.P90 <= d.P99 && d.P99 <= d.Max && d.Max <= p.Items &&
		d.Min <= p.Items/q && d.Max >= (p.Items+q-1)/q):
		return fmt.Sprintf("packing: items_per_query %+v cannot describe %d items in %d queries", d, p.Items, q)
	}
	// The report's sizes: the flat input's bytes and the packed output's.
	var inBytes int64
	for _, i := range m.Inputs {
		inBytes += i.Bytes
	}
	if p.BytesAfter != m.Totals.Bytes || p.BytesBefore != inBytes {
		return fmt.Sprintf("packing: bytes_before %d and bytes_after %d, where the inputs hold %d bytes and the files %d", p.BytesBefore, p.BytesAfter, inBytes, m.Totals.Bytes)
	}
	if m.Tensors != nil && m.Tensors.Totals.Items != p.Items {
		return fmt.Sprintf("tensors: the shards hold %d items, packing says %d", m.Tensors.Totals.Items, p.Items)
	}
	return ""
}

// checkTensorFields checks the tensor section's description of itself:
// format and sample, the schema against its hash (spec_hash, which every
// shard's header repeats and verifyShard compares), header hashes on every
// shard or none, and the shards' slice lists against the manifest's slices.
func checkTensorFields(m *manifests.Manifest) string {
	t := m.Tensors
	if t.Format != "safetensors" {
		return fmt.Sprintf("tensors: format %q, want \"safetensors\"", t.Format)
	}
	sample := tensors.LevelRow
	if m.Packing != nil {
		sample = tensors.LevelQuery
	}
	if t.Sample != sample {
		return fmt.Sprintf("tensors: a sample is %q, want %q for this output", t.Sample, sample)
	}
	// The writer hashes the schema it writes (tensors.Plan.Hash): any
	// edit of a tensor's level, kind, shape, columns or transform shows.
	if h := manifests.SpecHash(t.Schema); h != t.SpecHash {
		return fmt.Sprintf("tensors: the schema hashes to %s, spec_hash says %s (the schema or its hash was edited)", h, t.SpecHash)
	}
	var hashed int
	for _, sh := range t.Shards {
		if sh.HeaderXXHash64 != "" {
			hashed++
		}
	}
	if hashed != 0 && hashed != len(t.Shards) {
		return fmt.Sprintf("tensors: %d of %d shards record a header_xxhash64; one relayout writes them on every shard or on none", hashed, len(t.Shards))
	}
	// Each shard's slices tile its samples, and each lies where its slice
	// continues in the output order.
	done := make([]int64, len(m.Slices))
	for k, sh := range t.Shards {
		var pos int64
		for j, ss := range sh.Slices {
			if ss.Slice < 0 || ss.Slice >= len(m.Slices) || ss.FirstRow != pos || ss.Rows < 1 || ss.Rows > m.Slices[ss.Slice].Rows-done[ss.Slice] ||
				sh.FirstRow+pos != m.Slices[ss.Slice].FirstRow+done[ss.Slice] {
				return fmt.Sprintf("tensors: shard %d (%s): slice entry %d (slice %d, samples [%d, +%d)) does not continue the shard or its slice", k, sh.Path, j, ss.Slice, ss.FirstRow, ss.Rows)
			}
			done[ss.Slice] += ss.Rows
			pos += ss.Rows
		}
		if len(m.Slices) > 0 && pos != sh.Rows {
			return fmt.Sprintf("tensors: shard %d (%s): its slice entries cover %d of its %d samples", k, sh.Path, pos, sh.Rows)
		}
	}
	for i, s := range m.Slices {
		if done[i] != s.Rows {
			return fmt.Sprintf("tensors: the shards hold %d samples of slice %d, which has %d", done[i], i, s.Rows)
		}
	}
	return ""
}

// checkSorting compares the sorting columns a file's row groups declare
// (slice keys, then sort keys, as the writer sets them; Hive folder keys
// are not in the file) with the manifest's keys. Row groups that declare
// none are not compared.
func checkSorting(md *metadata.FileMetaData, m *manifests.Manifest) string {
	var want []string
	for _, k := range append(slices.Clone(m.SliceKeys), m.SortKeys...) {
		if m.Partitioning == nil || !slices.Contains(m.Partitioning.Keys, k) {
			want = append(want, k)
		}
	}
	for g := 0; g < md.NumRowGroups(); g++ {
		sc := md.RowGroup(g).SortingColumns()
		if len(sc) == 0 {
			continue
		}
		got := make([]string, len(sc))
		for i, c := range sc {
			if c.ColumnIdx < 0 || int(c.ColumnIdx) >= md.Schema.NumColumns() {
				return fmt.Sprintf("row group %d: sorting column %d of %d columns", g, c.ColumnIdx, md.Schema.NumColumns())
			}
			got[i] = md.Schema.Column(int(c.ColumnIdx)).Path()
		}
		if !slices.Equal(got, want) {
			return fmt.Sprintf("row group %d is sorted by %q, the manifest's slice and sort keys are %q", g, got, want)
		}
	}
	return ""
}

// checkPackedItems compares a packed file's item struct with the packing's
// item columns (checkPacking compared the query columns with the schema).
func checkPackedItems(schema *arrow.Schema, p *manifests.Packing) string {
	st, err := dedupe.ItemStruct(schema)
	if err != nil {
		return err.Error()
	}
	var got []string
	for _, f := range st.Fields() {
		got = append(got, f.Name)
	}
	if !slices.Equal(got, p.ItemColumns) {
		return fmt.Sprintf("the items hold %q, packing's item_columns say %q", got, p.ItemColumns)
	}
	return ""
}
