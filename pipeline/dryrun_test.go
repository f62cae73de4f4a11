package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/letor"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/report"
	"github.com/relayout/relayout/storage"
)

// reportSchema compiles the report's JSON Schema.
func reportSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(manifests.ReportSchemaJSON))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddResource("report.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("report.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

// checkReportJSON validates a report's JSON against the schema and returns
// it decoded.
func checkReportJSON(t *testing.T, sch *jsonschema.Schema, data []byte) *report.Report {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(v); err != nil {
		t.Fatalf("report does not match its schema: %v", err)
	}
	var r report.Report
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// dryThenRun runs the dry run, checks that it wrote nothing under the
// output, then runs for real, and returns both reports as their JSON reads
// back (the real one from <output>/_report.json).
func dryThenRun(t *testing.T, o RunOptions) (dry, real *report.Report) {
	t.Helper()
	ctx := context.Background()
	sch := reportSchema(t)
	o.ReportSlices = -1
	before := treeNames(t, o.Output)
	d, err := DryRun(ctx, o)
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	if after := treeNames(t, o.Output); !slices.Equal(before, after) {
		t.Fatalf("the dry run changed the output: %v -> %v", before, after)
	}
	data, _ := json.Marshal(d)
	dry = checkReportJSON(t, sch, data)
	if !dry.Estimate || dry.Command != "dry-run" {
		t.Fatalf("dry run report: estimate %v, command %q", dry.Estimate, dry.Command)
	}
	if _, err := Run(ctx, o); err != nil {
		t.Fatalf("run: %v", err)
	}
	out, err := storage.OpenDir(ctx, o.Output, false)
	if err != nil {
		t.Fatal(err)
	}
	data, err = out.Bucket.ReadAll(ctx, out.Key(report.FileName))
	if err != nil {
		t.Fatal(err)
	}
	real = checkReportJSON(t, sch, data)
	if real.Estimate || real.Command != "run" {
		t.Fatalf("run report: estimate %v, command %q", real.Estimate, real.Command)
	}
	return dry, real
}

// treeNames lists a local folder's files ("" for URLs).
func treeNames(t *testing.T, dir string) []string {
	t.Helper()
	if storage.IsURL(dir) {
		return nil
	}
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// near reports whether got is within tol (a fraction) of want.
func near(got, want, tol float64) bool {
	if want == 0 {
		return got == 0
	}
	return math.Abs(got/want-1) <= tol
}

// compareEstimate checks a dry run's report against the real run's: counts
// exact, sizes within sizeTol, per-slice read bytes after within sliceTol.
func compareEstimate(t *testing.T, name string, dry, real *report.Report, sizeTol, sliceTol float64) {
	t.Helper()
	if dry.Input != real.Input {
		t.Errorf("%s: input %+v, run %+v", name, dry.Input, real.Input)
	}
	if dry.ConfigHash != real.ConfigHash {
		t.Errorf("%s: config hash %s, run %s", name, dry.ConfigHash, real.ConfigHash)
	}
	d, r := dry.Output, real.Output
	t.Logf("%s: Parquet bytes est %d, run %d (%+.1f%%); tensor bytes est %d, run %d; dry run read %d of %d bytes (%.1f%%)", name,
		d.ParquetBytes, r.ParquetBytes, 100*(float64(d.ParquetBytes)/float64(max(r.ParquetBytes, 1))-1), d.TensorBytes, r.TensorBytes,
		dry.Cost.BytesRead, dry.Input.Bytes, 100*float64(dry.Cost.BytesRead)/float64(max(dry.Input.Bytes, 1)))
	if d.Rows != r.Rows || d.Slices != r.Slices || d.Shards != r.Shards {
		t.Errorf("%s: output rows/slices/shards %d/%d/%d, run %d/%d/%d", name, d.Rows, d.Slices, d.Shards, r.Rows, r.Slices, r.Shards)
	}
	if d.ParquetFiles != r.ParquetFiles || d.RowGroups != r.RowGroups {
		t.Errorf("%s: files/row groups %d/%d, run %d/%d", name, d.ParquetFiles, d.RowGroups, r.ParquetFiles, r.RowGroups)
	}
	if !near(float64(d.ParquetBytes), float64(r.ParquetBytes), sizeTol) {
		t.Errorf("%s: Parquet bytes %d, run %d (%.1f%% off; allowed %.0f%%)", name, d.ParquetBytes, r.ParquetBytes, 100*(float64(d.ParquetBytes)/float64(r.ParquetBytes)-1), 100*sizeTol)
	}
	if !near(float64(d.TensorBytes), float64(r.TensorBytes), sizeTol) {
		t.Errorf("%s: tensor bytes %d, run %d", name, d.TensorBytes, r.TensorBytes)
	}
	if (dry.Packing == nil) != (real.Packing == nil) || (dry.Transfer == nil) != (real.Transfer == nil) {
		t.Fatalf("%s: packing/transfer sections differ: %v %v / %v %v", name, dry.Packing, real.Packing, dry.Transfer, real.Transfer)
	}
	if p, q := dry.Packing, real.Packing; p != nil {
		if p.Rows != q.Rows || p.Queries != q.Queries || p.ItemsPerQuery != q.ItemsPerQuery {
			t.Errorf("%s: packing counts %d/%d/%+v, run %d/%d/%+v", name, p.Rows, p.Queries, p.ItemsPerQuery, q.Rows, q.Queries, q.ItemsPerQuery)
		}
		if !slices.Equal(p.QueryColumns, q.QueryColumns) || !slices.Equal(p.ItemColumns, q.ItemColumns) {
			t.Errorf("%s: query columns %v, run %v", name, p.QueryColumns, q.QueryColumns)
		}
	}
	if a, b := dry.Transfer, real.Transfer; a != nil {
		if !near(float64(a.PackedBytes), float64(b.PackedBytes), sizeTol) || !near(float64(a.UnpackedBytes), float64(b.UnpackedBytes), sizeTol) {
			t.Errorf("%s: transfer %+v, run %+v", name, a, b)
		}
	}
	if dry.Slices.Count != real.Slices.Count || dry.Slices.Totals.Rows != real.Slices.Totals.Rows || dry.Slices.Totals.Queries != real.Slices.Totals.Queries {
		t.Fatalf("%s: slices %d (%d rows, %d queries), run %d (%d, %d)", name, dry.Slices.Count, dry.Slices.Totals.Rows, dry.Slices.Totals.Queries,
			real.Slices.Count, real.Slices.Totals.Rows, real.Slices.Totals.Queries)
	}
	want := map[string]report.Slice{}
	for _, s := range real.Slices.List {
		want[fmt.Sprint(s.Key)] = s
	}
	bad := 0
	for _, s := range dry.Slices.List {
		w, ok := want[fmt.Sprint(s.Key)]
		if !ok || s.Rows != w.Rows || s.Queries != w.Queries || s.RowGroupsBefore != w.RowGroupsBefore || s.ReadBytesBefore != w.ReadBytesBefore {
			t.Fatalf("%s: slice %v: dry run %+v, run %+v", name, s.Key, s, w)
		}
		if !near(float64(s.ReadBytesAfter), float64(w.ReadBytesAfter), sliceTol) {
			if bad++; bad <= 5 {
				t.Errorf("%s: slice %v: read bytes after %d, run %d", name, s.Key, s.ReadBytesAfter, w.ReadBytesAfter)
			}
		}
	}
}

// duckSliceReads runs SELECT * WHERE <slice> in DuckDB for each slice over
// the glob (or a read_parquet(...) call, such as duckScan's) and returns
// the bytes DuckDB read (rchar) for each.
func duckSliceReads(t *testing.T, glob string, ss []report.Slice) []int64 {
	from := glob
	if !strings.HasPrefix(glob, "read_parquet(") {
		from = fmt.Sprintf("read_parquet('%s')", glob)
	}
	t.Helper()
	sqls := []string{"SET enable_external_file_cache = false"}
	for _, s := range ss {
		var conds []string
		for _, kv := range s.Key {
			switch v := kv.Value.(type) {
			case nil:
				conds = append(conds, fmt.Sprintf("%q IS NULL", kv.Name))
			case string:
				conds = append(conds, fmt.Sprintf("%q = '%s'", kv.Name, strings.ReplaceAll(v, "'", "''")))
			default:
				conds = append(conds, fmt.Sprintf("%q = %v", kv.Name, v))
			}
		}
		sqls = append(sqls, fmt.Sprintf("CREATE OR REPLACE TEMP TABLE t AS SELECT * FROM %s WHERE %s", from, strings.Join(conds, " AND ")))
	}
	_, reads := testutil.DuckDB(t, sqls...)
	if len(reads) != len(sqls) {
		t.Fatalf("DuckDB returned %d read counts for %d statements", len(reads), len(sqls))
	}
	return reads[1:]
}

// pickSlices returns up to n slices spread from the largest to the smallest.
func pickSlices(list []report.Slice, n int) []report.Slice {
	s := append([]report.Slice{}, list...)
	sort.SliceStable(s, func(a, b int) bool { return s[a].Rows > s[b].Rows })
	if len(s) <= n {
		return s
	}
	var out []report.Slice
	for i := 0; i < n; i++ {
		out = append(out, s[i*(len(s)-1)/(n-1)])
	}
	return out
}

// checkAgainstDuckDB compares the dry run's per-slice read bytes before and
// after with what DuckDB reads from the input and from the real output.
func checkAgainstDuckDB(t *testing.T, name string, dry, real *report.Report, inGlob, outGlob string, tol float64) {
	t.Helper()
	picked := pickSlices(dry.Slices.List, 6)
	in, out := duckSliceReads(t, inGlob, picked), duckSliceReads(t, outGlob, picked)
	realBy := map[string]report.Slice{}
	for _, s := range real.Slices.List {
		realBy[fmt.Sprint(s.Key)] = s
	}
	for i, s := range picked {
		r := realBy[fmt.Sprint(s.Key)]
		t.Logf("%s: slice %v (%d rows): DuckDB read %d before, %d after; dry run %d, %d; run %d", name, s.Key, s.Rows, in[i], out[i], s.ReadBytesBefore, s.ReadBytesAfter, r.ReadBytesAfter)
		if !near(float64(s.ReadBytesBefore), float64(in[i]), tol) {
			t.Errorf("%s: slice %v: estimated %d bytes read from the input, DuckDB read %d", name, s.Key, s.ReadBytesBefore, in[i])
		}
		if !near(float64(s.ReadBytesAfter), float64(out[i]), tol) {
			t.Errorf("%s: slice %v: estimated %d bytes read from the output, DuckDB read %d", name, s.Key, s.ReadBytesAfter, out[i])
		}
		if !near(float64(r.ReadBytesAfter), float64(out[i]), tol) {
			t.Errorf("%s: slice %v: the run reports %d bytes read from the output, DuckDB read %d", name, s.Key, r.ReadBytesAfter, out[i])
		}
	}
}

// TestDryRunGenerated: on the generated impression log, the dry run reads at
// most 10% of the input, writes nothing, gets rows, slices, queries and
// items per query exact and sizes within 10% of the real run's report;
// per-slice read bytes are within 25% of what DuckDB reads, before and
// after.
func TestDryRunGenerated(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 240_000, Files: 4, Seed: 5, RowGroupRows: 16 << 10})
	cases := []struct {
		name string
		mod  func(*RunOptions)
	}{
		{"flat", nil},
		{"packed-tensors", func(o *RunOptions) { o.QueryKey = []string{"query_id"}; o.Tensors = true }},
		// The table does not fit one unit: the run spills its shuffle.
		{"flat-spilled", func(o *RunOptions) { o.MemoryLimit = 160 << 20 }},
		// 1,200 Hive folders of 200 rows, sampled at about 14 rows each:
		// what each sample file paid whatever its rows was scaled by rows
		// (estimated 1.5x what was written).
		{"hive-many-folders", func(o *RunOptions) { o.OutputPartitioning, o.ForceFolders = "hive", true }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := RunOptions{Inputs: []string{in}, Output: filepath.Join(t.TempDir(), "out"), SliceKeys: []string{"country", "date"}}
			if c.mod != nil {
				c.mod(&o)
			}
			dry, real := dryThenRun(t, o)
			if dry.Cost.BytesRead*10 > dry.Input.Bytes {
				t.Errorf("the dry run read %d of %d input bytes (%.1f%%; at most 10%%)", dry.Cost.BytesRead, dry.Input.Bytes, 100*float64(dry.Cost.BytesRead)/float64(dry.Input.Bytes))
			}
			if dry.Cost.SampleRows == 0 || dry.Cost.SampleRows > 16<<10 {
				t.Errorf("sampled %d rows", dry.Cost.SampleRows)
			}
			compareEstimate(t, c.name, dry, real, 0.10, 0.25)
			if c.name == "flat-spilled" {
				est, got := dry.Resources.TempDiskBytes, real.SpillBytes
				t.Logf("temp disk: estimated %d bytes, the run spilled %d", est, got)
				if got == 0 || !near(float64(est), float64(got), 0.5) {
					t.Errorf("temp disk estimated %d bytes, the run spilled %d (allowed 50%% off)", est, got)
				}
			}
			if c.name == "packed-tensors" {
				if dry.Transfer.Ratio < 1.5 {
					t.Errorf("transfer ratio %.2f: packing should cut the query features' bytes", dry.Transfer.Ratio)
				}
			}
			if o.OutputPartitioning == "hive" {
				// DuckDB reads 13-14 KB more per tiny slice than the read
				// model counts, the run's report as much as the dry run
				// (a footer read twice, docs/report.md); its folders are
				// checked against DuckDB by TestHiveReportPrunesFolders.
				return
			}
			checkAgainstDuckDB(t, c.name, dry, real, in+"/*.parquet", o.Output+"/parquet/*.parquet", 0.25)
		})
	}
}

