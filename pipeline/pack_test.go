package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	pqformat "github.com/parquet-go/parquet-go/format"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/verify"
)

func packRunOpts(in, out string, mod func(*RunOptions)) RunOptions {
	o := RunOptions{Inputs: []string{in}, Output: out, SliceKeys: []string{"country", "date"}, QueryKey: []string{"query_id"},
		RowGroupBytes: 512 << 10, MinRowGroupBytes: 64 << 10, FileBytes: 1 << 20}
	if mod != nil {
		mod(&o)
	}
	return o
}

// TestPackGenerated packs a generated log and checks it against independent
// readers: DuckDB's unnest of the packed files gives back the input rows,
// parquet-go reads the unpacked files as the input's multiset, and the
// auto-detected query columns are exactly the ones the generator keeps
// constant per query. In-memory, spilled and differently parallel runs give
// the same bytes.
func TestPackGenerated(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 30_000, Files: 3, Seed: 41})
	base := t.TempDir()
	ctx := context.Background()
	res, err := Run(ctx, packRunOpts(in, filepath.Join(base, "packed"), nil))
	if err != nil {
		t.Fatal(err)
	}
	m := res.Manifest
	if p := m.Packing; p == nil || !slices.Equal(p.QueryColumns, gen.QueryLevelColumns) {
		t.Fatalf("query columns %v, want %v", m.Packing.QueryColumns, gen.QueryLevelColumns)
	}
	if m.Totals.Files < 2 || m.Totals.RowGroups < 4 {
		t.Fatalf("want several files and row groups, got %+v", m.Totals)
	}
	q, _ := testutil.DuckDB(t, fmt.Sprintf("select count(distinct query_id)::BIGINT n from read_parquet('%s/*.parquet')", in))
	if fmt.Sprint(q[0]["n"]) != fmt.Sprint(m.Packing.Queries) || m.Totals.Rows != m.Packing.Queries || m.Packing.Items != 30_000 {
		t.Fatalf("packed %d queries (%d rows), %d items; DuckDB counts %v queries", m.Packing.Queries, m.Totals.Rows, m.Packing.Items, q[0]["n"])
	}
	var items int64
	for _, s := range m.Slices {
		items += s.Items
	}
	if items != 30_000 {
		t.Fatalf("slices hold %d items", items)
	}
	cols := strings.Join(m.Packing.FlatColumns, ",")
	diff, _ := testutil.DuckDB(t,
		fmt.Sprintf("CREATE TEMP TABLE p AS SELECT %s FROM (SELECT * EXCLUDE (items), unnest(items, recursive := true) FROM read_parquet('%s/packed/parquet/*.parquet'))", cols, base),
		fmt.Sprintf("CREATE TEMP TABLE f AS SELECT %s FROM read_parquet('%s/*.parquet')", cols, in),
		"SELECT (SELECT count(*) FROM (SELECT * FROM p EXCEPT ALL SELECT * FROM f))::BIGINT a, (SELECT count(*) FROM (SELECT * FROM f EXCEPT ALL SELECT * FROM p))::BIGINT b, (SELECT count(*) FROM p)::BIGINT n")
	if fmt.Sprintf("%v %v %v", diff[0]["a"], diff[0]["b"], diff[0]["n"]) != "0 0 30000" {
		t.Fatalf("DuckDB unnest vs input: %v", diff[0])
	}
	if r, err := verify.Output(ctx, filepath.Join(base, "packed"), true, 2); err != nil || !r.OK {
		t.Fatalf("verify --deep: %+v %v", r, err)
	}
	data, _ := os.ReadFile(filepath.Join(base, "packed", "manifest.json"))
	inst, _ := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err := manifestSchema(t).Validate(inst); err != nil {
		t.Fatalf("packed manifest does not match the schema: %v", err)
	}

	// Determinism: parallelism and spilling do not change the bytes.
	ref := readTree(t, filepath.Join(base, "packed"))
	for name, mod := range map[string]func(*RunOptions){
		"p1":    func(o *RunOptions) { o.Parallel = 1 },
		"spill": func(o *RunOptions) { o.UnitRows = 7_000; o.TmpDir = t.TempDir() },
	} {
		r, err := Run(ctx, packRunOpts(in, filepath.Join(base, name), mod))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if name == "spill" && r.Report.Units < 2 {
			t.Fatalf("spill run used %d units", r.Report.Units)
		}
		got := readTree(t, filepath.Join(base, name))
		for k, v := range ref {
			if !bytes.Equal(got[k], v) {
				t.Fatalf("%s: %s differs", name, k)
			}
		}
	}

	// Unpack restores the input's rows and columns exactly.
	if _, err := Unpack(ctx, UnpackOptions{Input: filepath.Join(base, "packed"), Output: filepath.Join(base, "flat")}); err != nil {
		t.Fatal(err)
	}
	want := testutil.ParquetGoRows(t, testutil.Files(t, in)...)
	got := testutil.ParquetGoRows(t, testutil.Files(t, filepath.Join(base, "flat", "parquet"))...)
	if !slices.Equal(got, want) {
		t.Fatalf("unpacked rows differ from the input (%d vs %d rows)", len(got), len(want))
	}
	// Encoded as a run encodes (from a sample), not with arrow-go's
	// defaults (a dictionary for every column): a float column of
	// distinct values is BYTE_STREAM_SPLIT, without a dictionary page.
	for _, fp := range testutil.Files(t, filepath.Join(base, "flat", "parquet")) {
		for rg, g := range testutil.ParquetGoFile(t, fp).Metadata().RowGroups {
			for _, c := range g.Columns {
				if name := strings.Join(c.MetaData.PathInSchema, "."); name == "item_f0" || name == "model_score" {
					if c.MetaData.DictionaryPageOffset != 0 || !slices.Contains(c.MetaData.Encoding, pqformat.ByteStreamSplit) {
						t.Fatalf("%s row group %d: unpacked column %s has encodings %v (dictionary page at %d); a run writes BYTE_STREAM_SPLIT", filepath.Base(fp), rg, name, c.MetaData.Encoding, c.MetaData.DictionaryPageOffset)
					}
				}
			}
		}
	}
	if r, err := verify.Output(ctx, filepath.Join(base, "flat"), true, 2); err != nil || !r.OK {
		t.Fatalf("verify of the unpacked output: %+v %v", r, err)
	}
	// Unpack again over it: refused without --overwrite, swapped in with it
	// (byte-identical, no staging left).
	before, _ := os.ReadFile(filepath.Join(base, "flat", "manifest.json"))
	if _, err := Unpack(ctx, UnpackOptions{Input: filepath.Join(base, "packed"), Output: filepath.Join(base, "flat")}); !errs.Is(err, errs.Precondition) {
		t.Fatalf("unpack over a committed output without --overwrite: %v", err)
	}
	if _, err := Unpack(ctx, UnpackOptions{Input: filepath.Join(base, "packed"), Output: filepath.Join(base, "flat"), Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(filepath.Join(base, "flat", "manifest.json")); !bytes.Equal(after, before) {
		t.Fatal("unpack --overwrite wrote another manifest")
	}
	if _, err := os.Stat(filepath.Join(base, "flat", "_relayout")); !os.IsNotExist(err) {
		t.Fatalf("unpack --overwrite left its staging folder (%v)", err)
	}
	if r, err := verify.Output(ctx, filepath.Join(base, "flat"), true, 2); err != nil || !r.OK {
		t.Fatalf("verify after unpack --overwrite: %+v %v", r, err)
	}
}

func TestPackConflictsAndLimits(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 5_000, Files: 1, Seed: 42})
	ctx := context.Background()
	run := func(mod func(*RunOptions)) (*Result, error) {
		return Run(ctx, packRunOpts(in, filepath.Join(t.TempDir(), "o"), mod))
	}
	_, err := run(func(o *RunOptions) { o.QueryColumns = []string{"user_*", "item_id"} })
	if !errs.Is(err, errs.BadInput) || !strings.Contains(err.Error(), `"item_id"`) || !strings.Contains(err.Error(), "within query") || !strings.Contains(err.Error(), "--on-query-conflict") {
		t.Fatalf("declared item-level column: %v", err)
	}
	res, err := run(func(o *RunOptions) { o.QueryColumns = []string{"user_*", "item_id"}; o.OnQueryConflict = "items" })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Manifest.Packing.MovedToItems, []string{"item_id"}) || slices.Contains(res.Manifest.Packing.QueryColumns, "item_id") || !slices.Contains(res.Manifest.Packing.QueryColumns, "user_f7") {
		t.Fatalf("packing %+v", res.Manifest.Packing)
	}
	_, err = run(func(o *RunOptions) { o.SliceKeys = []string{"item_category"} })
	if !errs.Is(err, errs.BadInput) || !strings.Contains(err.Error(), `slice key "item_category"`) {
		t.Fatalf("item-level slice key: %v", err)
	}
	_, err = run(func(o *RunOptions) { o.MaxItemsPerQuery = 3 })
	if !errs.Is(err, errs.BadInput) || !strings.Contains(err.Error(), "--max-items-per-query") || !strings.Contains(err.Error(), "query [") {
		t.Fatalf("oversized query: %v", err)
	}
	if _, err := run(func(o *RunOptions) { o.SortKeys = []string{"position"} }); !errs.Is(err, errs.Usage) {
		t.Fatalf("--sort-keys with --query-key: %v", err)
	}
}

