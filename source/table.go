package source

import (
	"bytes"
	"cmp"
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/arrow-go/v18/parquet/schema"
	"github.com/parquet-go/parquet-go/format"

	"github.com/relayout/relayout/hive"
	"github.com/relayout/relayout/internal/arrowipc"
	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/par"
	"github.com/relayout/relayout/storage"
)

// File is one input object.
type File struct {
	Obj   storage.Object
	Index int
	// Rows is the file's row count; RowOffset the global position of its
	// first row (the sum of the rows of the files before it).
	Rows      int64
	RowOffset int64
	// RowGroupRows and RowGroupOffsets give each row group's row count and
	// global position of its first row.
	RowGroupRows    []int64
	RowGroupOffsets []int64
	// UncompressedBytes and CompressedBytes sum the file's column chunks.
	UncompressedBytes int64
	CompressedBytes   int64
	// DecodedFloor is the decoded bytes the footer proves at least: each
	// column chunk's uncompressed bytes, or its values times the width
	// they decode to where that is more (decodedWidth). Numbers held as
	// dictionary indices decode to several times their uncompressed
	// bytes: 256-float embeddings of 10,000 distinct values, 64 MiB in
	// the footer, decode to 123 MiB. DecodedEstimate adds what the footer
	// does not prove but Arrow mostly holds (decodedEstimate): a string's
	// offset besides its bytes where the file stores lengths more tightly,
	// validity bitmaps, list offsets.
	DecodedFloor, DecodedEstimate int64

	// RowGroupBytes is each row group's stored bytes (its column chunks);
	// Leaves the file's leaf columns.
	RowGroupBytes []int64
	Leaves        int64
	// rgChunks holds, for each row group, what its largest column chunks
	// hold while decoded (rowGroupSizes.chunks), and rgStrings its largest
	// string and binary chunks (byte-array leaves): decoding a row group
	// whole holds these for the chunks decoded at once besides its values
	// (DecodeExtra). About 400 bytes a row group.
	rgChunks  [][]int64
	rgStrings [][]stringChunk

	t    *Table
	pos  int     // position in t.Files (Index is the file's in a larger table, see Place)
	h    *handle // nil while closed (the table keeps at most MaxOpen)
	pins int     // uses in progress: the file is not closed meanwhile
	// opening is closed when an open in progress (outside the table's
	// lock) ends; nil when none is.
	opening chan struct{}
	schema  *arrow.Schema
	// colMap maps a table field index to this file's field index (-1: a
	// partition column only the path holds); leaves
	// holds each table field's leaf column indices in this file.
	colMap []int
	leaves [][]int

	pagesMu   sync.Mutex
	pages     map[int]Page  // LargestPage by row group
	estimates map[int]int64 // DecodedEstimateOf by row group
}

// handle is an open file: its reader, footer and Arrow reader. Footer
// metadata and schemas take tens of KB per file, so a table of many small
// files keeps only MaxOpen of them open and reopens the others (one footer
// read) when they are read again.
type handle struct {
	ra   *storage.ReaderAt
	pq   *file.Reader
	elem *list.Element

	// fr is made on first use (arrowReader): its schema manifest is a
	// quarter of an open's cost, and a file opened for its footer alone
	// (the read-cost model) never needs it.
	frOnce sync.Once
	fr     *pqarrow.FileReader
	frErr  error
	url    string
}

// arrowReader returns the file's Arrow reader, made on first use.
func (h *handle) arrowReader() (*pqarrow.FileReader, error) {
	h.frOnce.Do(func() {
		h.fr, h.frErr = pqarrow.NewFileReader(h.pq, pqarrow.ArrowReadProperties{BatchSize: 64 << 10}, memory.DefaultAllocator)
		if h.frErr != nil {
			h.frErr = unsupported("open "+h.url, fmt.Errorf("schema: %w", h.frErr))
		}
	})
	return h.fr, h.frErr
}

// arrowSchema is the Arrow schema of a file's schema manifest: what
// pqarrow.FileReader.Schema returns, without making the manifest again (a
// tenth of opening a small file's footer; the check and the report open
// every file of a Hive output of 1,200 folders).
func arrowSchema(m *pqarrow.SchemaManifest) *arrow.Schema {
	fields := make([]arrow.Field, len(m.Fields))
	for i, f := range m.Fields {
		fields[i] = *f.Field
	}
	if m.OriginSchema != nil {
		meta := m.OriginSchema.Metadata()
		return arrow.NewSchema(fields, &meta)
	}
	return arrow.NewSchema(fields, m.SchemaMeta)
}

// checkArrowSchema checks the Arrow schema a file's footer stores
// (ARROW:schema), which pqarrow decodes whenever it makes a reader of the
// file, before the first one (openFile): arrow-go allocates by the counts
// in it, so a damaged one could crash the process rather than fail
// (arrowipc).
func checkArrowSchema(pq *file.Reader, url string) error {
	kv := pq.MetaData().KeyValueMetadata()
	if kv == nil {
		return nil
	}
	v := kv.FindValue("ARROW:schema")
	if v == nil {
		return nil
	}
	b, err := arrowipc.DecodeSchemaMetadata(*v)
	if err == nil {
		err = arrowipc.CheckStream(b)
	}
	if err != nil {
		return errs.WithHint(errs.BadInputf("open %s: the Arrow schema in its footer (ARROW:schema) is damaged: %v", url, err),
			"re-export the file or leave it out of --input")
	}
	return nil
}

// WithParquet calls fn with the file's low-level reader (footer metadata,
// page index), opening the file again if the table closed it; the file
// stays open until fn returns.
func (f *File) WithParquet(fn func(*file.Reader) error) error {
	h, err := f.t.acquire(f)
	if err != nil {
		return err
	}
	defer f.t.release(f)
	return fn(h.pq)
}

// Metadata returns the file's footer metadata, reopening the file if the
// table closed it; the metadata stays valid after the file is closed again.
func (f *File) Metadata() (*metadata.FileMetaData, error) {
	var md *metadata.FileMetaData
	err := f.WithParquet(func(pq *file.Reader) error {
		md = pq.MetaData()
		return nil
	})
	return md, err
}

// DefaultMaxOpen is how many input files a table keeps open at once.
const DefaultMaxOpen = 64

// DefaultRemoteReads is how many column chunks of files in an object store
// a table reads at once (Table.RemoteReads).
const DefaultRemoteReads = 16

// Readers returns how many goroutines read (and decode) column chunks
// where parallel would decode them: parallel for local files, at least
// RemoteReads where some file is in an object store.
func (t *Table) Readers(parallel int) int {
	if t.remote {
		return max(parallel, t.RemoteReads)
	}
	return parallel
}

// openWindow and openParallel bound Open's footer reads: files read ahead
// of the one being matched, and reads at once.
const (
	openWindow   = 32
	openParallel = 16
)

// acquire opens f if it is closed and pins it. The footer is read and
// parsed outside the table's lock, so files are opened in parallel (the
// readers of a table of many small files open one per row group); a
// second reader of a file being opened waits for that open.
func (t *Table) acquire(f *File) (*handle, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for f.h == nil {
		if f.opening != nil {
			wait := f.opening
			t.mu.Unlock()
			<-wait
			t.mu.Lock()
			continue // opened, or failed (then this reader tries), or closed again
		}
		wait := make(chan struct{})
		f.opening = wait
		t.mu.Unlock()
		h, err := openHandle(t.ctx, f.Obj, t.Counts)
		if err == nil && (h.pq.NumRows() != f.Rows || h.pq.NumRowGroups() != len(f.RowGroupRows)) {
			h.ra.Close()
			err = errs.BadInputf("%s changed while it was read (its footer now says %d rows in %d row groups, it said %d in %d)",
				f.Obj.URL, h.pq.NumRows(), h.pq.NumRowGroups(), f.Rows, len(f.RowGroupRows))
		}
		t.mu.Lock()
		f.opening = nil
		close(wait)
		if err != nil {
			return nil, err
		}
		f.h = h
		h.elem = t.lru.PushFront(f)
		break
	}
	t.lru.MoveToFront(f.h.elem)
	f.pins++
	t.evict()
	return f.h, nil
}

