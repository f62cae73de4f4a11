package partition

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/klauspost/compress/zstd"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/storage"
)

// codecBatch builds a batch of n rows whose columns exercise every case
// of the shuffle codec: repeated and unique strings (with nulls, large and
// binary), fixed-length lists (with null lists of the same length),
// variable lists of strings, large lists, lists of lists, and a column it
// leaves alone. unique makes every string distinct (no dictionary).
func codecBatch(t *testing.T, n int, seed int64, unique bool) arrow.RecordBatch {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	mem := memory.DefaultAllocator
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "country", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "large", Type: arrow.BinaryTypes.LargeString, Nullable: true},
		{Name: "bin", Type: arrow.BinaryTypes.Binary},
		{Name: "emb", Type: arrow.ListOfField(arrow.Field{Name: "element", Type: arrow.PrimitiveTypes.Float32, Nullable: true}), Nullable: true},
		{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
		{Name: "ltags", Type: arrow.LargeListOf(arrow.BinaryTypes.String)},
		{Name: "nested", Type: arrow.ListOf(arrow.ListOf(arrow.BinaryTypes.String))},
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	word := func(k int) string {
		if unique {
			return fmt.Sprintf("u%d-%d-%d", seed, k, r.Int63())
		}
		return []string{"DE", "FR", "US", "", "a longer value", "ünïcode"}[k%6]
	}
	for i := 0; i < n; i++ {
		q := i / 7 // runs of one value, as query-level columns have
		if i%11 == 3 {
			b.Field(0).AppendNull()
			b.Field(1).AppendNull()
		} else {
			b.Field(0).(*array.StringBuilder).Append(word(q))
			b.Field(1).(*array.LargeStringBuilder).Append(word(r.Intn(5)))
		}
		b.Field(2).(*array.BinaryBuilder).Append([]byte(word(r.Intn(3))))
		emb := b.Field(3).(*array.ListBuilder)
		if i%13 == 5 {
			// A null list of the same length keeps the column fixed-size.
			emb.AppendNull()
		} else {
			emb.Append(true)
		}
		for k := 0; k < 4; k++ {
			if i%13 == 5 || k == i%5 {
				emb.ValueBuilder().(*array.Float32Builder).AppendNull()
			} else {
				emb.ValueBuilder().(*array.Float32Builder).Append(float32(q*4 + k))
			}
		}
		tags := b.Field(4).(*array.ListBuilder)
		if i%17 == 2 {
			tags.AppendNull()
		} else {
			tags.Append(true)
			for k := 0; k < i%4; k++ {
				tags.ValueBuilder().(*array.StringBuilder).Append(word(r.Intn(4)))
			}
		}
		lt := b.Field(5).(*array.LargeListBuilder)
		lt.Append(true)
		for k := 0; k < 1+i%2; k++ {
			lt.ValueBuilder().(*array.StringBuilder).Append(word(k))
		}
		nl := b.Field(6).(*array.ListBuilder)
		nl.Append(true)
		inner := nl.ValueBuilder().(*array.ListBuilder)
		for k := 0; k < i%3; k++ {
			inner.Append(true)
			inner.ValueBuilder().(*array.StringBuilder).Append(word(k))
		}
		b.Field(7).(*array.Int64Builder).Append(int64(i))
	}
	return b.NewRecordBatch()
}

// shuffleRoundTrip writes the batches (and slices of them, as routing hands
// the writer) to unit 0 of a shuffle and reads the segment back.
func shuffleRoundTrip(t *testing.T, batches []arrow.RecordBatch, lean bool) []arrow.RecordBatch {
	t.Helper()
	dir := t.TempDir()
	work, err := storage.OpenDir(context.Background(), dir, true)
	if err != nil {
		t.Fatal(err)
	}
	sw, err := NewShuffleWriter(work, "m/", "", lean)
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Abort()
	for _, b := range batches {
		if err := sw.Write(0, b); err != nil {
			t.Fatal(err)
		}
	}
	segs, err := sw.Publish(context.Background(), []int{0})
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) != 1 {
		t.Fatalf("%d segments, want 1", len(segs))
	}
	got, err := ReadSegment(context.Background(), work, segs[0], batches[0].Schema())
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func sameBatches(t *testing.T, got, want []arrow.RecordBatch) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("read %d batches, wrote %d", len(got), len(want))
	}
	for i := range want {
		if !got[i].Schema().Equal(want[i].Schema()) {
			t.Fatalf("batch %d: schema\n%s\nwant\n%s", i, got[i].Schema(), want[i].Schema())
		}
		for c := 0; c < int(want[i].NumCols()); c++ {
			if !array.Equal(got[i].Column(c), want[i].Column(c)) {
				t.Fatalf("batch %d column %s differs after the shuffle:\n got %v\nwant %v", i, want[i].ColumnName(c), got[i].Column(c), want[i].Column(c))
			}
		}
	}
}

