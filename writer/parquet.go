package writer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/arrow-go/v18/parquet/schema"
	"github.com/cespare/xxhash/v2"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/source"
	"github.com/relayout/relayout/storage"
)

// ParquetOptions configures the Parquet sink.
type ParquetOptions struct {
	// ZstdLevel is the zstd compression level (default 3).
	ZstdLevel int
	// PageBytes is the target data page size (default 1 MiB).
	PageBytes int64
	// DictionaryPageBytes caps a dictionary page before falling back to
	// plain encoding (default 1 MiB).
	DictionaryPageBytes int64
	// SortingColumns names the top-level columns the rows are sorted by.
	SortingColumns []string
	// Metadata is written as file key-value metadata, in key order.
	Metadata [][2]string
	// NoPageCRCs leaves page headers as arrow-go writes them, without the
	// CRC32 that is otherwise put in every page header (pagecrc.go).
	NoPageCRCs bool
	// CreatedBy is the footer's created_by.
	CreatedBy string
	// Parallel is how many columns are encoded at once (default 1).
	Parallel int
	// Sample is a sample of the rows (e.g. the first input row group) from
	// which each column's encoding is chosen; nil keeps arrow-go's defaults.
	Sample arrow.RecordBatch
	// Encodings, when set, are the encodings chosen once (NewEncodings)
	// for every sink of a run, instead of choosing them from Sample again
	// for each (a run of many small files, e.g. Hive folders).
	Encodings *Encodings
	// FirstFile is the global index of the layout's first file, for a sink
	// that writes one part of a larger layout (a reduce task): file i of
	// the layout is named FileName(FirstFile + i).
	FirstFile int
	// HiveColumns, when set, names top-level columns (in folder order)
	// whose values name each file's Hive partition folder
	// (parquet/k1=v1/k2=v2/part-NNNNN.parquet); they are left out of the
	// files. Every row of a file must hold the same values (the layout
	// cuts files where they change); a row that does not is an error.
	HiveColumns []string
}

func (o ParquetOptions) withDefaults() ParquetOptions {
	if o.ZstdLevel == 0 {
		o.ZstdLevel = 3
	}
	if o.PageBytes == 0 {
		o.PageBytes = 1 << 20
	}
	if o.DictionaryPageBytes == 0 {
		o.DictionaryPageBytes = 1 << 20
	}
	return o
}

// FileLayout is where one planned file's rows go: its first row's global
// output index and its row groups' row counts. The planner cuts; the
// writer writes exactly these row groups, never cutting by size itself.
type FileLayout struct {
	Start     int64
	RowGroups []int64
}

// Rows returns the file's planned rows.
func (f FileLayout) Rows() int64 {
	var n int64
	for _, r := range f.RowGroups {
		n += r
	}
	return n
}

// Parquet is a sink for the ordered rows of a table.
type Parquet struct {
	ctx     context.Context
	out     storage.Location
	schema  *arrow.Schema
	layout  []FileLayout // nil: manual mode
	opts    ParquetOptions
	props   *parquet.WriterProperties
	arrow   pqarrow.ArrowWriterProperties
	written []manifests.File
	// fast is set when every column can be encoded in parallel (fast.go).
	fast   []fastCol
	pqRoot *schema.GroupNode
	// utc: in the nested path, which takes no Parquet schema, the schema
	// elements whose TIME the footer rewrite declares UTC (utcElements).
	utc     map[int]int32
	workers int

	// current file
	fileIdx int
	rgIdx   int
	rgLeft  int64 // rows left in the current row group
	cur     *openFile
	next    int64 // global index of the next row

	// manual mode
	rgOpen      bool
	manualStart int64 // first row of the current file

	// Hive folders: hiveIdx are the folder columns' indices in the rows
	// written, keepIdx the others (the files' columns); peek is the record
	// holding the next file's first row, at peekRow.
	hiveIdx, keepIdx []int
	peek             arrow.RecordBatch
	peekRow          int64
}

type openFile struct {
	name   string
	vals   []*string // the folder values (Hive output)
	key    string
	cancel context.CancelFunc
	bw     io.WriteCloser
	buf    *bufio.Writer // between hw and bw: arrow-go writes a page header, a page, a column chunk's index at a time
	hw     *hashWriter
	cw     *pageCRC            // between arrow-go and hw: adds page CRCs (pagecrc.go)
	groups int                 // row groups started
	fw     *pqarrow.FileWriter // generic path
	pw     *file.Writer        // fast path
	rgw    file.BufferedRowGroupWriter
}