// release unpins f.
func (t *Table) release(f *File) {
	t.mu.Lock()
	f.pins--
	t.evict()
	t.mu.Unlock()
}

// evict closes the least recently used files beyond MaxOpen that are not
// in use.
func (t *Table) evict() {
	for e := t.lru.Back(); e != nil && t.lru.Len() > t.MaxOpen; {
		prev := e.Prev()
		if g := e.Value.(*File); g.pins == 0 {
			g.h.ra.Close()
			g.h = nil
			t.lru.Remove(e)
		}
		e = prev
	}
}

// Table is the union of the input files.
type Table struct {
	Files  []*File
	Schema *arrow.Schema
	Rows   int64
	// Metadata is the first file's key-value metadata (ARROW:schema etc.).
	Metadata map[string]string
	Counts   *storage.Counters
	mem      memory.Allocator
	// MaxOpen bounds the files kept open (DefaultMaxOpen).
	MaxOpen int
	// RemoteReads is how many column chunks of an object-store table are
	// read at once (DefaultRemoteReads), where a local one reads as many
	// as it decodes: a ranged GET waits on the store's latency, not on a
	// core.
	RemoteReads int
	remote      bool // some file is not local
	// Compact copies each decoded column out of buffers the reader grew to
	// up to twice its size (compact): for reads whose arrays are kept (a
	// table held in memory) or whose heap is tight (a spilling run's map).
	// Other reads (checks, map tasks given room) reuse the grown buffers.
	Compact bool
	// DecodeScale is what the plan found the table decodes to over its
	// footers' estimate (File.DecodedEstimate), where that is more: strings
	// held as a dictionary in files without statistics decode to several
	// times it. File.DecodedRowBytes counts it. Set before the table is
	// read; 0 counts as 1.
	DecodeScale float64

	// parts are the Hive partitions (nil: none); partCol maps a table
	// field to its partition key (-1: none). Fields past the files' own
	// are partition-only.
	parts   *hive.Partitioning
	partCol []int

	ctx    context.Context // reopens read through it
	shared *File           // the last file whose column mapping others share
	mu     sync.Mutex
	lru    *list.List // open files, most recently used first
}

// NumRowGroups returns the number of row groups over all files.
func (t *Table) NumRowGroups() int {
	n := 0
	for _, f := range t.Files {
		n += len(f.RowGroupRows)
	}
	return n
}

// LargestRowGroup is the most rows any one row group of the table holds.
func (t *Table) LargestRowGroup() int64 {
	return t.largest(func(f *File) []int64 { return f.RowGroupRows })
}

// LargestRowGroupBytes returns the stored (compressed) bytes of the
// largest row group.
func (t *Table) LargestRowGroupBytes() int64 {
	return t.largest(func(f *File) []int64 { return f.RowGroupBytes })
}

// largest returns the largest of every file's per-row-group figures of.
func (t *Table) largest(of func(*File) []int64) int64 {
	var n int64
	for _, f := range t.Files {
		for _, v := range of(f) {
			n = max(n, v)
		}
	}
	return n
}

// Close closes every file.
func (t *Table) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var first error
	for _, f := range t.Files {
		if f.h != nil {
			if err := f.h.ra.Close(); err != nil && first == nil {
				first = err
			}
			f.h = nil
		}
	}
	t.lru.Init()
	return first
}

// FieldIndex returns the index of the named top-level column, or a bad-input
// error naming the column and the columns that exist.
func (t *Table) FieldIndex(name string) (int, error) {
	idx := t.Schema.FieldIndices(name)
	if len(idx) == 0 {
		names := make([]string, 0, t.Schema.NumFields())
		for _, f := range t.Schema.Fields() {
			names = append(names, f.Name)
		}
		where := "the input"
		if len(t.Files) > 0 {
			where = t.Files[0].Obj.URL
		}
		return -1, errs.BadInputf("column %q not found in %s (columns: %s)", name, where, strings.Join(names, ", "))
	}
	return idx[0], nil
}

// Place gives the table's file i the index and first row it has in a
// larger table it is part of (a map task opens only its own files of the
// plan's inputs): row offsets, and Index, then match that table's.
func (t *Table) Place(i, index int, rowOffset int64) {
	f := t.Files[i]
	shift := rowOffset - f.RowOffset
	f.Index, f.RowOffset = index, rowOffset
	for j := range f.RowGroupOffsets {
		f.RowGroupOffsets[j] += shift
	}
}

// Adopt makes schema the table's (a larger table's, whose fields may be
// nullable where these files' are not, with its metadata), after checking
// that it has the same columns of the same types.
func (t *Table) Adopt(schema *arrow.Schema) error {
	if schema.NumFields() != t.Schema.NumFields() {
		return errs.BadInputf("schema mismatch: %s has %d columns, the plan's schema %d", t.Files[0].Obj.URL, t.Schema.NumFields(), schema.NumFields())
	}
	for i, f := range schema.Fields() {
		got := t.Schema.Field(i)
		if got.Name != f.Name || !arrow.TypeEqual(got.Type, f.Type) || (got.Nullable && !f.Nullable) {
			return errs.BadInputf("schema mismatch: column %d is %q %s (nullable %v) in %s but %q %s (nullable %v) in the plan", i, got.Name, got.Type, got.Nullable, t.Files[0].Obj.URL, f.Name, f.Type, f.Nullable)
		}
	}
	t.Schema = schema
	return nil
}

// SchemaOnly is a table of no files with the given schema: what a task
// that reads no input (a reduce, a detect) resolves its columns against.
func SchemaOnly(schema *arrow.Schema) *Table {
	return &Table{Schema: schema, Counts: new(storage.Counters), mem: memory.DefaultAllocator, MaxOpen: DefaultMaxOpen, lru: list.New()}
}

// Open opens the objects as one table, reading only their footers.
func Open(ctx context.Context, objs []storage.Object, counts *storage.Counters) (*Table, error) {
	if counts == nil {
		counts = new(storage.Counters)
	}
	t := &Table{Counts: counts, mem: memory.DefaultAllocator, MaxOpen: DefaultMaxOpen, RemoteReads: DefaultRemoteReads, ctx: context.WithoutCancel(ctx), lru: list.New()}
	for _, o := range objs {
		t.remote = t.remote || (o.LocalPath == "" && o.Data == nil)
	}
	// Footers are read openWindow files at a time, openParallel at once
	// (an object store's latency, not its bandwidth, bounds one footer
	// read), and matched in order; the window bounds the footers held.
	var window []*File
	for i := range objs {
		if i%openWindow == 0 {
			n := min(openWindow, len(objs)-i)
			window = make([]*File, n)
			err := par.ForEach(ctx, n, openParallel, func(j int) error {
				var err error
				window[j], err = openFile(ctx, objs[i+j], counts)
				return err
			})
			if err != nil {
				for _, f := range window {
					if f != nil {
						f.h.ra.Close()
					}
				}
				t.Close()
				return nil, err
			}
		}
		f := window[i%openWindow]
		window[i%openWindow] = nil
		f.t = t
		f.Index, f.pos = i, i
		f.RowOffset = t.Rows
		for j := range f.RowGroupOffsets {
			f.RowGroupOffsets[j] += t.Rows
		}
		t.Rows += f.Rows
		t.Files = append(t.Files, f)
		if i == 0 {
			t.Schema = f.schema
			t.Metadata = map[string]string{}
			md := f.h.pq.MetaData().KeyValueMetadata()
			for k, key := range md.Keys() {
				t.Metadata[key] = md.Values()[k]
			}
		}
		if err := t.match(f); err != nil {
			for _, g := range window {
				if g != nil {
					g.h.ra.Close()
				}
			}
			t.Close() // f among them
			return nil, err
		}
		f.schema = nil // matched: the table's schema serves
		t.mu.Lock()
		f.h.elem = t.lru.PushFront(f)
		t.evict()
		t.mu.Unlock()
	}
	if len(t.Files) == 0 {
		return nil, errs.BadInputf("no input files")
	}
	return t, nil
}