// TestPackMerlin: Merlin's synthetic e-commerce log repeats user features on
// every row, with rows not grouped by user; packing by user_id gives one
// row per user, with the three user features the data keeps constant per
// user detected as query-level. music_streaming is the negative case.
func TestPackMerlin(t *testing.T) {
	dir := filepath.Join(testutil.DataDir(t), "merlin-models-synthetic")
	ctx := context.Background()
	small := filepath.Join(dir, "ecommerce", "small", "data.parquet")
	res, err := Run(ctx, RunOptions{Inputs: []string{small}, Output: filepath.Join(t.TempDir(), "o"), QueryKey: []string{"user_id"}})
	if err != nil {
		t.Fatal(err)
	}
	users, _ := testutil.DuckDB(t, fmt.Sprintf("select count(distinct user_id)::BIGINT n from read_parquet('%s')", small))
	if fmt.Sprint(users[0]["n"]) != fmt.Sprint(res.Manifest.Packing.Queries) {
		t.Fatalf("%d packed rows, DuckDB counts %v users", res.Manifest.Packing.Queries, users[0]["n"])
	}
	for _, c := range []string{"user_id", "user_age", "user_gender", "user_geography"} {
		if !slices.Contains(res.Manifest.Packing.QueryColumns, c) {
			t.Errorf("%s not detected as query-level: %v", c, res.Manifest.Packing.QueryColumns)
		}
	}
	if slices.Contains(res.Manifest.Packing.QueryColumns, "item_id") {
		t.Error("item_id detected as query-level")
	}
	music := filepath.Join(dir, "music_streaming", "data.parquet")
	_, err = Run(ctx, RunOptions{Inputs: []string{music}, Output: filepath.Join(t.TempDir(), "o"), QueryKey: []string{"session_id"}, QueryColumns: []string{"user_id"}})
	if !errs.Is(err, errs.BadInput) || !strings.Contains(err.Error(), `"user_id"`) {
		t.Fatalf("music_streaming: user_id varies within a session: %v", err)
	}
}

