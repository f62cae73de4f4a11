package writer

import (
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/schema"
)

// sampleRows is how many rows of the sample decide encodings.
const sampleRows = 32 << 10

// SampleRows is how many rows of a sample decide encodings (with lists,
// the rows that hold as many of their values: TrimSample).
const SampleRows = sampleRows

// SampleBytes bounds the rows of a flat sample that choose encodings: a
// table of wide rows (1,001 float columns, images) keeps as many of its
// first rows as hold SampleBytes, not sampleRows rows (80 MB of the
// 1,001-column table, held by a run to its end, written by the plan step
// for its tasks and read by each: a reduce task at --memory-limit 210MiB
// peaked at 264 MiB).
const SampleBytes = 16 << 20

// SampleRowsOf is how many of sample's first rows choose encodings: the
// first sampleRows, or as many as hold the first sampleRows values of
// every list column; of a table without lists whose rows hold more than
// twice SampleBytes, as many as hold about SampleBytes, one at least.
func SampleRowsOf(sample arrow.RecordBatch) int64 {
	n := sample.NumRows()
	rows := min(n, int64(sampleRows))
	lists := false
	for _, c := range sample.Columns() {
		l, ok := c.(array.ListLike)
		if !ok {
			continue
		}
		lists = true
		if rows == n {
			continue
		}
		start, _ := l.ValueOffsets(0)
		need := n
		for r := 0; r < l.Len(); r++ {
			if _, end := l.ValueOffsets(r); end-start >= sampleRows {
				need = int64(r) + 1
				break
			}
		}
		rows = max(rows, need)
	}
	if lists || n == 0 {
		return rows
	}
	var bytes int64
	for _, c := range sample.Columns() {
		bytes += bufferBytes(c.Data())
	}
	// Above twice SampleBytes only, so that a trimmed sample (about
	// SampleBytes, its buffers padded) keeps all its rows.
	if bytes > 2*SampleBytes {
		rows = min(rows, max(int64(float64(SampleBytes)/float64(bytes)*float64(n)), 1))
	}
	return rows
}

// bufferBytes is the bytes of d's buffers and its children's.
func bufferBytes(d arrow.ArrayData) int64 {
	var n int64
	for _, b := range d.Buffers() {
		if b != nil {
			n += int64(b.Len())
		}
	}
	for _, c := range d.Children() {
		n += bufferBytes(c)
	}
	return n
}

// chooseEncodings picks each leaf column's encoding from a sample of the data:
// dictionary encoding when values repeat (distinct <= 1/4 of the sampled
// values), else BYTE_STREAM_SPLIT for floats (it lets zstd find the
// exponent bytes' redundancy), DELTA_BINARY_PACKED for integers and PLAIN for
// the rest. A float column whose sample holds NaNs of two bit patterns gets
// no dictionary (mixedNaNs). arrow-go's default, a dictionary for every column abandoned at
// 1 MiB, costs time on high-cardinality columns and bloats them. The choice
// depends only on the sample, so it is deterministic. It also returns the
// largest average bytes of a leaf value in the sample (valueBytes), from
// which pageBatch sizes the batches a page is cut between.
func chooseEncodings(sample arrow.RecordBatch, pqs *schema.Schema) (props []parquet.WriterProperty, valueBytes float64) {
	if sample == nil || sample.NumRows() == 0 {
		return nil, 0
	}
	rows := SampleRowsOf(sample)
	for i := 0; i < pqs.NumColumns(); i++ {
		col := pqs.Column(i)
		path := col.Path()
		cp := col.ColumnPath()
		top, depth := cp[0], len(cp)
		// Packed outputs nest item columns as items.list.element.<name>;
		// the sample is flat, so look those up by their own name.
		if depth >= 4 && cp[0] == "items" && cp[1] == "list" && cp[2] == "element" {
			top, depth = cp[3], depth-3
		}
		idx := sample.Schema().FieldIndices(top)
		if len(idx) != 1 {
			continue
		}
		leaf := leafArray(sample.Column(idx[0]), depth)
		if leaf == nil {
			continue
		}
		n := min(leaf.Len(), sampleRows)
		if depth == 1 {
			n = min(n, int(rows))
		}
		if n == 0 {
			continue
		}
		nonNull := n - nullsIn(leaf, n)
		if nonNull > 0 {
			valueBytes = max(valueBytes, float64(dataBytes(leaf, n))/float64(nonNull))
		}
		// Floats repeated in runs (query-level features) compress as well
		// with zstd as with a dictionary, which costs a hash per value;
		// keep dictionaries for floats only at very low cardinality.
		ratio := 4
		if pt := col.PhysicalType(); pt == parquet.Types.Float || pt == parquet.Types.Double {
			ratio = 16
		}
		// Counting stops past nonNull/ratio distinct values: the choice
		// is the same, and a high-cardinality column costs a quarter (a
		// sixteenth for floats) of the hashing.
		distinct, ok := countDistinct(leaf, n, nonNull/ratio+1)
		if !ok {
			continue
		}
		if (nonNull == 0 || distinct*ratio <= nonNull) && !mixedNaNs(leaf, n) {
			continue // keep the dictionary
		}
		props = append(props, parquet.WithDictionaryFor(path, false))
		switch col.PhysicalType() {
		case parquet.Types.Float, parquet.Types.Double:
			props = append(props, parquet.WithEncodingFor(path, parquet.Encodings.ByteStreamSplit))
		case parquet.Types.Int32, parquet.Types.Int64:
			props = append(props, parquet.WithEncodingFor(path, parquet.Encodings.DeltaBinaryPacked))
		}
	}
	return props, valueBytes
}