func openFile(ctx context.Context, obj storage.Object, counts *storage.Counters) (f *File, err error) {
	h, err := openHandle(ctx, obj, counts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			h.ra.Close()
		}
	}()
	defer errs.Recover(&err, "open "+obj.URL)
	pq := h.pq
	// Once per file, not per handle: a table of many small files reopens
	// each several times, and a reopened footer is taken to be this one
	// (acquire checks only its row counts; Head reuses it).
	if err := checkArrowSchema(pq, obj.URL); err != nil {
		return nil, err
	}
	fr, err := h.arrowReader()
	if err != nil {
		return nil, err
	}
	sc := arrowSchema(fr.Manifest)
	md := pq.MetaData()
	sc = markUTCTimes(sc, fr)
	f = &File{Obj: obj, Rows: md.NumRows, h: h, schema: sc, Leaves: int64(md.Schema.NumColumns())}
	var off int64
	for i := 0; i < md.NumRowGroups(); i++ {
		rg := md.RowGroup(i)
		n := rg.NumRows()
		if n < 0 {
			return nil, errs.BadInputf("open %s: row group %d has a negative row count", obj.URL, i)
		}
		f.RowGroupRows = append(f.RowGroupRows, n)
		f.RowGroupOffsets = append(f.RowGroupOffsets, off)
		off += n
		f.UncompressedBytes += rg.TotalByteSize()
		d, err := rowGroupDecoded(md, i, "open "+obj.URL, nil)
		if err != nil {
			return nil, err
		}
		f.DecodedFloor += d.floor
		f.DecodedEstimate += d.est
		f.CompressedBytes += d.stored
		f.RowGroupBytes = append(f.RowGroupBytes, d.stored)
		f.rgChunks = append(f.rgChunks, d.chunks)
		f.rgStrings = append(f.rgStrings, d.strings)
	}
	if off != f.Rows {
		return nil, errs.BadInputf("open %s: row groups hold %d rows but the footer says %d", obj.URL, off, f.Rows)
	}
	return f, nil
}

// EstimateRowBytes is the file's decoded bytes a row as its footer
// estimates them (DecodedEstimate), at least 1.
func (f *File) EstimateRowBytes() float64 {
	return max(float64(f.DecodedEstimate)/float64(max(f.Rows, 1)), 1)
}

// DecodedRowBytes is EstimateRowBytes times the table's DecodeScale.
func (f *File) DecodedRowBytes() float64 {
	if f.t != nil && f.t.DecodeScale > 1 {
		return f.EstimateRowBytes() * f.t.DecodeScale
	}
	return f.EstimateRowBytes()
}

// rowGroupSizes is what a row group's footer says of its size.
type rowGroupSizes struct {
	// stored is its column chunks' bytes; floor and est the floor and
	// estimate of its decoded bytes (File.DecodedFloor, DecodedEstimate),
	// at least its total_byte_size (some writers' is more than their
	// chunks' sum).
	stored, floor, est int64
	// chunks are what its largest column chunks hold while decoded, at
	// most maxChunksInFlight(), largest first: stored and uncompressed bytes;
	// 2 bytes a level (definition, repetition) and the values' decoded
	// width (a string's offset), reserved for the next power of two above
	// the values, as arrow-go's readers reserve them, and the values half
	// as much again, the buffer they grew from.
	chunks []int64
	// strings are its largest byte-array chunks, at most maxChunksInFlight(),
	// largest first (File.DecodeExtra).
	strings []stringChunk
}

// stringChunk sizes a byte-array column chunk: its values' estimated
// decoded bytes without their offsets, and how many values it holds.
type stringChunk struct {
	values, count int64
}

// maxChunksInFlight is how many of a row group's column chunks, and of its
// string chunks, a File keeps the sizes of: more are not decoded at once
// (Table.Readers: the cores, or DefaultRemoteReads from object storage).
func maxChunksInFlight() int {
	return max(DefaultRemoteReads, runtime.GOMAXPROCS(0))
}

// rowGroupDecoded sizes row group rg from the footer. dictAvg, where not
// nil, gives a string chunk's dictionary entries' average length (< 0:
// unknown), in place of its statistics'. what names the file for an
// error.
func rowGroupDecoded(md *metadata.FileMetaData, rg int, what string, dictAvg func(*metadata.ColumnChunkMetaData) float64) (rowGroupSizes, error) {
	var d rowGroupSizes
	rgm := md.RowGroup(rg)
	for c := 0; c < rgm.NumColumns(); c++ {
		cc, err := rgm.ColumnChunk(c)
		if err != nil {
			return rowGroupSizes{}, badData(fmt.Sprintf("%s: row group %d column %d", what, rg, c), err)
		}
		d.stored += cc.TotalCompressedSize()
		col := md.Schema.Column(c)
		held := cc.TotalCompressedSize() + cc.TotalUncompressedSize()
		reserved := PowerOfTwoAtLeast(cc.NumValues() + 1) // above the values
		if col.MaxDefinitionLevel() > 0 {
			held += 2 * reserved
		}
		if col.MaxRepetitionLevel() > 0 {
			held += 2 * reserved
		}
		held += 3 * reserved * decodedWidth(col) / 2
		d.chunks = append(d.chunks, held)
		fl := max(cc.TotalUncompressedSize(), cc.NumValues()*decodedWidth(col))
		avg := -1.0
		if dictAvg != nil && col.PhysicalType() == parquet.Types.ByteArray && hasDictionary(cc) {
			avg = dictAvg(cc)
		}
		d.floor += fl
		e := decodedEstimate(cc, col, fl, rgm.NumRows(), avg)
		d.est += e
		if col.PhysicalType() == parquet.Types.ByteArray {
			d.strings = append(d.strings, stringChunk{values: max(e-4*cc.NumValues(), 0), count: cc.NumValues()})
		}
	}
	slices.SortStableFunc(d.strings, func(a, b stringChunk) int { return cmp.Compare(b.values, a.values) })
	d.strings = slices.Clip(d.strings[:min(len(d.strings), maxChunksInFlight())])
	slices.SortFunc(d.chunks, func(a, b int64) int { return cmp.Compare(b, a) })
	d.chunks = slices.Clip(d.chunks[:min(len(d.chunks), maxChunksInFlight())])
	d.floor, d.est = max(d.floor, rgm.TotalByteSize()), max(d.est, rgm.TotalByteSize())
	return d, nil
}