type hashWriter struct {
	w io.Writer
	h *xxhash.Digest
	n int64
}

func (h *hashWriter) Write(p []byte) (int, error) {
	n, err := h.w.Write(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	return n, err
}

// fileBuffer is the bytes of a file gathered into one write.
const fileBuffer = 256 << 10

// Unwritable is the error for an input schema arrow-go cannot write as
// Parquet (err says why): bad input, exit 3, as the type cannot be carried
// over (a shredded variant without its value field, for one). It names the
// first column that cannot be written alone, where one cannot. The run and
// the dry run's sample refuse in the same words.
func Unwritable(sc *arrow.Schema, err error) error {
	what := "this schema"
	for _, f := range sc.Fields() {
		if !writable(arrow.NewSchema([]arrow.Field{f}, nil)) {
			what = fmt.Sprintf("column %q (%s)", f.Name, f.Type)
			break
		}
	}
	return errs.WithHint(errs.Or(errs.BadInput, fmt.Errorf("unsupported: cannot write %s as Parquet: %w", what, err)),
		"leave the file out of --input, or re-export that column as a type Parquet writers accept")
}

// writable reports whether arrow-go writes sc as Parquet, as a run's
// files are written.
func writable(sc *arrow.Schema) bool {
	fw, err := pqarrow.NewFileWriter(sc, io.Discard, parquet.NewWriterProperties(), pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		return false
	}
	return fw.Close() == nil
}

// FileName returns the relative path of output file i.
func FileName(i int) string { return fmt.Sprintf("parquet/part-%05d.parquet", i) }

// NewParquet returns a sink writing layout's files under out. With a nil
// layout it is in manual mode: the caller cuts row groups (EndRowGroup)
// and files (EndFile), as packing does to keep queries whole.
func NewParquet(ctx context.Context, out storage.Location, schema *arrow.Schema, layout []FileLayout, opts ParquetOptions) (*Parquet, error) {
	opts = opts.withDefaults()
	schema = withoutArrowSchema(schema)
	w := &Parquet{ctx: ctx, out: out, schema: schema, layout: layout, opts: opts, workers: max(opts.Parallel, 1)}
	if len(opts.HiveColumns) > 0 {
		var err error
		if schema, err = w.hiveSchema(schema); err != nil {
			return nil, err
		}
		w.schema = schema
	}
	w.arrow = pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())
	base := baseProps(opts)
	probe := parquet.NewWriterProperties(base...)
	pqs, err := pqarrow.ToParquet(schema, probe, w.arrow)
	if err != nil {
		return nil, Unwritable(schema, err)
	}
	var sorting []parquet.SortingColumn
	for _, name := range opts.SortingColumns {
		if slices.Contains(opts.HiveColumns, name) {
			continue // in the folder names, not the file
		}
		idx := pqs.ColumnIndexByName(name)
		if idx < 0 {
			return nil, fmt.Errorf("sorting column %q is not a leaf column", name)
		}
		sorting = append(sorting, parquet.SortingColumn{ColumnIdx: int32(idx), Descending: false, NullsFirst: true})
	}
	if len(sorting) > 0 {
		base = append(base, parquet.WithSortingColumns(sorting))
	}
	enc := opts.Encodings
	if enc == nil {
		enc = &Encodings{}
		enc.props, enc.valueBytes = chooseEncodings(opts.Sample, pqs)
	}
	base = append(base, enc.props...)
	if n := pageBatch(enc.valueBytes, opts.PageBytes); n > 0 {
		base = append(base, parquet.WithBatchSize(n))
	}
	w.props = parquet.NewWriterProperties(base...)
	if pqs, err = pqarrow.ToParquet(schema, w.props, w.arrow); err != nil {
		return nil, Unwritable(schema, err)
	}
	// TIME columns the input declared UTC: the fast path declares them on
	// the schema it passes; arrow-go's nested path takes none, so the
	// footer rewrite sets them (utcElements).
	utc := withUTCTimes(pqs.Root(), schema)
	if plan, ok := fastPlan(schema); ok {
		w.fast, w.pqRoot = plan, utc
	} else {
		w.utc = map[int]int32{}
		i := 0
		utcElements(pqs.Root(), utc, &i, w.utc)
	}
	return w, nil
}