// pageBatch is how many values arrow-go writes between its checks of a
// page's size (its WriteBatchSize, 1,024 by default) for leaf values of
// valueBytes bytes on average, so that a page ends near pageBytes: arrow-go
// cuts a page only between batches, so 1,024 images of 1 MB made one page
// of a whole row group (120 MB at --page-bytes 1MiB), which a reader then
// holds whole to read one row. 0 keeps arrow-go's default, as it does for
// every column of values under a KiB at the default page size.
func pageBatch(valueBytes float64, pageBytes int64) int64 {
	const arrowDefault = 1024
	if valueBytes <= 0 || float64(pageBytes)/valueBytes >= arrowDefault {
		return 0
	}
	return max(int64(float64(pageBytes)/valueBytes), 1)
}

// dataBytes is the bytes of a's first n values' data: the value bytes of
// variable-length types, the width of fixed-length ones (0 for types of
// neither kind).
func dataBytes(a arrow.Array, n int) int64 {
	switch v := a.(type) {
	case *array.String:
		o := v.ValueOffsets()
		return int64(o[n] - o[0])
	case *array.Binary:
		o := v.ValueOffsets()
		return int64(o[n] - o[0])
	case *array.LargeString:
		o := v.ValueOffsets()
		return o[n] - o[0]
	case *array.LargeBinary:
		o := v.ValueOffsets()
		return o[n] - o[0]
	case *array.StringView:
		var b int64
		for i := 0; i < n; i++ {
			b += int64(v.ValueLen(i))
		}
		return b
	case *array.BinaryView:
		var b int64
		for i := 0; i < n; i++ {
			b += int64(v.ValueLen(i))
		}
		return b
	}
	if fw, ok := a.DataType().(arrow.FixedWidthDataType); ok {
		return int64(n) * int64(max(fw.BitWidth()/8, 1))
	}
	return 0
}

// leafArray returns the primitive values under a top-level column whose
// Parquet path has depth elements: the column itself (depth 1) or the values
// of a list of primitives (depth 3: name.list.element). Other shapes: nil.
func leafArray(a arrow.Array, depth int) arrow.Array {
	switch depth {
	case 1:
		return a
	case 3:
		if l, ok := a.(array.ListLike); ok {
			switch l.ListValues().DataType().ID() {
			case arrow.LIST, arrow.LARGE_LIST, arrow.STRUCT, arrow.MAP, arrow.FIXED_SIZE_LIST:
				return nil
			}
			return l.ListValues()
		}
	}
	return nil
}