// DecodeExtra is what decoding row group rg whole holds beyond its values
// (which plan.DecodeBytes counts), for the column chunks decoded at once
// (Readers of the machine's cores, the largest): each chunk, read whole,
// its pages decompressed (up to the chunk's uncompressed bytes), its
// levels, and its values in arrow-go's reserve, the next power of two
// above their count (bitutil.NextPowerOf2: twice a power of two; compact
// copies a column to its size once read), with the buffer it grew from;
// and for a string or binary chunk, its builder growing its bytes by
// doubling, up to their next power of two, with the buffers it outgrew
// left in the allocator's pools until the collector has run twice, about
// as much again, and a 24-byte header for each value while it decodes.
// Measured with the collector at every 1% of growth (plan's
// TestRowGroupsDecodeWithin): 31 MiB of 52-byte strings in one page held
// 159 MiB while decoded whole (a run peaked at 203 MiB at the 106 MiB
// named without this); five columns of numbers in 2^19 rows, 18 MiB
// decoded, 51-61 MiB. The table's DecodeScale scales the strings' values,
// as it scales DecodedRowBytes.
func (f *File) DecodeExtra(rg int) int64 {
	if rg < 0 || rg >= len(f.rgChunks) {
		return 0
	}
	scale, at := 1.0, runtime.GOMAXPROCS(0)
	if f.t != nil {
		at = f.t.Readers(at)
		scale = max(f.t.DecodeScale, 1)
	}
	at = max(at, 1)
	var extra int64
	for _, c := range f.rgChunks[rg][:min(len(f.rgChunks[rg]), at)] {
		extra += c
	}
	for _, c := range f.rgStrings[rg][:min(len(f.rgStrings[rg]), at)] {
		b := int64(float64(c.values) * scale)
		extra += 2*PowerOfTwoAtLeast(b) + 24*c.count
	}
	return extra
}

// PowerOfTwoAtLeast is the smallest power of two at least n (1 for n <= 1):
// the capacity arrow-go's readers and builders reserve for n values or
// grow n bytes to.
func PowerOfTwoAtLeast(n int64) int64 {
	return int64(1) << bits.Len64(uint64(max(n-1, 0)))
}

// decodedWidth is the fewest bytes one value of a leaf column takes in
// Arrow: the width of the fixed-size types it decodes to (an INT32 of 8 or
// 16 bits is read as int8 or int16; INT96 as a 64-bit timestamp), a
// string's 32-bit offset, nothing for booleans (bits).
func decodedWidth(col *schema.Column) int64 {
	switch col.PhysicalType() {
	case parquet.Types.Int32:
		if lt, ok := col.LogicalType().(schema.IntLogicalType); ok && lt.BitWidth() < 32 {
			return int64(lt.BitWidth() / 8)
		}
		return 4
	case parquet.Types.Float:
		return 4
	case parquet.Types.Int64, parquet.Types.Double, parquet.Types.Int96:
		return 8
	case parquet.Types.FixedLenByteArray:
		return int64(max(col.TypeLength(), 0))
	case parquet.Types.ByteArray:
		return 4
	}
	return 0
}

// decodedEstimate is what a column chunk of rows rows mostly decodes to,
// from its footer: its floor (see File.DecodedFloor); for strings stored
// other than PLAIN (which keeps a 4-byte length with each value, as Arrow
// keeps an offset) an offset a value more, as DELTA_LENGTH_BYTE_ARRAY
// packs the lengths in a few bits; for strings held as a dictionary,
// which keeps each distinct value once, each value at the average length
// of its statistics' min and max, where those are kept; a validity bit a
// value where the values may be null; a list's offsets, 4 bytes a row for
// each level of repetition. Arrow holds each of these, but a list of
// structs shares one list's offsets among its leaves and a dictionary's
// values may not be as long as its extremes, so it is an estimate, not a
// bound. On the generated log it comes to 1.24 times the footers' bytes,
// and the first row group decodes to 0.99 times it; on 1M rows of 100
// distinct 44-byte URLs, 9 bytes a row in the footer, to 61 of 61.
// dictAvg, where known (>= 0), is a string column's dictionary entries'
// average length, in place of its statistics'.
func decodedEstimate(cc *metadata.ColumnChunkMetaData, col *schema.Column, floor, rows int64, dictAvg float64) int64 {
	nv := cc.NumValues()
	est := floor
	if col.PhysicalType() == parquet.Types.ByteArray && !plainOnly(cc) {
		est = cc.TotalUncompressedSize() + 4*nv
		if hasDictionary(cc) {
			values := nv
			if dictAvg < 0 {
				dictAvg, values = statsLength(cc)
			}
			if dictAvg >= 0 {
				est = max(est, 4*nv+int64(float64(values)*dictAvg))
			}
		}
	}
	if col.SchemaNode().RepetitionType() == parquet.Repetitions.Optional {
		est += (nv + 7) / 8
	}
	return est + 4*rows*int64(col.MaxRepetitionLevel())
}

// statsLength is the average length of a string chunk's min and max
// statistics and the values not null; -1 where the footer keeps no usable
// statistics.
func statsLength(cc *metadata.ColumnChunkMetaData) (float64, int64) {
	st, err := cc.Statistics()
	if err != nil || st == nil {
		return -1, 0
	}
	ba, ok := st.(*metadata.ByteArrayStatistics)
	if !ok || !ba.HasMinMax() {
		return -1, 0
	}
	values := cc.NumValues()
	if ba.HasNullCount() {
		values = max(values-ba.NullCount(), 0)
	}
	return float64(len(ba.Min())+len(ba.Max())) / 2, values
}

// plainOnly reports whether a chunk's values are stored PLAIN (its levels
// RLE or bit-packed).
func plainOnly(cc *metadata.ColumnChunkMetaData) bool {
	for _, e := range cc.Encodings() {
		if e != parquet.Encodings.Plain && e != parquet.Encodings.RLE && e != parquet.Encodings.BitPacked {
			return false
		}
	}
	return true
}

// hasDictionary reports whether a chunk's values are dictionary-encoded.
func hasDictionary(cc *metadata.ColumnChunkMetaData) bool {
	for _, e := range cc.Encodings() {
		if e == parquet.Encodings.PlainDict || e == parquet.Encodings.RLEDict {
			return true
		}
	}
	return false
}

// mismatchHint says what to do about inputs whose schemas differ.
const mismatchHint = "the inputs of one run share one schema: rewrite the odd files to it, or run them separately"

// match checks f's schema against the table's and fills f.colMap.
func (t *Table) match(f *File) error {
	first := t.Files[0]
	f.colMap = make([]int, t.Schema.NumFields())
	if f.schema.NumFields() != t.Schema.NumFields() {
		return errs.WithHint(errs.BadInputf("schema mismatch: %s has %d columns, %s has %d", first.Obj.URL, t.Schema.NumFields(), f.Obj.URL, f.schema.NumFields()), mismatchHint)
	}
	fields := t.Schema.Fields()
	for i, want := range fields {
		idx := f.schema.FieldIndices(want.Name)
		if len(idx) != 1 {
			return errs.WithHint(errs.BadInputf("schema mismatch: column %q is in %s but not in %s", want.Name, first.Obj.URL, f.Obj.URL), mismatchHint)
		}
		got := f.schema.Field(idx[0])
		if !arrow.TypeEqual(got.Type, want.Type) {
			return errs.WithHint(errs.BadInputf("schema mismatch: column %q is %s in %s but %s in %s", want.Name, want.Type, first.Obj.URL, got.Type, f.Obj.URL), mismatchHint)
		}
		if got.Nullable && !want.Nullable {
			fields[i].Nullable = true
		}
		f.colMap[i] = idx[0]
		var leaves []int
		fr, err := f.h.arrowReader()
		if err != nil {
			return err
		}
		for c := range leafSet(&fr.Manifest.Fields[idx[0]], map[int]bool{}) {
			leaves = append(leaves, c)
		}
		slices.Sort(leaves)
		f.leaves = append(f.leaves, leaves)
	}
	md := t.Schema.Metadata()
	t.Schema = arrow.NewSchema(fields, &md)
	// Files of one table mostly share their column order: share the
	// mapping too (10,000 files would otherwise hold 10,000 copies).
	if prev := t.shared; prev != nil && slices.Equal(prev.colMap, f.colMap) && slices.EqualFunc(prev.leaves, f.leaves, slices.Equal[[]int]) {
		f.colMap, f.leaves = prev.colMap, prev.leaves
	} else {
		t.shared = f
	}
	return nil
}