// utcElements records, by schema element index (the Parquet schema's
// depth-first order, the root 0), the TIME leaves that utc declares
// isAdjustedToUTC and orig (arrow-go's own layout) does not, with the
// converted type arrow-go gives a UTC TIME of that unit.
func utcElements(orig, utc schema.Node, i *int, out map[int]int32) {
	at := *i
	*i++
	if og, ok := orig.(*schema.GroupNode); ok {
		ug, ok := utc.(*schema.GroupNode)
		if !ok || ug.NumFields() != og.NumFields() {
			return
		}
		for k := 0; k < og.NumFields(); k++ {
			utcElements(og.Field(k), ug.Field(k), i, out)
		}
		return
	}
	ut, ok := utc.LogicalType().(schema.TimeLogicalType)
	if !ok || !ut.IsAdjustedToUTC() {
		return
	}
	if ot, ok := orig.LogicalType().(schema.TimeLogicalType); ok && ot.IsAdjustedToUTC() {
		return
	}
	switch ut.TimeUnit() {
	case schema.TimeUnitMillis:
		out[at] = convertedTimeMillis
	case schema.TimeUnitMicros:
		out[at] = convertedTimeMicros
	default:
		out[at] = 0
	}
}

// baseProps are the writer properties every file gets.
func baseProps(opts ParquetOptions) []parquet.WriterProperty {
	return []parquet.WriterProperty{
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithCompressionLevel(opts.ZstdLevel),
		parquet.WithDataPageVersion(parquet.DataPageV1),
		parquet.WithVersion(parquet.V2_LATEST),
		parquet.WithDataPageSize(opts.PageBytes),
		parquet.WithDictionaryPageSizeLimit(opts.DictionaryPageBytes),
		parquet.WithStats(true),
		parquet.WithPageIndexEnabled(true),
		parquet.WithMaxRowGroupLength(1 << 62),
		parquet.WithCreatedBy(opts.CreatedBy),
	}
}

// Encodings are the column encodings chosen from a sample of the rows.
type Encodings struct {
	props []parquet.WriterProperty
	// valueBytes is the sample's largest average leaf value (pageBatch).
	valueBytes float64
}

// NewEncodings chooses the encodings for sinks of schema sc (without its
// HiveColumns, which are not in the files) from a sample of the rows.
func NewEncodings(sample arrow.RecordBatch, sc *arrow.Schema, hiveColumns []string) (*Encodings, error) {
	w := &Parquet{opts: ParquetOptions{HiveColumns: hiveColumns}}
	sc = withoutArrowSchema(sc)
	if len(hiveColumns) > 0 {
		var err error
		if sc, err = w.hiveSchema(sc); err != nil {
			return nil, err
		}
	}
	probe := parquet.NewWriterProperties(baseProps(ParquetOptions{}.withDefaults())...)
	pqs, err := pqarrow.ToParquet(sc, probe, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		return nil, Unwritable(sc, err)
	}
	e := &Encodings{}
	e.props, e.valueBytes = chooseEncodings(sample, pqs)
	return e, nil
}

// withUTCTimes declares isAdjustedToUTC=true on the TIME columns, at any
// depth, that the input declared so (source.TimeUTCKey on the Arrow field):
// arrow-go writes every TIME column as local time.
func withUTCTimes(root *schema.GroupNode, sc *arrow.Schema) *schema.GroupNode {
	if root.NumFields() != sc.NumFields() {
		return root
	}
	fields := make(schema.FieldList, root.NumFields())
	changed := false
	for i := range fields {
		var ch bool
		if fields[i], ch = utcNode(root.Field(i), sc.Field(i)); ch {
			changed = true
		}
	}
	if !changed {
		return root
	}
	g, err := schema.NewGroupNode(root.Name(), root.RepetitionType(), fields, root.FieldID())
	if err != nil {
		return root
	}
	return g
}