// TestPackHugeQuery: one query with 1M items packs within the default
// memory limit; under a tight limit it fails naming the query and the flag.
func TestPackHugeQuery(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: writes a 1M-row query")
	}
	p := filepath.Join(t.TempDir(), "huge.parquet")
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "query_id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "user", Type: arrow.BinaryTypes.String},
		{Name: "item", Type: arrow.PrimitiveTypes.Int64},
		{Name: "score", Type: arrow.PrimitiveTypes.Float32},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	for i := 0; i < 1_000_000; i++ {
		b.Field(0).(*array.Int64Builder).Append(7)
		b.Field(1).(*array.StringBuilder).Append("u-7")
		b.Field(2).(*array.Int64Builder).Append(int64(i))
		b.Field(3).(*array.Float32Builder).Append(float32(i % 97))
	}
	testutil.WriteArrow(t, p, b.NewRecordBatch(), parquet.WithMaxRowGroupLength(128<<10))
	ctx := context.Background()
	out := filepath.Join(t.TempDir(), "o")
	res, err := Run(ctx, RunOptions{Inputs: []string{p}, Output: out, QueryKey: []string{"query_id"}})
	if err != nil {
		t.Fatal(err)
	}
	if pk := res.Manifest.Packing; pk.Queries != 1 || pk.Items != 1_000_000 || pk.ItemsPerQuery.Max != 1_000_000 {
		t.Fatalf("packing %+v", pk)
	}
	if r, err := verify.Output(ctx, out, true, 2); err != nil || !r.OK {
		t.Fatalf("verify --deep: %+v %v", r, err)
	}
	_, err = Run(ctx, RunOptions{Inputs: []string{p}, Output: filepath.Join(t.TempDir(), "o"), QueryKey: []string{"query_id"}, MemoryLimit: 96 << 20})
	if !errs.Is(err, errs.BadInput) || !strings.Contains(err.Error(), "query [7]") || !strings.Contains(err.Error(), "--max-items-per-query") {
		t.Fatalf("huge query under a 96 MiB limit: %v", err)
	}
}