// ReadColumn reads table column col of row group rg of the file as one array.
// The caller releases it.
func (f *File) ReadColumn(ctx context.Context, rg, col int) (arrow.Array, error) {
	arrs, err := f.ReadColumnSlices(ctx, rg, col, 0)
	if err != nil {
		return nil, err
	}
	return arrs[0], nil
}

// ReadColumnSlices reads table column col of row group rg of the file as
// arrays of sliceRows rows each, the last holding the rest (sliceRows <= 0:
// one array of every row). The column chunk is read and checked whole, as
// ReadColumn reads it; only the decoding is sliced, so that a large row
// group is never held decoded in one array per column: arrow-go's readers
// reserve a column's values for the next power of two of the rows asked
// for and grow its strings by doubling (a row group of 2,048 binaries of 98
// KB, 200 MB, took 557 MB of heap decoded whole). The caller releases
// them.
func (f *File) ReadColumnSlices(ctx context.Context, rg, col int, sliceRows int64) (arrs []arrow.Array, err error) {
	return f.ReadColumnHead(ctx, rg, col, sliceRows, f.RowGroupRows[rg])
}

// ReadColumnHead is ReadColumnSlices of the row group's first headRows
// rows: the slices that hold them, the last cut to end there. The column
// chunk is still read and checked whole; the decoding stops at the head.
func (f *File) ReadColumnHead(ctx context.Context, rg, col int, sliceRows, headRows int64) (arrs []arrow.Array, err error) {
	rows := min(f.RowGroupRows[rg], max(headRows, 0))
	if sliceRows <= 0 || sliceRows > rows {
		sliceRows = max(rows, 1)
	}
	defer func() {
		if err != nil {
			for _, a := range arrs {
				a.Release()
			}
			arrs = nil
		}
	}()
	name := "?"
	if col < len(f.colMap) {
		name = f.t.Schema.Field(col).Name
		if f.colMap[col] < 0 {
			for from := int64(0); from < rows || from == 0; from += sliceRows {
				a, err := f.partitionColumn(col, int(min(sliceRows, rows-from)))
				if err != nil {
					return arrs, err
				}
				arrs = append(arrs, a)
			}
			return arrs, nil
		}
	}
	what := fmt.Sprintf("read %s: row group %d, column %s", f.Obj.URL, rg, name)
	defer errs.Recover(&err, what)
	h, err := f.t.acquire(f)
	if err != nil {
		return nil, err
	}
	defer f.t.release(f)
	leaves := make(map[int]bool, len(f.leaves[col]))
	for _, c := range f.leaves[col] {
		leaves[c] = true
	}
	fr, err := h.arrowReader()
	if err != nil {
		return nil, err
	}
	cr, err := fr.GetFieldReader(ctx, f.colMap[col], leaves, []int{rg})
	if err != nil {
		return nil, classify(err, what)
	}
	defer cr.Release()
	var read int64
	for read < rows || read == 0 {
		n := min(sliceRows, rows-read)
		arr, err := f.readSlice(cr, rg, col, n, sliceRows == f.RowGroupRows[rg], what)
		if err != nil {
			return arrs, err
		}
		arrs = append(arrs, arr)
		read += n
		if n == 0 {
			break
		}
	}
	return arrs, nil
}

// readSlice decodes the next n rows of a column reader into one array and
// checks them (ReadColumnSlices); whole says they are the row group's.
func (f *File) readSlice(cr *pqarrow.ColumnReader, rg, col int, n int64, whole bool, what string) (arrow.Array, error) {
	ch, err := cr.NextBatch(n)
	if err != nil {
		return nil, classify(err, what)
	}
	defer ch.Release()
	if int64(ch.Len()) != n {
		if whole {
			return nil, errs.BadInputf("%s: decoded %d values, the footer says %d rows", what, ch.Len(), f.RowGroupRows[rg])
		}
		return nil, errs.BadInputf("%s: decoded %d values where %d of the footer's %d rows remained", what, ch.Len(), n, f.RowGroupRows[rg])
	}
	arr, err := concat(ch)
	if tl, ok := err.(errTooLarge); ok {
		return nil, errs.WithHint(errs.BadInputf("%s: %v", what, tl), tooLargeHint)
	}
	if err != nil {
		return nil, err
	}
	if f.t.Compact {
		arr = compact(arr, f.t.mem)
	}
	if verr := validateArray(arr); verr != nil {
		dt := arr.DataType()
		arr.Release()
		if n := f.decodedBytes(rg, col); whole && n > math.MaxInt32 && hasInt32Offsets(dt) {
			// Not damage: arrow-go's reader wraps the 32-bit offsets of a
			// column chunk past 2 GiB around.
			return nil, errs.WithHint(errs.BadInputf("%s: %v", what, errTooLarge{n}), tooLargeHint)
		}
		return nil, errs.WithHint(errs.BadInputf("%s: corrupt data: %v", what, verr), "re-export the file or leave it out of --input")
	}
	if f.t.partCol != nil && f.t.partCol[col] >= 0 {
		if err := f.checkPartition(arr, col, what); err != nil {
			arr.Release()
			return nil, err
		}
	}
	return arr, nil
}

// tooLargeHint says what to do with a row group's column too large for
// one array with 32-bit offsets (errTooLarge).
const tooLargeHint = "rewrite the file with smaller row groups (e.g. DuckDB's COPY ... (ROW_GROUP_SIZE n)), or with the column as large_string or large_list in its stored Arrow schema"

// decodedBytes is the decoded size the footer gives for table column col
// of row group rg: its leaf column chunks' uncompressed sizes.
func (f *File) decodedBytes(rg, col int) int64 {
	md, err := f.Metadata()
	if err != nil || rg >= md.NumRowGroups() || col >= len(f.leaves) {
		return 0
	}
	var n int64
	for _, leaf := range f.leaves[col] {
		if cc, err := md.RowGroup(rg).ColumnChunk(leaf); err == nil {
			n += cc.TotalUncompressedSize()
		}
	}
	return n
}

// hasInt32Offsets reports whether arrays of t have 32-bit offsets at some
// depth (strings, binary, lists, maps), which cap one array at 2 GiB of
// values.
func hasInt32Offsets(t arrow.DataType) bool {
	switch t := t.(type) {
	case *arrow.StringType, *arrow.BinaryType, *arrow.ListType, *arrow.MapType:
		return true
	case *arrow.LargeListType:
		return hasInt32Offsets(t.Elem())
	case *arrow.FixedSizeListType:
		return hasInt32Offsets(t.Elem())
	case *arrow.StructType:
		for _, f := range t.Fields() {
			if hasInt32Offsets(f.Type) {
				return true
			}
		}
	}
	return false
}