// TestShuffleCodecRoundTrips checks that what a map task writes is what a
// reduce reads, column for column, lean and plain; lean with every
// encoding the codec picks,
// with batches that are slices of larger ones (offsets not at zero), and
// with a stream whose batches switch encodings (a new stream in the same
// segment).
func TestShuffleCodecRoundTrips(t *testing.T) {
	full := codecBatch(t, 500, 1, false)
	defer full.Release()
	uniq := codecBatch(t, 300, 2, true)
	defer uniq.Release()
	small := codecBatch(t, 5, 3, false) // below minDictRows
	defer small.Release()
	want := []arrow.RecordBatch{full, full.NewSlice(37, 400), uniq, small, full.NewSlice(3, 250), uniq.NewSlice(1, 2)}
	defer func() {
		for _, b := range want[1:] {
			if b != uniq && b != small {
				b.Release()
			}
		}
	}()
	// The codec must have encoded what it can: otherwise this test would
	// pass with the codec turned off.
	enc := encodeBatch(full)
	types := enc.Schema().String()
	enc.Release()
	for _, frag := range []string{"dictionary<values=utf8", "dictionary<values=large_utf8", "dictionary<values=binary", "fixed_size_list<element: float32, nullable>[4]", "list<item: dictionary<values=utf8"} {
		if !strings.Contains(types, frag) {
			t.Errorf("encoded schema lacks %q:\n%s", frag, types)
		}
	}
	enc = encodeBatch(uniq)
	if s := enc.Schema().Field(0).Type; s.ID() != arrow.STRING {
		t.Errorf("unique strings encoded as %s, want them left as strings", s)
	}
	enc.Release()
	for _, lean := range []bool{true, false} {
		got := shuffleRoundTrip(t, want, lean)
		sameBatches(t, got, want)
		for _, g := range got {
			g.Release()
		}
	}
}

// TestShuffleSegmentIsSmall checks the point of the codec: a query-level
// string column and an embedding cost far less than their Arrow bytes.
func TestShuffleSegmentIsSmall(t *testing.T) {
	full := codecBatch(t, 20000, 4, false)
	defer full.Release()
	dir := t.TempDir()
	work, err := storage.OpenDir(context.Background(), dir, true)
	if err != nil {
		t.Fatal(err)
	}
	cols := arrow.NewSchema([]arrow.Field{full.Schema().Field(0), full.Schema().Field(3)}, nil)
	rec := array.NewRecordBatch(cols, []arrow.Array{full.Column(0), full.Column(3)}, full.NumRows())
	defer rec.Release()
	sw, err := NewShuffleWriter(work, "m/", "", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.Write(0, rec); err != nil {
		t.Fatal(err)
	}
	segs, err := sw.Publish(context.Background(), []int{0})
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, "m", unitFileName(0)))
	if err != nil {
		t.Fatal(err)
	}
	// The same batch as a plain Arrow IPC stream, compressed alike.
	var plain bytes.Buffer
	w := ipc.NewWriter(&plain, ipc.WithSchema(rec.Schema()))
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	w.Close()
	enc := shuffleZstd.Get().(*zstd.Encoder)
	plainZ := len(enc.EncodeAll(plain.Bytes(), nil))
	shuffleZstd.Put(enc)
	if st.Size() != segs[0].Length || float64(st.Size()) > 0.7*float64(plainZ) {
		t.Errorf("segment of 20000 rows is %d bytes (recorded %d), want at most 0.7x the %d bytes of plain compressed IPC", st.Size(), segs[0].Length, plainZ)
	}
	t.Logf("segment %d bytes, plain IPC compressed alike %d", st.Size(), plainZ)
}