// TestDryRunLETOR: LETOR MQ2008 (queries with their documents) flat with
// one slice per query, checked against DuckDB; then packed by query with
// tensors, with the whole table as the sample and with a sample of 1,000
// rows (a third of it; sizes scaled from it).
func TestDryRunLETOR(t *testing.T) {
	src := filepath.Join(testutil.DataDir(t), "letor-mq2008-xgboost", "test.txt")
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := letor.Parse(f, src)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	pq := filepath.Join(t.TempDir(), "in", "mq2008.parquet")
	os.MkdirAll(filepath.Dir(pq), 0o755)
	if err := letor.WriteParquet(pq, rows); err != nil {
		t.Fatal(err)
	}
	// Flat, one slice per query, against DuckDB.
	o := RunOptions{Inputs: []string{pq}, Output: filepath.Join(t.TempDir(), "flat"), SliceKeys: []string{"qid"}}
	dry, real := dryThenRun(t, o)
	compareEstimate(t, "letor-flat", dry, real, 0.10, 0.25)
	checkAgainstDuckDB(t, "letor-flat", dry, real, pq, o.Output+"/parquet/*.parquet", 0.25)
	// Packed by query with tensors, the sizes scaled from 400 sampled rows.
	for _, sample := range []int64{0, 1000} {
		o := RunOptions{Inputs: []string{pq}, Output: filepath.Join(t.TempDir(), "packed"), QueryKey: []string{"qid"}, Tensors: true, SampleRows: sample}
		dry, real := dryThenRun(t, o)
		if sample > 0 && dry.Cost.SampleRows != sample {
			t.Errorf("sampled %d rows, asked for %d", dry.Cost.SampleRows, sample)
		}
		compareEstimate(t, fmt.Sprintf("letor-packed-sample-%d", sample), dry, real, 0.10, 0.25)
	}
}