// sameGroup is group g with other fields: its name, repetition, logical
// type (LIST, MAP or none) and field id.
func sameGroup(g *schema.GroupNode, fields schema.FieldList) (*schema.GroupNode, error) {
	lt := g.LogicalType()
	if lt != nil && lt.IsNone() {
		lt = nil
	}
	return schema.NewGroupNodeLogical(g.Name(), g.RepetitionType(), fields, lt, g.FieldID())
}

// LostUTCTimes lists the TIME columns (dotted paths) that the input
// declared isAdjustedToUTC=true but that a Parquet sink of schema sc
// writes as local time: those inside a map (keys or values), which
// utcNode does not follow. Elsewhere the flag is kept: declared on the
// Parquet schema in the fast path, set in the footer (utcElements) in
// arrow-go's nested path, which declares every TIME local and takes no
// schema.
func LostUTCTimes(sc *arrow.Schema) []string {
	var out []string
	var walk func(prefix string, f arrow.Field, inMap bool)
	walk = func(prefix string, f arrow.Field, inMap bool) {
		name := prefix + f.Name
		if v, ok := f.Metadata.GetValue(source.TimeUTCKey); ok && v == "true" {
			if inMap {
				out = append(out, name)
			}
			return
		}
		switch t := f.Type.(type) {
		case *arrow.StructType:
			for _, c := range t.Fields() {
				walk(name+".", c, inMap)
			}
		case *arrow.MapType:
			walk(name+".", t.ElemField(), true)
		case arrow.ListLikeType:
			walk(name+".", t.ElemField(), inMap)
		}
	}
	for _, f := range sc.Fields() {
		walk("", f, false)
	}
	return out
}

// utcNode is Parquet node n (written from Arrow field f) with the TIME
// leaves f marks declared UTC; it reports whether it changed. Struct
// fields and list elements are followed, as pqarrow lays them out (a list
// is a LIST group, its repeated group, then the element).
func utcNode(n schema.Node, f arrow.Field) (schema.Node, bool) {
	if v, ok := f.Metadata.GetValue(source.TimeUTCKey); ok && v == "true" {
		p, ok := n.(*schema.PrimitiveNode)
		if !ok {
			return n, false
		}
		t, ok := p.LogicalType().(schema.TimeLogicalType)
		if !ok || t.IsAdjustedToUTC() {
			return n, false
		}
		utc, err := schema.NewPrimitiveNodeLogical(p.Name(), p.RepetitionType(), schema.NewTimeLogicalType(true, t.TimeUnit()), p.PhysicalType(), p.TypeLength(), p.FieldID())
		if err != nil {
			return n, false
		}
		return utc, true
	}
	g, ok := n.(*schema.GroupNode)
	if !ok {
		return n, false
	}
	regroup := func(fields schema.FieldList) (schema.Node, bool) {
		out, err := sameGroup(g, fields)
		if err != nil {
			return n, false
		}
		return out, true
	}
	switch t := f.Type.(type) {
	case *arrow.StructType:
		if g.NumFields() != t.NumFields() {
			return n, false
		}
		fields := make(schema.FieldList, g.NumFields())
		changed := false
		for i := range fields {
			var ch bool
			if fields[i], ch = utcNode(g.Field(i), t.Field(i)); ch {
				changed = true
			}
		}
		if !changed {
			return n, false
		}
		return regroup(fields)
	case arrow.ListLikeType:
		if _, isMap := t.(*arrow.MapType); isMap || g.NumFields() != 1 {
			return n, false
		}
		rep, ok := g.Field(0).(*schema.GroupNode)
		if !ok || rep.NumFields() != 1 {
			return n, false
		}
		elem, ch := utcNode(rep.Field(0), t.ElemField())
		if !ch {
			return n, false
		}
		inner, err := sameGroup(rep, schema.FieldList{elem})
		if err != nil {
			return n, false
		}
		return regroup(schema.FieldList{inner})
	}
	return n, false
}

// Write appends the next rows, in output order. In layout mode the rows
// fill the planned row groups; in manual mode they go to the current one.
func (w *Parquet) Write(rec arrow.RecordBatch) error {
	if w.layout == nil {
		return w.Append(rec)
	}
	n := rec.NumRows()
	var off int64
	for off < n {
		if w.cur == nil || w.rgLeft == 0 {
			w.peek, w.peekRow = rec, off
			err := w.advance()
			w.peek = nil
			if err != nil {
				return err
			}
		}
		take := n - off
		if take > w.rgLeft {
			take = w.rgLeft
		}
		part := rec.NewSlice(off, off+take)
		err := w.writeRecord(part)
		part.Release()
		if err != nil {
			return err
		}
		off += take
		w.rgLeft -= take
		w.next += take
	}
	return nil
}