// validateArray checks a decoded array's internal consistency (offsets in
// range and increasing, child lengths, dictionary indices), so that a
// damaged page the decoder accepted fails here, naming the column, and not
// as a panic in whatever touches the values next.
func validateArray(a arrow.Array) error {
	// Strings: offsets only. Invalid UTF-8 is passed through as the input
	// has it (arrow's ValidateFull would refuse it).
	switch x := a.(type) {
	case *array.String:
		if err := x.Validate(); err != nil {
			return err
		}
		return monotonic(x.ValueOffsets())
	case *array.LargeString:
		if err := x.Validate(); err != nil {
			return err
		}
		return monotonic(x.ValueOffsets())
	}
	if v, ok := a.(interface{ ValidateFull() error }); ok {
		if err := v.ValidateFull(); err != nil {
			return err
		}
	}
	switch x := a.(type) {
	case *array.Struct:
		for i := 0; i < x.NumField(); i++ {
			if x.Field(i).Len() < x.Len()+x.Data().Offset() {
				return fmt.Errorf("struct field %d has %d values for %d rows", i, x.Field(i).Len(), x.Len())
			}
			if err := validateArray(x.Field(i)); err != nil {
				return err
			}
		}
	case array.ListLike:
		return validateArray(x.ListValues())
	case *array.Dictionary:
		if err := validateArray(x.Dictionary()); err != nil {
			return err
		}
		n := x.Dictionary().Len()
		for i := 0; i < x.Len(); i++ {
			if x.IsValid(i) {
				if k := x.GetValueIndex(i); k < 0 || k >= n {
					return fmt.Errorf("dictionary index %d at row %d is outside the dictionary of %d values", k, i, n)
				}
			}
		}
	}
	return nil
}

func classify(err error, what string) error {
	var e *errs.Error
	if errors.As(err, &e) && (e.Class == errs.Transient || e.Class == errs.BadInput) {
		return e // classified where the cause was known (a page CRC, a read past the end)
	}
	if errors.Is(err, context.Canceled) {
		return errs.TransientErr(fmt.Errorf("%s: %w", what, err))
	}
	return badData(what, err)
}

func unsupported(what string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "unsupported: ")
	return errs.WithHint(errs.BadInputf("%s: unsupported: %s", what, msg), "convert the file, e.g. with DuckDB COPY, or leave it out of --input")
}

// badData words a decoder error: unsupported features say "unsupported:",
// everything else is damaged data; both say what to do.
func badData(what string, err error) error {
	msg := err.Error()
	low := strings.ToLower(msg)
	switch {
	case strings.Contains(low, "decrypt"), strings.Contains(low, "encrypt"):
		return errs.WithHint(errs.BadInputf("%s: unsupported: encrypted columns", what), "decrypt the file first")
	case strings.Contains(low, "unimplemented"), strings.Contains(low, "not implemented"),
		strings.Contains(low, "not supported"), strings.Contains(low, "unsupported"):
		return unsupported(what, err)
	}
	return errs.WithHint(errs.BadInputf("%s: corrupt data: %s", what, msg), "re-export the file or leave it out of --input")
}

func leafSet(sf *pqarrow.SchemaField, into map[int]bool) map[int]bool {
	if len(sf.Children) == 0 {
		into[sf.ColIndex] = true
		return into
	}
	for i := range sf.Children {
		leafSet(&sf.Children[i], into)
	}
	return into
}

func monotonic[T int32 | int64](offs []T) error {
	for i := 1; i < len(offs); i++ {
		if offs[i] < offs[i-1] || offs[i-1] < 0 {
			return fmt.Errorf("string offsets decrease at index %d (%d after %d)", i, offs[i], offs[i-1])
		}
	}
	return nil
}

// TimeUTCKey marks, in an Arrow field's metadata, a TIME column that the
// Parquet input declares isAdjustedToUTC=true: Arrow's time types carry no
// such flag, so without the mark the writer would declare it false.
const TimeUTCKey = "relayout.time_adjusted_to_utc"

// markUTCTimes marks (TimeUTCKey) every TIME field, at any depth (struct
// fields, list elements), whose Parquet column is isAdjustedToUTC=true.
func markUTCTimes(sc *arrow.Schema, fr *pqarrow.FileReader) *arrow.Schema {
	pq := fr.ParquetReader().MetaData().Schema
	fields := sc.Fields()
	changed := false
	for i := range fields {
		if i >= len(fr.Manifest.Fields) {
			break
		}
		var ch bool
		if fields[i], ch = markUTC(fields[i], &fr.Manifest.Fields[i], pq); ch {
			changed = true
		}
	}
	if !changed {
		return sc
	}
	md := sc.Metadata()
	return arrow.NewSchema(fields, &md)
}

// markUTC marks field f (read from sf) and its children; it reports
// whether anything was marked. Map keys and values are left unmarked.
func markUTC(f arrow.Field, sf *pqarrow.SchemaField, pq *schema.Schema) (arrow.Field, bool) {
	if sf.IsLeaf() {
		if id := f.Type.ID(); id != arrow.TIME32 && id != arrow.TIME64 {
			return f, false
		}
		t, ok := pq.Column(sf.ColIndex).LogicalType().(schema.TimeLogicalType)
		if !ok || !t.IsAdjustedToUTC() {
			return f, false
		}
		f.Metadata = arrow.NewMetadata(append(f.Metadata.Keys(), TimeUTCKey), append(f.Metadata.Values(), "true"))
		return f, true
	}
	switch t := f.Type.(type) {
	case *arrow.StructType:
		if len(sf.Children) != t.NumFields() {
			return f, false
		}
		kids := slices.Clone(t.Fields())
		changed := false
		for j := range kids {
			var ch bool
			if kids[j], ch = markUTC(kids[j], &sf.Children[j], pq); ch {
				changed = true
			}
		}
		if changed {
			f.Type = arrow.StructOf(kids...)
		}
		return f, changed
	case *arrow.ListType, *arrow.LargeListType, *arrow.FixedSizeListType:
		if len(sf.Children) != 1 {
			return f, false
		}
		elem, ch := markUTC(t.(arrow.ListLikeType).ElemField(), &sf.Children[0], pq)
		if !ch {
			return f, false
		}
		switch t := t.(type) {
		case *arrow.ListType:
			f.Type = arrow.ListOfField(elem)
		case *arrow.LargeListType:
			f.Type = arrow.LargeListOfField(elem)
		case *arrow.FixedSizeListType:
			f.Type = arrow.FixedSizeListOfField(t.Len(), elem)
		}
		return f, true
	}
	return f, false
}

// openHandle opens an object as Parquet: its magic bytes, footer (with
// the page CRC index) and Arrow reader.
func openHandle(ctx context.Context, obj storage.Object, counts *storage.Counters) (h *handle, err error) {
	defer errs.Recover(&err, "open "+obj.URL)
	ra, err := storage.NewReaderAt(ctx, obj, counts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			ra.Close()
		}
	}()
	if obj.Size < 12 {
		return nil, errs.BadInputf("open %s: not a Parquet file (only %d bytes)", obj.URL, obj.Size)
	}
	var magic [4]byte
	if _, err := ra.ReadAt(magic[:], obj.Size-4); err != nil && err != io.EOF {
		return nil, err
	}
	switch {
	case bytes.Equal(magic[:], []byte("PARE")):
		return nil, errs.BadInputf("open %s: unsupported: encrypted Parquet file (decrypt it first)", obj.URL)
	case !bytes.Equal(magic[:], []byte("PAR1")):
		return nil, errs.BadInputf("open %s: not a Parquet file (bad magic bytes at the end)", obj.URL)
	}
	props := parquet.NewReaderProperties(memory.DefaultAllocator)
	props.BufferedStreamEnabled = false // one read per column chunk
	cra := &crcReaderAt{ReaderAt: ra, url: obj.URL}
	pq, err := file.NewParquetReader(cra, file.WithReadProps(props))
	if err != nil {
		if c := errs.ClassOf(err); c == errs.Transient {
			return nil, err
		}
		return nil, badData("open "+obj.URL, err)
	}
	cra.md = pq.MetaData() // indexed on the first chunk read
	setPageLimits(props, pq.MetaData(), obj.Size)
	return &handle{ra: ra, pq: pq, url: obj.URL}, nil
}