// TestDryRunMerlin: Merlin's e-commerce log (pyarrow-written, one row group,
// no page index), sliced by a user feature and packed by user.
func TestDryRunMerlin(t *testing.T) {
	pq := filepath.Join(testutil.DataDir(t), "merlin-models-synthetic", "ecommerce", "large", "data.parquet")
	for _, c := range []struct {
		name string
		mod  func(*RunOptions)
	}{
		{"flat", nil},
		{"packed", func(o *RunOptions) { o.QueryKey = []string{"user_id"}; o.Tensors = true }},
	} {
		o := RunOptions{Inputs: []string{pq}, Output: filepath.Join(t.TempDir(), c.name), SliceKeys: []string{"user_geography"}}
		if c.mod != nil {
			c.mod(&o)
		}
		dry, real := dryThenRun(t, o)
		compareEstimate(t, "merlin-"+c.name, dry, real, 0.10, 0.25)
		checkAgainstDuckDB(t, "merlin-"+c.name, dry, real, pq, o.Output+"/parquet/*.parquet", 0.25)
	}
}

// TestDryRunS3: on the loopback S3 server the dry run writes nothing under
// the output prefix, and the bytes and GET requests it reports match what
// the server counted serving it.
func TestDryRunS3(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 60_000, Files: 3, Seed: 9, RowGroupRows: 8 << 10})
	params, _, counts := s3ServerCounting(t, "bkt")
	ctx := context.Background()
	loc, err := storage.OpenDir(ctx, "s3://bkt/impressions"+params, false)
	if err != nil {
		t.Fatal(err)
	}
	upload(t, loc.Bucket, "impressions/", in)
	before := counts.requests.Load()
	getsBefore, bytesBefore, putsBefore := counts.gets.Load(), counts.getBytes.Load(), counts.puts.Load()
	rep, err := DryRun(ctx, RunOptions{Inputs: []string{"s3://bkt/impressions/" + params}, Output: "s3://bkt/relaid/" + params,
		SliceKeys: []string{"country", "date"}, QueryKey: []string{"query_id"}, Tensors: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := counts.puts.Load() - putsBefore; n != 0 {
		t.Errorf("the dry run sent %d PUT/POST requests", n)
	}
	if got := testutil.BucketTree(t, loc.Bucket, "relaid/"); len(got) != 0 {
		t.Errorf("the dry run wrote %d objects under the output", len(got))
	}
	served, gets := counts.getBytes.Load()-bytesBefore, counts.gets.Load()-getsBefore
	t.Logf("dry run on S3: reported %d bytes in %d requests; the server served %d bytes to %d GETs (%d requests in all); input %d bytes",
		rep.Cost.BytesRead, rep.Cost.Requests, served, gets, counts.requests.Load()-before, rep.Input.Bytes)
	if rep.Cost.BytesRead != served {
		t.Errorf("reported %d bytes read, the server served %d", rep.Cost.BytesRead, served)
	}
	if rep.Cost.Requests != gets {
		t.Errorf("reported %d reads, the server answered %d object GETs", rep.Cost.Requests, gets)
	}
	// Remote footers come with the last 256 KiB of each object in one
	// request, a large share of these 1 MiB files (2% of the 1M-row bench
	// input's 12 MiB files).
	if rep.Cost.BytesRead*2 > rep.Input.Bytes {
		t.Errorf("read %d of %d input bytes", rep.Cost.BytesRead, rep.Input.Bytes)
	}
}

// TestDryRunErrors: the dry run fails as the run would, with the same class
// (so the same exit code), before reading any feature column.
func TestDryRunErrors(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 5_000, Files: 1, Seed: 3})
	ctx := context.Background()
	done := filepath.Join(t.TempDir(), "done")
	smallRun(t, in, done, nil)
	spec := filepath.Join(t.TempDir(), "spec.yaml")
	os.WriteFile(spec, []byte("tensors:\n  x:\n    column: no_such_column\n"), 0o644)
	for _, c := range []struct {
		name  string
		mod   func(*RunOptions)
		class errs.Class
		want  string
	}{
		{"missing slice key", func(o *RunOptions) { o.SliceKeys = []string{"nope"} }, errs.BadInput, `"nope"`},
		{"output holds a manifest", func(o *RunOptions) { o.Output = done }, errs.Precondition, "--overwrite"},
		{"item-level slice key", func(o *RunOptions) { o.QueryKey = []string{"query_id"}; o.SliceKeys = []string{"item_category"} }, errs.BadInput, `slice key "item_category"`},
		{"declared query column varies", func(o *RunOptions) { o.QueryKey = []string{"query_id"}; o.QueryColumns = []string{"item_id"} }, errs.BadInput, `"item_id"`},
		{"tensor spec", func(o *RunOptions) { o.TensorSpec = spec }, errs.Usage, "no_such_column"},
		{"bad flag", func(o *RunOptions) { o.SampleRows = -1 }, errs.Usage, "--sample-rows"},
		{"tiny memory", func(o *RunOptions) { o.MemoryLimit = 16 << 20; o.PageBytes = 8 << 20 }, errs.Usage, "--memory-limit"},
	} {
		o := RunOptions{Inputs: []string{in}, Output: filepath.Join(t.TempDir(), "o"), SliceKeys: []string{"country"}}
		c.mod(&o)
		_, err := DryRun(ctx, o)
		if !errs.Is(err, c.class) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v (class %v), want class %v naming %s", c.name, err, errs.ClassOf(err), c.class, c.want)
		}
		if _, rerr := Run(ctx, o); errs.ClassOf(rerr) != errs.ClassOf(err) {
			t.Errorf("%s: the run fails with class %v (%v), the dry run %v", c.name, errs.ClassOf(rerr), rerr, errs.ClassOf(err))
		}
	}
}