// advance moves to the next planned row group, closing and opening files.
func (w *Parquet) advance() error {
	if w.cur != nil {
		w.rgIdx++
		if w.rgIdx >= len(w.layout[w.fileIdx].RowGroups) {
			if err := w.closeFile(); err != nil {
				return err
			}
			w.fileIdx++
			w.rgIdx = 0
		}
	}
	if w.fileIdx >= len(w.layout) {
		return fmt.Errorf("writer: more rows than the layout plans (row %d)", w.next)
	}
	if w.cur == nil {
		if err := w.openFile(); err != nil {
			return err
		}
	}
	if err := w.startRowGroup(); err != nil {
		return err
	}
	w.rgLeft = w.layout[w.fileIdx].RowGroups[w.rgIdx]
	return nil
}

// startRowGroup begins a buffered row group, closing the open one.
func (w *Parquet) startRowGroup() error {
	w.cur.groups++
	if w.fast == nil {
		if err := w.cur.fw.NewBufferedRowGroupChecked(); err != nil {
			return w.fail(err)
		}
		return nil
	}
	if err := w.endFastRowGroup(); err != nil {
		return err
	}
	rgw, err := w.cur.pw.AppendBufferedRowGroupChecked()
	if err != nil {
		return w.fail(err)
	}
	w.cur.rgw = rgw
	return nil
}

// endFastRowGroup compresses the fast path's pending pages in parallel and
// closes its open row group, if any. (The generic writer closes a row group
// when the next one starts or the file closes.)
func (w *Parquet) endFastRowGroup() error {
	if w.cur.rgw == nil {
		return nil
	}
	if err := flushPages(w.cur.rgw, len(w.fast), w.workers); err != nil {
		return w.fail(err)
	}
	if err := w.cur.rgw.Close(); err != nil {
		return w.fail(fmt.Errorf("write %s: %w", w.out.URL(w.cur.name), err))
	}
	w.cur.rgw = nil
	return nil
}

// writeRecord adds rows to the open row group.
func (w *Parquet) writeRecord(rec arrow.RecordBatch) error {
	if w.hiveIdx != nil {
		if err := w.checkFolder(rec); err != nil {
			return w.fail(err)
		}
		rec = project(rec, w.schema, w.keepIdx)
		defer rec.Release()
	}
	var err error
	if w.fast != nil {
		err = writeFast(w.ctx, w.cur.rgw, rec, w.fast, &w.arrow, w.workers)
	} else {
		err = w.cur.fw.WriteBuffered(rec)
	}
	if err != nil {
		return w.fail(err)
	}
	return nil
}

func (w *Parquet) openFile() error {
	name := FileName(w.opts.FirstFile + w.fileIdx)
	var vals []*string
	if w.hiveIdx != nil {
		var err error
		if name, vals, err = w.folderName(); err != nil {
			return err
		}
	}
	key := w.out.Key(name)
	ctx, cancel := context.WithCancel(w.ctx)
	bw, err := storage.NewWriter(ctx, w.out, key, nil)
	if err != nil {
		cancel()
		return storage.Classify(fmt.Errorf("create %s: %w", w.out.URL(name), err))
	}
	// Writes gathered into fileBuffer-byte calls: to a local file each of
	// arrow-go's writes was a system call, about 200 per file of 40
	// columns, a sixth of the CPU of a Hive output of 1,739 small folders.
	buf := bufio.NewWriterSize(bw, fileBuffer)
	hw := &hashWriter{w: buf, h: xxhash.New()}
	cw := newPageCRC(hw)
	cw.off = w.opts.NoPageCRCs
	cw.utc = w.utc
	if w.fast != nil {
		md := metadata.NewKeyValueMetadata()
		sm := w.schema.Metadata()
		for i, k := range sm.Keys() {
			md.Append(k, sm.Values()[i])
		}
		md.Append("ARROW:schema", arrowSchemaMetadata(w.schema))
		for _, kv := range w.opts.Metadata {
			md.Append(kv[0], kv[1])
		}
		pw, err := file.NewParquetWriterWithError(cw, w.pqRoot, file.WithWriterProps(w.props), file.WithWriteMetadata(md))
		if err != nil {
			cancel()
			bw.Close()
			return Unwritable(w.schema, err)
		}
		w.cur = &openFile{name: name, vals: vals, key: key, cancel: cancel, bw: bw, buf: buf, hw: hw, cw: cw, pw: pw}
		return nil
	}
	fw, err := pqarrow.NewFileWriter(w.schema, cw, w.props, w.arrow)
	if err != nil {
		cancel()
		bw.Close()
		return Unwritable(w.schema, err)
	}
	for _, kv := range w.opts.Metadata {
		if err := fw.AppendKeyValueMetadata(kv[0], kv[1]); err != nil {
			cancel()
			bw.Close()
			return err
		}
	}
	w.cur = &openFile{name: name, vals: vals, key: key, cancel: cancel, bw: bw, buf: buf, hw: hw, cw: cw, fw: fw}
	return nil
}