// setPageLimits raises arrow-go's limits on a page's declared sizes (64
// MiB compressed, 256 MiB decompressed by default: a valid file with a
// larger page, such as a column of large blobs written with a large page
// size, was refused as corrupt) to what the file's row groups can hold:
// a page lies in one column chunk of one row group, so none is larger than
// the largest row group, stored or decoded (nor than the file, nor than a
// page header's int32 allows). A damaged page header still cannot make the
// reader allocate more than its row group's size.
func setPageLimits(props *parquet.ReaderProperties, md *metadata.FileMetaData, size int64) {
	c, u := parquet.DefaultMaxCompressedPageSize, parquet.DefaultMaxUncompressedPageSize
	for i := 0; i < md.NumRowGroups(); i++ {
		rg := md.RowGroup(i)
		stored := rg.TotalCompressedSize()
		if stored <= 0 { // not written by older writers: the file bounds it
			stored = size
		}
		c = max(c, min(stored, size))
		u = max(u, rg.TotalByteSize())
	}
	props.MaxCompressedPageSize = min(c, math.MaxInt32)
	props.MaxUncompressedPageSize = min(u, math.MaxInt32)
}

// AddPartitions adds the Hive partition columns p found in the files'
// paths (p.Values[i] is file i's). A key that is not a file column becomes
// a column appended after the files' own, whose every row holds the file's
// folder value. A key that is also a file column stays the file's column,
// and every value read from it must equal the folder's (a file in
// date=2026-11-30/ holding another date is bad input, naming the file).
func (t *Table) AddPartitions(p *hive.Partitioning) error {
	if p == nil || len(p.Keys) == 0 {
		return nil
	}
	if len(p.Values) != len(t.Files) {
		return fmt.Errorf("partitions for %d files, the table has %d", len(p.Values), len(t.Files))
	}
	t.parts = p
	t.partCol = make([]int, t.Schema.NumFields())
	for i := range t.partCol {
		t.partCol[i] = -1
	}
	fields := t.Schema.Fields()
	for k, key := range p.Keys {
		if idx := t.Schema.FieldIndices(key); len(idx) > 0 {
			typ := fields[idx[0]].Type
			for i, f := range t.Files {
				if p.Nulls[i][k] {
					continue
				}
				if _, err := hive.Parse(typ, p.Values[i][k]); err != nil {
					return errs.WithHint(errs.BadInputf("input %s: partition folder %s=%q does not fit the file's own column %q (%s): %v", f.Obj.URL, key, p.Values[i][k], key, typ, err),
						"rename the folder or the column, or pass --hive-partitioning off")
				}
			}
			t.partCol[idx[0]] = k
			continue
		}
		fields = append(fields, arrow.Field{Name: key, Type: p.Types[k], Nullable: true})
		t.partCol = append(t.partCol, k)
	}
	extra := len(fields) - t.Schema.NumFields()
	t.remap(func(colMap []int, leaves [][]int) ([]int, [][]int) {
		colMap, leaves = slices.Clone(colMap), slices.Clone(leaves)
		for i := 0; i < extra; i++ {
			colMap, leaves = append(colMap, -1), append(leaves, nil)
		}
		return colMap, leaves
	})
	md := t.Schema.Metadata()
	t.Schema = arrow.NewSchema(fields, &md)
	return nil
}

// remap replaces every file's column mapping by fn's, once per distinct
// mapping (files share them).
func (t *Table) remap(fn func(colMap []int, leaves [][]int) ([]int, [][]int)) {
	type pair struct {
		colMap []int
		leaves [][]int
	}
	done := map[*int]pair{}
	for _, f := range t.Files {
		if len(f.colMap) == 0 {
			f.colMap, f.leaves = fn(f.colMap, f.leaves)
			continue
		}
		key := &f.colMap[0]
		p, ok := done[key]
		if !ok {
			p.colMap, p.leaves = fn(f.colMap, f.leaves)
			done[key] = p
		}
		f.colMap, f.leaves = p.colMap, p.leaves
	}
	t.shared = nil
}

// Reorder puts the table's columns in the order names gives, which must
// name each column once: an output whose partition columns live in its
// folders reads back in its manifest's column order.
func (t *Table) Reorder(names []string) error {
	if len(names) != t.Schema.NumFields() {
		return fmt.Errorf("reorder: %d names for %d columns", len(names), t.Schema.NumFields())
	}
	perm := make([]int, len(names))
	seen := map[int]bool{}
	for i, n := range names {
		idx := t.Schema.FieldIndices(n)
		if len(idx) != 1 || seen[idx[0]] {
			return fmt.Errorf("reorder: column %q is not one column of the table", n)
		}
		seen[idx[0]] = true
		perm[i] = idx[0]
	}
	t.remap(func(colMap []int, leaves [][]int) ([]int, [][]int) {
		c, l := make([]int, len(perm)), make([][]int, len(perm))
		for i, p := range perm {
			c[i], l[i] = colMap[p], leaves[p]
		}
		return c, l
	})
	if t.partCol != nil {
		pc := make([]int, len(perm))
		for i, p := range perm {
			pc[i] = t.partCol[p]
		}
		t.partCol = pc
	}
	fields := make([]arrow.Field, len(perm))
	for i, p := range perm {
		fields[i] = t.Schema.Field(p)
	}
	md := t.Schema.Metadata()
	t.Schema = arrow.NewSchema(fields, &md)
	return nil
}

// Partitioning returns the partitions added with AddPartitions (nil: none).
func (t *Table) Partitioning() *hive.Partitioning { return t.parts }

// partitionValue is file f's folder value for partition key k (nil: null).
func (t *Table) partitionValue(f *File, k int) *string {
	if t.parts.Nulls[f.pos][k] {
		return nil
	}
	return &t.parts.Values[f.pos][k]
}

// partitionColumn returns n rows of a column that only the path holds.
func (f *File) partitionColumn(col, n int) (arrow.Array, error) {
	k := f.t.partCol[col]
	return hive.Constant(f.t.mem, f.t.Schema.Field(col).Type, f.t.partitionValue(f, k), n)
}

// checkPartition checks that a file column that is also a partition key
// holds the folder's value in every row.
func (f *File) checkPartition(arr arrow.Array, col int, what string) error {
	k := f.t.partCol[col]
	want := f.t.partitionValue(f, k)
	var ws string
	if want != nil {
		one, err := hive.Parse(arr.DataType(), *want)
		if err != nil {
			return errs.BadInputf("%s: folder value %q is not a %s: %v", what, *want, arr.DataType(), err)
		}
		ws = strings.Clone(one.ValueStr(0)) // ValueStr of a string points into one's buffer
		one.Release()
	}
	for i := 0; i < arr.Len(); i++ {
		ok := arr.IsNull(i) == (want == nil) && (want == nil || arr.ValueStr(i) == ws)
		if !ok {
			got := "null"
			if arr.IsValid(i) {
				got = arr.ValueStr(i)
			}
			folder := hive.DefaultPartition
			if want != nil {
				folder = *want
			}
			return errs.WithHint(errs.BadInputf("%s: row %d holds %s, but the file lies in the partition folder %s=%s",
				what, i, got, f.t.parts.Keys[k], folder), "move the file to its partition's folder, or pass --hive-partitioning off to read the column as stored")
		}
	}
	return nil
}