// mixedNaNs reports whether a's first n values are floats holding NaNs of
// more than one bit pattern (np.nan and the -NaN an x86 0/0 gives, say):
// arrow-go's dictionary encoder files every NaN under the first one's bits,
// so such a column is written without a dictionary to keep them.
func mixedNaNs(a arrow.Array, n int) bool {
	first, seen := uint64(0), false
	check := func(bits uint64) bool {
		if !seen {
			first, seen = bits, true
		}
		return bits != first
	}
	switch v := a.(type) {
	case *array.Float32:
		for i, f := range v.Float32Values()[:n] {
			if f != f && v.IsValid(i) && check(uint64(math.Float32bits(f))) {
				return true
			}
		}
	case *array.Float64:
		for i, f := range v.Float64Values()[:n] {
			if f != f && v.IsValid(i) && check(math.Float64bits(f)) {
				return true
			}
		}
	}
	return false
}

func nullsIn(a arrow.Array, n int) int {
	if a.NullN() == 0 {
		return 0
	}
	c := 0
	for i := 0; i < n; i++ {
		if a.IsNull(i) {
			c++
		}
	}
	return c
}

// countDistinct counts the distinct non-null values among a's first n,
// stopping once it has found limit of them; ok is false for types it does
// not count.
func countDistinct(a arrow.Array, n, limit int) (distinct int, ok bool) {
	switch v := a.(type) {
	case *array.Float32:
		return distinctOf(n, limit, func(i int) uint64 { return uint64(math.Float32bits(v.Value(i))) }, v), true
	case *array.Float64:
		return distinctOf(n, limit, func(i int) uint64 { return math.Float64bits(v.Value(i)) }, v), true
	case *array.Int32:
		return distinctOf(n, limit, func(i int) uint64 { return uint64(v.Value(i)) }, v), true
	case *array.Int64:
		return distinctOf(n, limit, func(i int) uint64 { return uint64(v.Value(i)) }, v), true
	case *array.Timestamp:
		return distinctOf(n, limit, func(i int) uint64 { return uint64(v.Value(i)) }, v), true
	case *array.String:
		seen := make(map[string]struct{}, min(n/4, limit))
		for i := 0; i < n && len(seen) < limit; i++ {
			if !v.IsNull(i) {
				seen[v.Value(i)] = struct{}{}
			}
		}
		return len(seen), true
	case *array.Binary:
		seen := make(map[string]struct{}, min(n/4, limit))
		for i := 0; i < n && len(seen) < limit; i++ {
			if !v.IsNull(i) {
				seen[string(v.Value(i))] = struct{}{}
			}
		}
		return len(seen), true
	}
	return 0, false
}

func distinctOf(n, limit int, val func(int) uint64, a arrow.Array) int {
	seen := make(map[uint64]struct{}, min(n/4, limit))
	for i := 0; i < n && len(seen) < limit; i++ {
		if !a.IsNull(i) {
			seen[val(i)] = struct{}{}
		}
	}
	return len(seen)
}

// TrimSample returns a compact copy of the rows of sample that
// chooseEncodings reads (SampleRowsOf), so a caller can keep the sample for
// a whole run without holding a whole decoded row group. The encodings
// chosen from the copy are those chosen from sample. The caller releases
// both.
func TrimSample(sample arrow.RecordBatch, mem memory.Allocator) (arrow.RecordBatch, error) {
	if sample == nil {
		return nil, nil
	}
	n := sample.NumRows()
	rows := SampleRowsOf(sample)
	if rows == n {
		sample.Retain()
		return sample, nil
	}
	cols := make([]arrow.Array, sample.NumCols())
	for i, c := range sample.Columns() {
		s := array.NewSlice(c, 0, rows)
		cp, err := array.Concatenate([]arrow.Array{s}, mem)
		s.Release()
		if err != nil {
			for _, p := range cols[:i] {
				p.Release()
			}
			return nil, err
		}
		cols[i] = cp
	}
	rec := array.NewRecordBatch(sample.Schema(), cols, rows)
	for _, c := range cols {
		c.Release()
	}
	return rec, nil
}