func (w *Parquet) closeFile() error {
	f := w.cur
	name := f.name
	if f.groups == 0 {
		f.cw.endPages() // the footer follows the magic
	}
	if f.pw != nil {
		if err := w.endFastRowGroup(); err != nil {
			return err
		}
		if err := f.pw.Close(); err != nil {
			return w.fail(fmt.Errorf("write %s: %w", w.out.URL(name), err))
		}
	} else if err := f.fw.Close(); err != nil {
		return w.fail(fmt.Errorf("write %s: %w", w.out.URL(name), err))
	}
	// The footer as written, with the page CRCs' offsets, read back by
	// arrow-go: the manifest's row group spans come from it.
	var md *metadata.FileMetaData
	footer, err := f.cw.Close()
	switch {
	case errors.Is(err, errNoRewrite):
		if f.pw != nil {
			md, err = f.pw.FileMetadata()
		} else {
			md, err = f.fw.FileMetadata()
		}
		if err != nil {
			return w.fail(err)
		}
	case err != nil:
		return w.fail(fmt.Errorf("write %s: %w", w.out.URL(name), err))
	default:
		if md, err = metadata.NewFileMetaData(footer, nil); err != nil {
			return w.fail(fmt.Errorf("write %s: the footer with page CRCs does not parse: %w", w.out.URL(name), err))
		}
	}
	err = f.buf.Flush()
	if cerr := f.bw.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		f.cancel()
		w.cur = nil
		return storage.Classify(fmt.Errorf("write %s: %w", w.out.URL(name), err))
	}
	f.cancel()
	w.cur = nil
	start := w.manualStart
	if w.layout != nil {
		start = w.layout[w.fileIdx].Start
	}
	info := manifests.File{Path: name, Bytes: f.hw.n, Rows: md.NumRows, XXHash64: fmt.Sprintf("%016x", f.hw.h.Sum64()),
		FirstRow: start, RowGroups: []manifests.RowGroup{}}
	var first int64
	for i := 0; i < md.NumRowGroups(); i++ {
		ri, err := rowGroupInfo(md.RowGroup(i))
		if err != nil {
			return err
		}
		ri.FirstRow = first
		first += ri.Rows
		info.RowGroups = append(info.RowGroups, ri)
	}
	w.written = append(w.written, info)
	return nil
}

// RowGroupSpan returns the byte range of a row group's column chunks, from
// its footer metadata: the offset of its first page and the bytes up to
// the end of its last column chunk (what the manifest records).
func RowGroupSpan(rg *metadata.RowGroupMetaData) (offset, length int64, err error) {
	ri, err := rowGroupInfo(rg)
	return ri.Offset, ri.Length, err
}

func rowGroupInfo(rg *metadata.RowGroupMetaData) (manifests.RowGroup, error) {
	ri := manifests.RowGroup{Rows: rg.NumRows()}
	start, end := int64(-1), int64(0)
	for c := 0; c < rg.NumColumns(); c++ {
		cc, err := rg.ColumnChunk(c)
		if err != nil {
			return ri, err
		}
		s := cc.DataPageOffset()
		if cc.HasDictionaryPage() && cc.DictionaryPageOffset() > 0 && cc.DictionaryPageOffset() < s {
			s = cc.DictionaryPageOffset()
		}
		if start < 0 || s < start {
			start = s
		}
		if e := s + cc.TotalCompressedSize(); e > end {
			end = e
		}
	}
	ri.Offset, ri.Length = start, end-start
	return ri, nil
}