// TestShuffleSegmentRejectsAnotherSchema checks that a segment read with
// a schema other than the one written is refused, not misread.
func TestShuffleSegmentRejectsAnotherSchema(t *testing.T) {
	full := codecBatch(t, 100, 5, false)
	defer full.Release()
	dir := t.TempDir()
	work, _ := storage.OpenDir(context.Background(), dir, true)
	sw, _ := NewShuffleWriter(work, "m/", "", true)
	if err := sw.Write(0, full); err != nil {
		t.Fatal(err)
	}
	segs, err := sw.Publish(context.Background(), []int{0})
	if err != nil {
		t.Fatal(err)
	}
	other := arrow.NewSchema(append([]arrow.Field{{Name: "country", Type: arrow.PrimitiveTypes.Int32}}, full.Schema().Fields()[1:]...), nil)
	_, err = ReadSegment(context.Background(), work, segs[0], other)
	if err == nil || !strings.Contains(err.Error(), "country") || !errs.Is(err, errs.BadInput) {
		t.Fatalf("read with another schema: %v, want bad input naming the column", err)
	}
	// Damaged bytes fail the frame's checksum: bad input, not retried.
	path := filepath.Join(dir, "m", unitFileName(0))
	data, _ := os.ReadFile(path)
	data[len(data)/2] ^= 0x55
	os.WriteFile(path, data, 0o644)
	_, err = ReadSegment(context.Background(), work, segs[0], full.Schema())
	if err == nil || !errs.Is(err, errs.BadInput) {
		t.Fatalf("read of a damaged segment: %v, want bad input", err)
	}
	// An object shorter than its segment (cut, or replaced) is bad input
	// naming it, on a local folder and in an object store alike: a retry
	// would read the same, and orchestrators retry exit 4 forever.
	ctx := context.Background()
	mem, err := storage.OpenDir(ctx, "mem://shuffle-truncated", true)
	if err != nil {
		t.Fatal(err)
	}
	defer storage.DropMemBucket("shuffle-truncated")
	for _, loc := range []storage.Location{work, mem} {
		if err := storage.Put(ctx, loc, segs[0].Path, data[:len(data)/2], storage.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err = ReadSegment(ctx, loc, segs[0], full.Schema())
		if !errs.Is(err, errs.BadInput) || !strings.Contains(err.Error(), "shorter") || !strings.Contains(err.Error(), segs[0].Path) {
			t.Fatalf("%s: read of a truncated segment: %v, want bad input naming it", loc.URL(""), err)
		}
	}
}

// TestShuffleDictionaryIndexWidth: a dictionary of up to 127 values gets
// int8 indices, up to 32,767 int16, more int32, and each decodes to the
// strings written (nulls included); a sliced batch too.
func TestShuffleDictionaryIndexWidth(t *testing.T) {
	for _, c := range []struct {
		distinct int
		want     arrow.DataType
	}{
		{127, arrow.PrimitiveTypes.Int8},
		{128, arrow.PrimitiveTypes.Int16},
		{32767, arrow.PrimitiveTypes.Int16},
		{32768, arrow.PrimitiveTypes.Int32},
	} {
		n := 2*c.distinct + 10
		b := array.NewStringBuilder(memory.DefaultAllocator)
		for i := 0; i < n; i++ {
			if i%97 == 5 {
				b.AppendNull()
				continue
			}
			b.Append(fmt.Sprintf("v%d", (i*7919)%c.distinct))
		}
		col := b.NewArray()
		b.Release()
		schema := arrow.NewSchema([]arrow.Field{{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true}}, nil)
		rec := array.NewRecordBatch(schema, []arrow.Array{col}, int64(n))
		col.Release()
		enc := encodeBatch(rec)
		dt, ok := enc.Column(0).DataType().(*arrow.DictionaryType)
		if !ok || !arrow.TypeEqual(dt.IndexType, c.want) {
			t.Errorf("%d distinct values encoded as %s, want a dictionary with %s indices", c.distinct, enc.Column(0).DataType(), c.want)
		}
		enc.Release()
		sliced := rec.NewSlice(3, int64(n)-2)
		want := []arrow.RecordBatch{rec, sliced}
		got := shuffleRoundTrip(t, want, true)
		sameBatches(t, got, want)
		for _, g := range got {
			g.Release()
		}
		sliced.Release()
		rec.Release()
	}
}

// joined is recs as one batch (the caller releases nothing: a test).
func joined(t *testing.T, recs []arrow.RecordBatch) []arrow.RecordBatch {
	t.Helper()
	rec, err := JoinBatches(recs, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	return []arrow.RecordBatch{rec}
}

// TestShuffleHold: a lean writer that holds its units' frames in memory
// writes one object per attempt (a local file too) with every unit a byte
// range of it; with a budget too small for all of them, units that
// outgrow it get files of their own, held frames first. Every unit reads
// back as written, in a local work folder and in an object store, with
// every budget (none, some spilled, all held). A holding writer joins a
// unit's small batches before it encodes them.
func TestShuffleHold(t *testing.T) {
	ctx := context.Background()
	full := codecBatch(t, 600, 5, false)
	defer full.Release()
	const units = 6
	// Unit u gets u+1 slices: units differ in size, so a middle budget
	// holds the small ones and spills the large.
	wrote := make([][]arrow.RecordBatch, units)
	for u := range units {
		for k := 0; k <= u; k++ {
			wrote[u] = append(wrote[u], full.NewSlice(int64(k*50), int64(k*50+80)))
		}
	}
	defer func() {
		for _, bs := range wrote {
			for _, b := range bs {
				b.Release()
			}
		}
	}()
	part := make([]int, units)
	for _, store := range []string{"local", "mem"} {
		for _, hold := range []int64{0, 20 << 10, 64 << 20} {
			var work storage.Location
			var err error
			if store == "local" {
				work, err = storage.OpenDir(ctx, t.TempDir(), true)
			} else {
				work, err = storage.OpenDir(ctx, "mem://hold-"+fmt.Sprint(hold)+"/", true)
			}
			if err != nil {
				t.Fatal(err)
			}
			sw, err := NewShuffleWriter(work, "m/a/", t.TempDir(), true)
			if err != nil {
				t.Fatal(err)
			}
			sw.Hold(hold, 2)
			sw.Join(hold)
			// Interleaved, as routing hands a map task's batches out.
			for k := 0; k < units; k++ {
				for u := k; u < units; u++ {
					if err := sw.Write(u, wrote[u][k]); err != nil {
						t.Fatal(err)
					}
				}
			}
			var files []string
			if store == "local" {
				for u := range units {
					if _, err := os.Stat(filepath.Join(work.Local, "m", "a", unitFileName(u))); err == nil {
						files = append(files, unitFileName(u))
					}
				}
			}
			segs, err := sw.Publish(ctx, part)
			if err != nil {
				t.Fatal(err)
			}
			one := segs[0].Path == SegmentPath("m/a/", true, 0)
			what := fmt.Sprintf("%s store, hold %d (one object %v; unit files before publishing: %v)", store, hold, one, files)
			switch {
			case store == "mem" && !one, store == "local" && hold == 0 && one, store == "local" && hold == 64<<20 && (!one || len(files) > 0):
				t.Errorf("%s: segments %+v", what, segs)
			case hold == 20<<10 && (len(files) == 0 || len(files) == units) && store == "local":
				t.Errorf("%s: want some units held and some spilled; the budget does not split them", what)
			}
			if len(segs) != units {
				t.Fatalf("%s: %d segments, want %d", what, len(segs), units)
			}
			for u, seg := range segs {
				got, err := ReadSegment(ctx, work, seg, full.Schema())
				if err != nil {
					t.Fatalf("%s: unit %d: %v", what, u, err)
				}
				// Small batches are joined (Hold): the same rows in order.
				sameBatches(t, joined(t, got), joined(t, wrote[u]))
				if hold == 64<<20 && len(got) != 1 {
					t.Errorf("%s: unit %d read back as %d batches; a holding writer joins its %d small ones", what, u, len(got), len(wrote[u]))
				}
				for _, g := range got {
					g.Release()
				}
			}
			if sw.held.Load() != 0 {
				t.Errorf("%s: %d bytes still counted as held after publishing", what, sw.held.Load())
			}
		}
	}
}

// TestShuffleCompressibleSegmentRoundTrips: a segment whose few stored
// bytes decode to more than segmentInMemory (1 MB values of one repeated
// byte, 40 KB stored for 24 MB) is streamed, not decoded at once, and
// reads back as written.
func TestShuffleCompressibleSegmentRoundTrips(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{{Name: "image", Type: arrow.BinaryTypes.Binary}}, nil)
	b := array.NewBinaryBuilder(memory.DefaultAllocator, arrow.BinaryTypes.Binary)
	defer b.Release()
	for i := 0; i < 24; i++ {
		b.Append(bytes.Repeat([]byte{byte('A' + i)}, 1<<20))
	}
	col := b.NewArray()
	rec := array.NewRecordBatch(schema, []arrow.Array{col}, int64(col.Len()))
	col.Release()
	defer rec.Release()
	want := []arrow.RecordBatch{rec.NewSlice(0, 8), rec.NewSlice(8, 24)}
	defer want[0].Release()
	defer want[1].Release()
	if int64(segmentInMemory) >= RecordBytes(rec) {
		t.Fatalf("%d bytes of values do not exceed segmentInMemory", RecordBytes(rec))
	}
	got := shuffleRoundTrip(t, want, true)
	sameBatches(t, got, want)
	for _, g := range got {
		g.Release()
	}
}