// PartitionValue returns, for a column that only the file's path holds,
// its one value as a one-row array (the caller releases it); nil for a
// file column. Readers that prune by folder use it as exact statistics.
func (f *File) PartitionValue(col int) arrow.Array {
	if col < 0 || col >= len(f.colMap) || f.colMap[col] >= 0 {
		return nil
	}
	a, err := f.partitionColumn(col, 1)
	if err != nil {
		return nil
	}
	return a
}

// Page is a data page's size: Bytes decompressed, Stored as stored.
type Page struct{ Bytes, Stored int64 }

// LargestPage is the largest data page (by its decompressed bytes) of row
// group rg, among the column chunks that hold more than half the row
// group's bytes (in the others no page can outweigh the rest of the row
// group): a reader holds the page it decodes whole, however few of its rows
// it asks for, and arrow-based writers close a page only between batches of
// 1,024 values (1,024 images of 1 MB make one page; DuckDB cuts at 100
// MiB). The sizes come from the chunk's offset index where it has one (the
// largest stored page, scaled by the chunk's compression ratio), else from
// its first data page's header (walkPages), else the whole chunk. The zero
// Page where no chunk qualifies.
func (f *File) LargestPage(rg int) (Page, error) {
	f.pagesMu.Lock()
	defer f.pagesMu.Unlock()
	if p, ok := f.pages[rg]; ok {
		return p, nil
	}
	h, err := f.t.acquire(f)
	if err != nil {
		return Page{}, err
	}
	defer f.t.release(f)
	md := h.pq.MetaData()
	if rg >= md.NumRowGroups() {
		return Page{}, nil
	}
	rgm := md.RowGroup(rg)
	var total int64
	for c := 0; c < rgm.NumColumns(); c++ {
		if cc, err := rgm.ColumnChunk(c); err == nil {
			total += cc.TotalUncompressedSize()
		}
	}
	var most Page
	for c := 0; c < rgm.NumColumns(); c++ {
		cc, err := rgm.ColumnChunk(c)
		if err != nil || 2*cc.TotalUncompressedSize() <= total {
			continue
		}
		page, ok := Page{}, false
		if cc.GetOffsetIndexLocation() != nil {
			page, ok = offsetIndexPage(h.pq, rg, c, cc)
		}
		if !ok {
			page, ok = walkPages(h.ra, cc)
		}
		if !ok {
			page = Page{Bytes: cc.TotalUncompressedSize(), Stored: cc.TotalCompressedSize()}
		}
		if page.Bytes > most.Bytes {
			most = page
		}
	}
	if f.pages == nil {
		f.pages = map[int]Page{}
	}
	f.pages[rg] = most
	return most, nil
}

// DecodedEstimateOf is a row group's part of DecodedEstimate, with its
// strings held as a dictionary counted at their dictionary's average
// entry length: it reads the header of each such column's dictionary page
// (4 KiB a column, once: the figure is kept), so the plan asks it of one
// row group. The footer's figure alone counted 17 bytes a row for a column
// of 100 distinct 44-byte URLs, which decode to 61.
func (f *File) DecodedEstimateOf(rg int) (int64, error) {
	f.pagesMu.Lock()
	defer f.pagesMu.Unlock()
	if est, ok := f.estimates[rg]; ok {
		return est, nil
	}
	est, err := f.decodedEstimateOf(rg)
	if err != nil {
		return 0, err
	}
	if f.estimates == nil {
		f.estimates = map[int]int64{}
	}
	f.estimates[rg] = est
	return est, nil
}

func (f *File) decodedEstimateOf(rg int) (int64, error) {
	h, err := f.t.acquire(f)
	if err != nil {
		return 0, err
	}
	defer f.t.release(f)
	md := h.pq.MetaData()
	if rg >= md.NumRowGroups() {
		return 0, nil
	}
	d, err := rowGroupDecoded(md, rg, "read "+f.Obj.URL, func(cc *metadata.ColumnChunkMetaData) float64 {
		pos := chunkStart(cc)
		ph, _, ok := readPageHeader(h.ra, pos, pos+cc.TotalCompressedSize())
		if !ok || ph.Type != format.DictionaryPage {
			return -1
		}
		dh, ok := ph.DictionaryPageHeader.Get()
		if !ok || dh.NumValues <= 0 {
			return -1
		}
		return max(float64(ph.UncompressedPageSize)/float64(dh.NumValues)-4, 0) // PLAIN entries: a 4-byte length each
	})
	return d.est, err
}

// offsetIndexPage is the largest page of a chunk by its offset index: the
// largest stored page, scaled by the chunk's compression ratio.
func offsetIndexPage(pq *file.Reader, rg, c int, cc *metadata.ColumnChunkMetaData) (Page, bool) {
	idx, err := pq.GetPageIndexReader().RowGroup(rg)
	if err != nil || idx == nil {
		return Page{}, false
	}
	oi, err := idx.GetOffsetIndex(c)
	if err != nil || oi == nil || len(oi.GetPageLocations()) == 0 {
		return Page{}, false
	}
	var stored int64
	for _, pl := range oi.GetPageLocations() {
		stored = max(stored, int64(pl.CompressedPageSize))
	}
	unc, comp := cc.TotalUncompressedSize(), max(cc.TotalCompressedSize(), 1)
	return Page{Bytes: min(unc, int64(float64(stored)*float64(unc)/float64(comp))), Stored: stored}, true
}

// walkPages is a chunk's first data page, by its header (and the
// dictionary page's before it), taken as its largest: writers cut pages by
// one rule (1,024 values; DuckDB's 100 MiB), and one read a chunk keeps
// the plan to one request per large row group of a table in an object
// store. A header that cannot be read (readPageHeader) is not ok.
func walkPages(ra io.ReaderAt, cc *metadata.ColumnChunkMetaData) (Page, bool) {
	pos := chunkStart(cc)
	end := pos + cc.TotalCompressedSize()
	var most Page
	for i := 0; i < 2 && pos < end; i++ {
		ph, n, ok := readPageHeader(ra, pos, end)
		if !ok || ph.CompressedPageSize < 0 {
			return Page{}, false
		}
		if b := int64(ph.UncompressedPageSize); b > most.Bytes {
			most = Page{Bytes: b, Stored: int64(ph.CompressedPageSize)}
		}
		if ph.Type != format.DictionaryPage {
			break
		}
		pos += int64(n) + int64(ph.CompressedPageSize)
	}
	return most, true
}

// chunkStart is where a column chunk's first page starts: its dictionary
// page's, where it has one before its data pages.
func chunkStart(cc *metadata.ColumnChunkMetaData) int64 {
	pos := cc.DataPageOffset()
	if cc.HasDictionaryPage() && cc.DictionaryPageOffset() > 0 && cc.DictionaryPageOffset() < pos {
		pos = cc.DictionaryPageOffset()
	}
	return pos
}

// readPageHeader reads and parses the page header at pos, before end: 4
// KiB first, 64 KiB where it does not parse in 4 (statistics of long
// values); not ok where it does not parse in 64 KiB or cannot be read. n
// is the header's length.
func readPageHeader(ra io.ReaderAt, pos, end int64) (ph *format.PageHeader, n int, ok bool) {
	for _, size := range []int64{4 << 10, 64 << 10} {
		buf := make([]byte, min(size, end-pos))
		if k, err := ra.ReadAt(buf, pos); err != nil && !(err == io.EOF && k == len(buf)) {
			return nil, 0, false
		}
		if ph, n, err := parsePageHeader(buf); err == nil {
			return ph, n, true
		}
	}
	return nil, 0, false
}