// TestPackedRowGroupsEndAtSlices: packing keeps row groups ending where
// slices end, so a reader pruning by statistics reads no more row groups
// per slice from the packed output than from the flat one. (The held-back
// last query of a slice used to spill into the next row group, widening its
// statistics: every slice then read two row groups.)
func TestPackedRowGroupsEndAtSlices(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 40_000, Files: 2, Seed: 11})
	ctx := context.Background()
	base := t.TempDir()
	flatOut, packedOut := filepath.Join(base, "flat"), filepath.Join(base, "packed")
	smallRun(t, in, flatOut, nil)
	if _, err := Run(ctx, packRunOpts(in, packedOut, nil)); err != nil {
		t.Fatal(err)
	}
	inspect := func(dir string) map[string]int {
		r, err := Inspect(ctx, InspectOptions{Inputs: []string{filepath.Join(dir, "parquet")}, SliceKeys: []string{"country", "date"}})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, s := range r.Slices {
			out[fmt.Sprint(s.Key)] = s.RowGroupsRead
		}
		return out
	}
	flat, packed := inspect(flatOut), inspect(packedOut)
	if len(flat) != len(packed) || len(flat) < 100 {
		t.Fatalf("%d flat slices, %d packed", len(flat), len(packed))
	}
	worse := 0
	for k, n := range packed {
		if n > flat[k] {
			worse++
		}
	}
	if worse > 0 {
		t.Fatalf("%d of %d slices read more row groups packed than flat", worse, len(packed))
	}
}