// TestDryRunWarnings: a table written without statistics, with one query
// a thousand times the median and a slice larger than a file, gets those
// warnings from the dry run and from the run alike.
func TestDryRunWarnings(t *testing.T) {
	p := filepath.Join(t.TempDir(), "in", "skewed.parquet")
	os.MkdirAll(filepath.Dir(p), 0o755)
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "query_id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "country", Type: arrow.BinaryTypes.String},
		{Name: "user", Type: arrow.PrimitiveTypes.Int64},
		{Name: "item", Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	add := func(q int64, country string, items int) {
		for i := 0; i < items; i++ {
			b.Field(0).(*array.Int64Builder).Append(q)
			b.Field(1).(*array.StringBuilder).Append(country)
			b.Field(2).(*array.Int64Builder).Append(q * 7)
			b.Field(3).(*array.Int64Builder).Append(int64(i))
		}
	}
	add(0, "AA", 3000) // one huge query
	for q := int64(1); q <= 3000; q++ {
		add(q, []string{"BB", "CC", "DD"}[q%3], 1+int(q%2))
	}
	testutil.WriteArrow(t, p, b.NewRecordBatch(), parquet.WithStats(false), parquet.WithMaxRowGroupLength(4096))
	o := RunOptions{Inputs: []string{p}, Output: filepath.Join(t.TempDir(), "o"), SliceKeys: []string{"country"}, QueryKey: []string{"query_id"}, FileBytes: 16 << 10}
	dry, real := dryThenRun(t, o)
	codes := func(r *report.Report) map[string]bool {
		m := map[string]bool{}
		for _, w := range r.Warnings {
			m[w.Code] = true
		}
		return m
	}
	for _, r := range []*report.Report{dry, real} {
		got := codes(r)
		for _, want := range []string{"no_statistics", "huge_query", "slice_larger_than_file"} {
			if !got[want] {
				t.Errorf("%s report: no %s warning in %+v", r.Command, want, r.Warnings)
			}
		}
		if got["tiny_slices"] {
			t.Errorf("%s report: tiny_slices with 4 slices", r.Command)
		}
	}
	if dry.Packing.ItemsPerQuery.Max != 3000 || dry.Packing.Queries != 3001 {
		t.Errorf("packing %+v", dry.Packing)
	}
}