// fail aborts the current file and returns err.
func (w *Parquet) fail(err error) error {
	w.Abort()
	return err
}

// Abort discards the file being written (its blob never becomes visible).
// Files already closed stay: their names are deterministic, a retried task
// rewrites them, and the output's claim removes what no manifest commits
// (a second attempt of the same task may be writing them right now).
func (w *Parquet) Abort() {
	if w.cur != nil {
		w.cur.cancel()
		if w.cur.fw != nil {
			w.cur.fw.Close() // may fail; the blob write is cancelled anyway
		}
		w.cur.bw.Close()
		w.cur = nil
	}
}

// Finish finishes the last file and returns every file written. It checks
// that exactly the planned rows were written.
func (w *Parquet) Finish() (Written, error) {
	files, err := w.finish()
	return Written{Files: files}, err
}

func (w *Parquet) finish() ([]manifests.File, error) {
	if w.layout == nil { // manual mode
		if err := w.EndFile(); err != nil {
			return nil, err
		}
		if len(w.written) == 0 {
			if err := w.openFile(); err != nil {
				return nil, err
			}
			if err := w.closeFile(); err != nil {
				return nil, err
			}
		}
		return w.written, nil
	}
	if w.cur != nil {
		if w.rgLeft != 0 || w.rgIdx != len(w.layout[w.fileIdx].RowGroups)-1 {
			w.Abort()
			return nil, fmt.Errorf("writer: closed after %d rows, before the end of the layout", w.next)
		}
		if err := w.closeFile(); err != nil {
			return nil, err
		}
		w.fileIdx++
	}
	if len(w.written) == 0 && len(w.layout) > 0 {
		// An empty table: one file with no row groups keeps the schema.
		if err := w.openFile(); err != nil {
			return nil, err
		}
		if err := w.closeFile(); err != nil {
			return nil, err
		}
	}
	return w.written, nil
}

// withoutArrowSchema drops an input's stored ARROW:schema from the schema
// metadata; the writer stores the output's own.
func withoutArrowSchema(s *arrow.Schema) *arrow.Schema {
	md := s.Metadata()
	var keys, vals []string
	for i, k := range md.Keys() {
		if k != "ARROW:schema" {
			keys = append(keys, k)
			vals = append(vals, md.Values()[i])
		}
	}
	nmd := arrow.NewMetadata(keys, vals)
	return arrow.NewSchema(s.Fields(), &nmd)
}

// Manual mode: the caller decides where row groups and files end (used when
// rows are packed and boundaries must fall between queries). A Parquet made
// with a nil layout is in manual mode: Append adds rows to the current row
// group, EndRowGroup and EndFile cut; Close ends the last file.

// Append adds rows to the current row group (manual mode).
func (w *Parquet) Append(rec arrow.RecordBatch) error {
	if rec.NumRows() == 0 {
		return nil
	}
	if w.cur == nil {
		w.peek, w.peekRow = rec, 0
		err := w.openFile()
		w.peek = nil
		if err != nil {
			return err
		}
		w.manualStart = w.next
	}
	if !w.rgOpen {
		if err := w.startRowGroup(); err != nil {
			return err
		}
		w.rgOpen = true
	}
	if err := w.writeRecord(rec); err != nil {
		return err
	}
	w.next += rec.NumRows()
	return nil
}

// EndRowGroup closes the current row group, if it holds rows (manual
// mode; in layout mode the layout cuts and this does nothing).
func (w *Parquet) EndRowGroup() error {
	if w.layout != nil || w.cur == nil || !w.rgOpen {
		return nil
	}
	w.rgOpen = false
	if w.fast != nil {
		return w.endFastRowGroup()
	}
	return nil // the next Append starts a new row group
}

// EndFile closes the current file, if any.
func (w *Parquet) EndFile() error {
	if w.cur == nil {
		return nil
	}
	if err := w.EndRowGroup(); err != nil {
		return err
	}
	if err := w.closeFile(); err != nil {
		return err
	}
	w.fileIdx++
	return nil
}