// TestPackingKeepsFloatBits: a float column whose items of one query hold
// -0 and 0, or NaNs of two payloads, is an item column: packing keeps one
// value per query only where every item has the same bits (the
// fingerprint, which hashes values, cannot tell). A column holding -0 in
// every item of its query stays query-level. The case is placed in the
// plan's sample (the probe decides), in a later row group (the read's
// digests, a map task's digests), and with the query split across two
// map tasks; run, spilled run and the distributed steps agree byte for
// byte, and DuckDB counts the input's negative zeros in the output.
func TestPackingKeepsFloatBits(t *testing.T) {
	negZero := math.Copysign(0, -1)
	nan2 := math.Float64frombits(0x7ff8000000000002)
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "country", Type: arrow.BinaryTypes.String},
		{Name: "query_id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "item", Type: arrow.PrimitiveTypes.Int64},
		{Name: "w", Type: arrow.PrimitiveTypes.Float64},                 // the case
		{Name: "v", Type: arrow.PrimitiveTypes.Float64},                 // -0 in every item of a query
		{Name: "emb", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32)}, // the case, nested
	}, nil)
	const queries, items = 600, 4
	type odd struct {
		q    int64
		w    []float64
		emb  float32
		name string
	}
	for _, c := range []odd{
		{3, []float64{0, negZero, 0, 0}, 1, "sample-zero"},
		{450, []float64{0, 0, 0, negZero}, 1, "later-zero"},
		{451, []float64{math.NaN(), math.NaN(), nan2, math.NaN()}, 1, "later-nan"},
		{452, []float64{1, 1, 1, 1}, 0, "later-nested"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			// Two files; query 450's items straddle them (two map tasks).
			var recs [2]*array.RecordBuilder
			for f := range recs {
				recs[f] = array.NewRecordBuilder(memory.DefaultAllocator, sc)
				defer recs[f].Release()
			}
			negZeros := 0
			for q := int64(0); q < queries; q++ {
				for i := int64(0); i < items; i++ {
					b := recs[0]
					if q*items+i >= queries*items*3/4+2 {
						b = recs[1]
					}
					w, e := float64(q%7), float32(q%5)
					if q == c.q {
						w, e = c.w[i], c.emb
						if c.emb == 0 && i%2 == 1 {
							e = float32(negZero) // and 0 in the others
						}
					}
					v := float64(q % 3)
					if q%3 == 0 {
						v = negZero
						negZeros++
					}
					b.Field(0).(*array.StringBuilder).Append([]string{"DE", "FR"}[q%2])
					b.Field(1).(*array.Int64Builder).Append(q)
					b.Field(2).(*array.Int64Builder).Append(q*100 + i)
					b.Field(3).(*array.Float64Builder).Append(w)
					b.Field(4).(*array.Float64Builder).Append(v)
					lb := b.Field(5).(*array.ListBuilder)
					lb.Append(true)
					lb.ValueBuilder().(*array.Float32Builder).Append(e)
				}
			}
			if err := os.MkdirAll(filepath.Join(dir, "in"), 0o755); err != nil {
				t.Fatal(err)
			}
			for f, b := range recs {
				// Not dictionary-encoded: arrow-go's dictionary keeps one NaN.
				testutil.WriteArrow(t, filepath.Join(dir, "in", fmt.Sprintf("%d.parquet", f)), b.NewRecordBatch(), parquet.WithMaxRowGroupLength(400), parquet.WithDictionaryDefault(false))
			}
			o := func(out string, mod func(*RunOptions)) RunOptions {
				x := RunOptions{Inputs: []string{filepath.Join(dir, "in")}, Output: out, SliceKeys: []string{"country"}, QueryKey: []string{"query_id"},
					RowGroupBytes: 16 << 10, MinRowGroupBytes: 2 << 10, FileBytes: 64 << 10}
				if mod != nil {
					mod(&x)
				}
				return x
			}
			ref := filepath.Join(dir, "run")
			res, err := Run(context.Background(), o(ref, nil))
			if err != nil {
				t.Fatal(err)
			}
			p := res.Manifest.Packing
			wantItem := "w"
			if c.emb == 0 {
				wantItem = "emb"
			}
			if !slices.Contains(p.ItemColumns, wantItem) || !slices.Contains(p.QueryColumns, "v") {
				t.Fatalf("query columns %v, item columns %v; want %s an item column, v a query column", p.QueryColumns, p.ItemColumns, wantItem)
			}
			if other := map[string]string{"w": "emb", "emb": "w"}[wantItem]; !slices.Contains(p.QueryColumns, other) {
				t.Fatalf("query columns %v; want %s among them", p.QueryColumns, other)
			}
			// DuckDB counts the negative zeros of the input and of the
			// output unpacked (an item column's values in items, a query
			// column's on the query's row, once per item).
			count := func(from string) string {
				rows, _ := testutil.DuckDB(t, fmt.Sprintf(`select count(*) filter (where signbit(w)) as w, count(*) filter (where signbit(v)) as v,
					sum(len(list_filter(emb, x -> signbit(x)))) as emb from %s`, from))
				return fmt.Sprint(rows)
			}
			inCount := count(fmt.Sprintf("read_parquet('%s/in/*.parquet')", dir))
			outCount := count(fmt.Sprintf("(select unnest(items, recursive := true), * exclude (items) from read_parquet('%s/parquet/*.parquet'))", ref))
			if inCount != outCount || !strings.Contains(inCount, fmt.Sprintf("v:%d", negZeros)) {
				t.Fatalf("DuckDB counts negative zeros %s in the output, %s in the input (want v:%d there)", outCount, inCount, negZeros)
			}
			want := readTree(t, ref)
			spilled := filepath.Join(dir, "spilled")
			if r, err := Run(context.Background(), o(spilled, func(x *RunOptions) { x.UnitRows = 500; x.TmpDir = t.TempDir() })); err != nil || r.Report.Units < 2 {
				t.Fatalf("spilled run: %v (want several units)", err)
			}
			dist := filepath.Join(dir, "dist")
			runDistributed(t, o(dist, nil), 32<<10, 1)
			for _, out := range []string{spilled, dist} {
				got := readTree(t, out)
				for k, v := range want {
					if !bytes.Equal(got[k], v) {
						t.Fatalf("%s: %s differs from run's", filepath.Base(out), k)
					}
				}
				if len(got) != len(want) {
					t.Fatalf("%s: %d files, run wrote %d", filepath.Base(out), len(got), len(want))
				}
			}
		})
	}
}
