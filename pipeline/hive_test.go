package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"gocloud.dev/blob"

	"github.com/relayout/relayout/hive"
	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/storage"
	"github.com/relayout/relayout/verify"
)

// duckScan is DuckDB's read_parquet over every Parquet file under dir,
// with or without Hive partitioning.
func duckScan(dir string, hivePart bool) string {
	return fmt.Sprintf("read_parquet('%s/**/*.parquet', hive_partitioning=%v)", dir, hivePart)
}

// duckTypes returns DuckDB's column name -> type for a scan.
func duckTypes(t *testing.T, scan string) map[string]string {
	t.Helper()
	rows, _ := testutil.DuckDB(t, "describe select * from "+scan)
	out := map[string]string{}
	for _, r := range rows {
		out[r["column_name"].(string)] = r["column_type"].(string)
	}
	return out
}

// sameRowsInDuckDB checks with DuckDB that two scans hold the same
// columns with the same types and the same multiset of rows.
func sameRowsInDuckDB(t *testing.T, what, want, got string) {
	t.Helper()
	wt, gt := duckTypes(t, want), duckTypes(t, got)
	if fmt.Sprint(wt) != fmt.Sprint(gt) {
		t.Fatalf("%s: columns differ:\n want %v\n got  %v", what, wt, gt)
	}
	var cols []string
	for c := range wt {
		cols = append(cols, `"`+c+`"`)
	}
	sort.Strings(cols)
	list := strings.Join(cols, ", ")
	rows, _ := testutil.DuckDB(t, fmt.Sprintf(`select
		(select count(*) from %[1]s)::BIGINT a, (select count(*) from %[2]s)::BIGINT b,
		(select count(*) from (select %[3]s from %[1]s except all select %[3]s from %[2]s))::BIGINT only_a,
		(select count(*) from (select %[3]s from %[2]s except all select %[3]s from %[1]s))::BIGINT only_b`, want, got, list))
	r := rows[0]
	if r["a"] != r["b"] || r["only_a"] != "0" || r["only_b"] != "0" || r["a"] == "0" {
		t.Fatalf("%s: rows differ: %v", what, r)
	}
}

// dailyTable writes a generated impression log as DuckDB writes a daily
// table partitioned by date and hour (date=…/hour=…/data_0.parquet, the
// partition columns only in the folders).
func dailyTable(t *testing.T, rows int64) string {
	t.Helper()
	flat := testutil.Generate(t, gen.Options{Rows: rows, Files: 2, Days: 4, Seed: 41})
	dir := filepath.Join(t.TempDir(), "daily")
	testutil.DuckDB(t, fmt.Sprintf(`copy (select * exclude (date), date, (hour(event_time) // 6)::INTEGER as hour from read_parquet('%s/*.parquet'))
		to '%s' (format parquet, partition_by (date, hour))`, flat, dir))
	return dir
}

// TestHiveInputMatchesDuckDB: partition columns come from the folders as
// DuckDB reads them (names, types, values), can be slice keys, sort keys
// and tensors, and are written into the output: DuckDB over the Hive input
// and over the flat output give the same rows. On the shared DuckDB table
// and on a generated daily table, locally and on loopback S3.
func TestHiveInputMatchesDuckDB(t *testing.T) {
	shared := filepath.Join(testutil.DataDir(t), "duckdb-parquet-testing", "hive-partitioning", "simple")
	if _, err := os.Stat(shared); err != nil {
		testutil.Missing(t, "shared DuckDB hive table: %v", err)
	}
	daily := dailyTable(t, 30_000)
	cases := []struct {
		name, in string
		mod      func(*RunOptions)
	}{
		{"shared, slice by date", shared, func(o *RunOptions) { o.SliceKeys = []string{"date"} }},
		{"shared, no slice keys", shared, func(o *RunOptions) { o.SliceKeys = nil }},
		{"shared, slice by part, date", shared, func(o *RunOptions) { o.SliceKeys = []string{"part", "date"} }},
		{"daily, slice by date, hour", daily, func(o *RunOptions) { o.SliceKeys = []string{"date", "hour"} }},
		{"daily, hour as sort key", daily, func(o *RunOptions) {
			o.SliceKeys, o.SortKeys = []string{"country"}, []string{"hour", "user_id"}
		}},
		{"daily, packed with the date as a query column", daily, func(o *RunOptions) {
			o.SliceKeys, o.QueryKey = []string{"date"}, []string{"query_id"}
		}},
		{"daily, hour as a tensor", daily, func(o *RunOptions) {
			o.SliceKeys, o.Tensors = []string{"date"}, true
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			o := RunOptions{Inputs: []string{tc.in}, Output: out, RowGroupBytes: 256 << 10, MinRowGroupBytes: 32 << 10}
			tc.mod(&o)
			res, err := Run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			m := res.Manifest
			if !strings.Contains(string(m.Config), `"hive_partitioning"`) {
				t.Fatalf("config does not record the partitioning: %s", m.Config)
			}
			if len(o.QueryKey) > 0 {
				// Packed: DuckDB unnests the items back to rows. The hour is
				// a query column or an item column, as the detector found.
				hour := "i.hour"
				if _, ok := duckTypes(t, duckScan(out+"/parquet", false))["hour"]; ok {
					hour = "hour"
				}
				rows, _ := testutil.DuckDB(t, fmt.Sprintf(`select
					(select count(*) from (select date, query_id, i.item_id, %[3]s from %[1]s, unnest(items) as u(i) except all select date, query_id, item_id, hour from %[2]s))::BIGINT d1,
					(select count(*) from (select date, query_id, item_id, hour from %[2]s except all select date, query_id, i.item_id, %[3]s from %[1]s, unnest(items) as u(i)))::BIGINT d2`,
					duckScan(out+"/parquet", false), duckScan(tc.in, true), hour))
				if rows[0]["d1"] != "0" || rows[0]["d2"] != "0" {
					t.Fatalf("packed rows differ from the input: %v", rows[0])
				}
				return
			}
			sameRowsInDuckDB(t, tc.name, duckScan(tc.in, true), duckScan(out+"/parquet", false))
			if o.Tensors {
				names := map[string]bool{}
				for _, tn := range m.Tensors.Schema {
					names[tn.Name] = true
				}
				if !names["hour"] || !names["date"] {
					t.Fatalf("tensors %v lack the partition columns", names)
				}
			}
			if v, err := verify.Output(context.Background(), out, true, 2); err != nil || !v.OK {
				t.Fatalf("verify: %+v %v", v, err)
			}
		})
	}

	t.Run("loopback S3", func(t *testing.T) {
		params, _ := s3Server(t, "hive")
		ctx := context.Background()
		loc, err := storage.OpenDir(ctx, "s3://hive/daily"+params, false)
		if err != nil {
			t.Fatal(err)
		}
		uploadTree(t, loc.Bucket, "daily/", daily)
		local := filepath.Join(t.TempDir(), "local")
		o := RunOptions{Inputs: []string{daily}, Output: local, SliceKeys: []string{"date", "hour"}}
		if _, err := Run(ctx, o); err != nil {
			t.Fatal(err)
		}
		o.Inputs, o.Output = []string{"s3://hive/daily/" + params}, "s3://hive/out/"+params
		if _, err := Run(ctx, o); err != nil {
			t.Fatal(err)
		}
		want, got := readTree(t, local), testutil.BucketTree(t, loc.Bucket, "out/")
		for k, v := range want {
			if k == "manifest.json" {
				continue
			}
			if string(got[k]) != string(v) {
				t.Fatalf("%s differs between the S3 and the local run", k)
			}
		}
	})
}

// uploadTree copies a local folder tree under prefix, keeping its paths.
func uploadTree(t *testing.T, b *blob.Bucket, prefix, dir string) {
	t.Helper()
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return b.WriteAll(context.Background(), prefix+filepath.ToSlash(rel), data, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestHiveInputErrors: inconsistent folders, values that do not parse as
// the declared type, and a partition key that is also a file column with
// other values are bad input naming the path; --hive-partitioning off
// reads the paths as plain names.
func TestHiveInputErrors(t *testing.T) {
	type Row struct {
		ID   int64  `parquet:"id"`
		Date string `parquet:"date"`
	}
	type Plain struct {
		ID int64 `parquet:"id"`
	}
	root := t.TempDir()
	write := func(rel string, rows any) string {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch r := rows.(type) {
		case []Row:
			err = parquet.WriteFile(p, r)
		case []Plain:
			err = parquet.WriteFile(p, r)
		}
		if err != nil {
			t.Fatal(err)
		}
		return filepath.Dir(filepath.Dir(p))
	}
	mixed := write("mixed/day=1/a.parquet", []Plain{{1}})
	write("mixed/other/b.parquet", []Plain{{2}})
	typed := write("typed/hour=x1/a.parquet", []Plain{{1}})
	clash := write("clash/date=2024-01-01/a.parquet", []Row{{1, "2024-01-01"}, {2, "2024-01-02"}})
	agree := write("agree/date=2024-01-01/a.parquet", []Row{{1, "2024-01-01"}})
	plain := write("plain/p/a.parquet", []Plain{{1}})
	cases := []struct {
		name  string
		in    string
		mod   func(*RunOptions)
		class errs.Class
		want  []string
	}{
		{"inconsistent folders", mixed, nil, errs.BadInput, []string{"b.parquet", "day"}},
		{"declared type", typed, func(o *RunOptions) { o.HiveTypes = "hour=int32" }, errs.BadInput, []string{"a.parquet", "hour", `"x1"`}},
		{"file column disagrees", clash, func(o *RunOptions) { o.SliceKeys = []string{"date"} }, errs.BadInput, []string{"a.parquet", "2024-01-02", "date=2024-01-01"}},
		{"on without folders", plain, func(o *RunOptions) { o.HivePartitioning = "on" }, errs.BadInput, []string{"a.parquet", "key=value"}},
		{"bad mode", plain, func(o *RunOptions) { o.HivePartitioning = "maybe" }, errs.Usage, []string{"maybe"}},
		{"declared key absent", typed, func(o *RunOptions) { o.HiveTypes = "nope=int32" }, errs.Usage, []string{"nope", "hour"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := RunOptions{Inputs: []string{tc.in}, Output: filepath.Join(t.TempDir(), "o")}
			if tc.mod != nil {
				tc.mod(&o)
			}
			_, err := Run(context.Background(), o)
			if errs.ClassOf(err) != tc.class {
				t.Fatalf("err = %v (class %v), want %v", err, errs.ClassOf(err), tc.class)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
		})
	}
	// Folders and a file column that agree: one date column, checked.
	out := filepath.Join(t.TempDir(), "agree")
	if _, err := Run(context.Background(), RunOptions{Inputs: []string{agree}, Output: out, SliceKeys: []string{"date"}}); err != nil {
		t.Fatal(err)
	}
	// Off: the folders are plain names, the mixed table reads as one.
	out = filepath.Join(t.TempDir(), "off")
	res, err := Run(context.Background(), RunOptions{Inputs: []string{mixed}, Output: out, HivePartitioning: "off"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(res.Manifest.Config), "hive") || len(res.Manifest.Schema) != 1 {
		t.Fatalf("off: config %s, %d columns", res.Manifest.Config, len(res.Manifest.Schema))
	}
}

// TestHiveInputDistributedMatchesRun: the map and reduce tasks read the
// partition columns as the plan did: byte-identical to run.
func TestHiveInputDistributedMatchesRun(t *testing.T) {
	daily := dailyTable(t, 40_000)
	base := t.TempDir()
	o := distOpts(daily, filepath.Join(base, "run"))
	o.SliceKeys = []string{"date", "hour", "country"}
	distributedMatchesRun(t, o, filepath.Join(base, "dist"))
}

// TestHiveDryRunAndInspect: the dry run and inspect read the partition
// columns too; a slice on a partition column reads only its folder's row
// groups before the re-layout (the folder is exact statistics), as a
// pruning engine does.
func TestHiveDryRunAndInspect(t *testing.T) {
	daily := dailyTable(t, 20_000)
	o := RunOptions{Inputs: []string{daily}, Output: filepath.Join(t.TempDir(), "o"), SliceKeys: []string{"date", "hour"},
		HivePartitioning: "on", HiveTypes: "date=date,hour=int32"}
	rep, err := DryRun(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Slices.Count != res.Report.Slices.Count || rep.Slices.Count < 8 || rep.ConfigHash != res.Report.ConfigHash {
		t.Fatalf("dry run: %d slices, config %s; run: %d, %s", rep.Slices.Count, rep.ConfigHash, res.Report.Slices.Count, res.Report.ConfigHash)
	}
	if !strings.Contains(string(res.Manifest.Config), `"hive_partitioning":"date=date,hour=int32"`) {
		t.Fatalf("config %s", res.Manifest.Config)
	}
	in, err := Inspect(context.Background(), InspectOptions{Inputs: []string{daily}, SliceKeys: []string{"date", "hour"}})
	if err != nil {
		t.Fatal(err)
	}
	files := len(in.Files)
	for _, s := range in.Slices {
		if s.RowGroupsRead != s.RowGroupsTouched || s.RowGroupsRead >= files {
			t.Fatalf("slice %v: reads %d row groups, touches %d (of %d files): the folders should prune exactly", s.Key, s.RowGroupsRead, s.RowGroupsTouched, files)
		}
	}
	for _, s := range res.Report.Slices.List {
		if s.RowGroupsBefore >= files {
			t.Fatalf("report: slice %v reads %d row groups before, of %d files", s.Key, s.RowGroupsBefore, files)
		}
	}
}

// hiveRun runs with Hive output and checks the manifest records it.
func hiveRun(t *testing.T, o RunOptions) *Result {
	t.Helper()
	o.OutputPartitioning = "hive"
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	m := res.Manifest
	if m.Partitioning == nil || m.Partitioning.Style != "hive" || len(m.Partitioning.Keys) == 0 {
		t.Fatalf("manifest partitioning %+v", m.Partitioning)
	}
	for _, f := range m.Files {
		dir := strings.TrimPrefix(path.Dir(f.Path), "parquet/")
		if n := strings.Count(dir, "/") + 1; n != len(m.Partitioning.Keys) || !strings.HasPrefix(dir, m.Partitioning.Keys[0]+"=") {
			t.Fatalf("file %s: folder %q does not name %v", f.Path, dir, m.Partitioning.Keys)
		}
	}
	data, err := os.ReadFile(filepath.Join(o.Output, "manifest.json"))
	if err == nil {
		var doc any
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatal(err)
		}
		if err := manifestSchema(t).Validate(doc); err != nil {
			t.Fatalf("manifest does not match its JSON Schema: %v", err)
		}
	}
	if v, err := verify.Output(context.Background(), o.Output, true, 2); err != nil || !v.OK {
		t.Fatalf("verify --deep: %+v %v", v, err)
	}
	return res
}

// TestHiveOutputMatchesDuckDB: --output-partitioning hive writes
// parquet/k1=v1/…/part-NNNNN.parquet without the folder columns in the
// files, and DuckDB reading it with hive_partitioning gives the input's
// rows and types: flat input -> Hive output (one and two folder keys),
// Hive -> Hive, with tensors, and on loopback S3. DuckDB filtering on a
// folder column reads only that folder's files.
func TestHiveOutputMatchesDuckDB(t *testing.T) {
	flat := testutil.Generate(t, gen.Options{Rows: 30_000, Files: 2, Countries: 6, Days: 5, Seed: 43})
	daily := dailyTable(t, 30_000)
	base := t.TempDir()
	small := func(in, out string, keys ...string) RunOptions {
		return RunOptions{Inputs: []string{in}, Output: filepath.Join(base, out), SliceKeys: keys, RowGroupBytes: 256 << 10, MinRowGroupBytes: 32 << 10}
	}
	t.Run("flat to hive, two keys", func(t *testing.T) {
		o := small(flat, "f2", "country", "date")
		hiveRun(t, o)
		sameRowsInDuckDB(t, "flat -> hive", duckScan(flat, false), duckScan(o.Output+"/parquet", true))
		// The files hold neither folder column.
		inFiles := duckTypes(t, duckScan(o.Output+"/parquet", false))
		if _, ok := inFiles["country"]; ok {
			t.Fatalf("the files still hold country: %v", inFiles)
		}
	})
	t.Run("flat to hive, one key, tensors", func(t *testing.T) {
		o := small(flat, "f1", "country", "date")
		o.HiveKeys, o.Tensors = 1, true
		res := hiveRun(t, o)
		sameRowsInDuckDB(t, "flat -> hive(1)", duckScan(flat, false), duckScan(o.Output+"/parquet", true))
		if len(res.Manifest.Files) < 6 || res.Manifest.Tensors == nil {
			t.Fatalf("%d files, tensors %v", len(res.Manifest.Files), res.Manifest.Tensors != nil)
		}
		// Pruning: a reader filtering on the folder column opens only
		// that folder's files.
		var total, folder int64
		for _, f := range res.Manifest.Files {
			total += f.Bytes
			if strings.HasPrefix(f.Path, "parquet/country=C02/") {
				folder += f.Bytes
			}
		}
		_, reads := testutil.DuckDB(t, fmt.Sprintf("select sum(click)::BIGINT, sum(item_price) from %s where country = 'C02'", duckScan(o.Output+"/parquet", true)))
		if folder == 0 || reads[0] > folder+folder/10+(64<<10) || reads[0]*3 > total {
			t.Fatalf("DuckDB read %d bytes for one folder of %d bytes (output %d)", reads[0], folder, total)
		}
	})
	t.Run("hive to hive", func(t *testing.T) {
		o := small(daily, "h2", "date", "hour", "country")
		o.HiveKeys = 2
		hiveRun(t, o)
		sameRowsInDuckDB(t, "hive -> hive", duckScan(daily, true), duckScan(o.Output+"/parquet", true))
	})
	t.Run("shared DuckDB table, hive to hive", func(t *testing.T) {
		shared := filepath.Join(testutil.DataDir(t), "duckdb-parquet-testing", "hive-partitioning", "simple")
		o := small(shared, "shared", "date", "part")
		hiveRun(t, o)
		sameRowsInDuckDB(t, "shared hive -> hive", duckScan(shared, true), duckScan(o.Output+"/parquet", true))
	})
	t.Run("packed, unpacked again", func(t *testing.T) {
		o := small(flat, "p", "country")
		o.QueryKey = []string{"query_id"}
		hiveRun(t, o)
		un := filepath.Join(base, "unpacked")
		if _, err := Unpack(context.Background(), UnpackOptions{Input: o.Output, Output: un}); err != nil {
			t.Fatal(err)
		}
		sameRowsInDuckDB(t, "hive packed -> unpack", duckScan(flat, false), duckScan(un+"/parquet", false))
	})
	t.Run("loopback S3", func(t *testing.T) {
		params, _ := s3Server(t, "hout")
		o := small(flat, "local", "country", "date")
		hiveRun(t, o)
		want := readTree(t, o.Output)
		o.Output = "s3://hout/out/" + params
		o.OutputPartitioning = "hive"
		if _, err := Run(context.Background(), o); err != nil {
			t.Fatal(err)
		}
		loc, err := storage.OpenDir(context.Background(), o.Output, false)
		if err != nil {
			t.Fatal(err)
		}
		got := testutil.BucketTree(t, loc.Bucket, "out/")
		for k, v := range want {
			if k != "manifest.json" && k != "_report.json" && string(got[k]) != string(v) {
				t.Fatalf("%s differs between S3 and local (S3 has %d objects)", k, len(got))
			}
		}
		if v, err := verify.Output(context.Background(), o.Output, true, 2); err != nil || !v.OK {
			t.Fatalf("verify on S3: %+v %v", v, err)
		}
	})
}

// TestHiveOutputEscaping: folder values with "/", "=", "%", spaces,
// unicode, "..", an empty string and null round-trip through the folder
// names (DuckDB reads the input's values back), and no folder lies
// outside the output.
func TestHiveOutputEscaping(t *testing.T) {
	type Row struct {
		ID  int64   `parquet:"id"`
		Key *string `parquet:"key,optional"`
	}
	// The last four are strings a reader takes for null if written as
	// they are: DuckDB read "null" back as NULL, and the run refused
	// Hive's own null word in its output check (exit 1).
	vals := []string{"a/b", "x=y", "100%", "sp ace", "São Paulo", "日本", "", "..", "../../etc", "#?*:[]", "plain",
		"NULL", "null", hive.DefaultPartition, "%4EULL"}
	var rows []Row
	for i := 0; i < 300; i++ {
		r := Row{ID: int64(i)}
		if i%12 != 11 {
			r.Key = &vals[i%len(vals)]
		}
		rows = append(rows, r)
	}
	in := filepath.Join(t.TempDir(), "in.parquet")
	if err := parquet.WriteFile(in, rows); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out")
	res := hiveRun(t, RunOptions{Inputs: []string{in}, Output: out, SliceKeys: []string{"key"}})
	if len(res.Manifest.Files) != len(vals)+1 {
		t.Fatalf("%d files for %d values and null", len(res.Manifest.Files), len(vals))
	}
	err := filepath.Walk(out, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if rel, _ := filepath.Rel(out, p); strings.HasPrefix(rel, "..") {
			t.Fatalf("%s lies outside the output", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sameRowsInDuckDB(t, "escaping", duckScan(filepath.Dir(in), false), duckScan(out+"/parquet", true))
}

// TestHiveOutputRefusals: folders of a non-round-tripping type, more keys
// than slice keys, and many tiny folders are refused (usage, exit 2)
// before anything is written; --force-folders writes them.
func TestHiveOutputRefusals(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 6_000, Files: 1, Seed: 44})
	cases := []struct {
		name string
		mod  func(*RunOptions)
		want string
	}{
		{"float folder", func(o *RunOptions) { o.SliceKeys = []string{"item_price"} }, "item_price"},
		{"too many keys", func(o *RunOptions) { o.HiveKeys = 3 }, "--hive-keys"},
		{"no slice keys", func(o *RunOptions) { o.SliceKeys = nil }, "--slice-keys"},
		{"tiny folders", func(o *RunOptions) { o.SliceKeys = []string{"item_id"} }, "--force-folders"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := RunOptions{Inputs: []string{in}, Output: filepath.Join(t.TempDir(), "o"), SliceKeys: []string{"country", "date"}, OutputPartitioning: "hive"}
			tc.mod(&o)
			_, err := Run(context.Background(), o)
			if !errs.Is(err, errs.Usage) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v (class %v), want usage naming %s", err, errs.ClassOf(err), tc.want)
			}
			if _, err := os.Stat(filepath.Join(o.Output, "parquet")); err == nil {
				t.Fatal("a refused run wrote data files")
			}
		})
	}
	rep, err := DryRun(context.Background(), RunOptions{Inputs: []string{in}, Output: filepath.Join(t.TempDir(), "o"), SliceKeys: []string{"item_id"}, OutputPartitioning: "hive"})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, w := range rep.Warnings {
		found = found || w.Code == "tiny_folders"
	}
	if !found {
		t.Fatalf("dry run warnings %+v lack tiny_folders", rep.Warnings)
	}
}

// TestHiveOutputDistributedMatchesRun: plan, map, reduce and commit write
// the same folders and bytes as run.
func TestHiveOutputDistributedMatchesRun(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 40_000, Files: 3, Countries: 8, Days: 4, Seed: 45})
	base := t.TempDir()
	o := distOpts(in, filepath.Join(base, "run"))
	o.OutputPartitioning, o.HiveKeys, o.Tensors = "hive", 1, true
	distributedMatchesRun(t, o, filepath.Join(base, "dist"))
}

// distributedMatchesRun runs o with run, then as plan, map, reduce and
// commit into dist, and requires the same bytes.
func distributedMatchesRun(t *testing.T, o RunOptions, dist string) {
	t.Helper()
	if _, err := Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	want := readTree(t, o.Output)
	o.Output = dist
	runDistributed(t, o, 256<<10, 2)
	got := readTree(t, o.Output)
	if len(got) != len(want) {
		t.Fatalf("%d files, run wrote %d", len(got), len(want))
	}
	for k, v := range want {
		if string(got[k]) != string(v) {
			t.Fatalf("%s differs from run's", k)
		}
	}
}

// TestHiveReportPrunesFolders: the read cost of a slice of a Hive output
// counts the footers of its folder's files, not of every file, as a reader
// pruning folders by the slice's values reads (DuckDB, measured here, the
// run's report and the dry run's estimate beside it). Counting every
// footer priced each slice of a 1,739-folder output at 18 MB.
func TestHiveReportPrunesFolders(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 40_000, Files: 2, Countries: 8, Days: 3, Seed: 46})
	o := RunOptions{Inputs: []string{in}, Output: filepath.Join(t.TempDir(), "o"), SliceKeys: []string{"country", "date"},
		OutputPartitioning: "hive", HiveKeys: 1, ReportSlices: -1}
	dry, err := DryRun(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(res.Manifest.Files); n < 8 {
		t.Fatalf("%d files for 8 folders", n)
	}
	checkAgainstDuckDB(t, "hive", dry, res.Report, in+"/*.parquet", duckScan(o.Output+"/parquet", true), 0.25)
}

// TestOverwriteHiveOutput: --overwrite of a committed Hive-partitioned
// output replaces it (before: exit 5, "holds parquet/country=C00/…, which
// relayout did not write", since only flat names counted as relayout's),
// whatever the layouts before and after: Hive to Hive with other folders,
// Hive to flat, flat to Hive. Each result is what a fresh run writes, with
// nothing of the old layout left (on local disk no empty folder either: the
// old layout's stayed, empty, beside the new one); a foreign file inside a
// Hive folder is still refused and kept. Local disk and S3.
func TestOverwriteHiveOutput(t *testing.T) {
	ctx := context.Background()
	in := testutil.Generate(t, gen.Options{Rows: 12_000, Files: 2, Countries: 4, Days: 3, Seed: 47})
	params, _ := s3Server(t, "owh")
	layouts := []RunOptions{
		{SliceKeys: []string{"country", "date"}, OutputPartitioning: "hive", HiveKeys: 1},
		{SliceKeys: []string{"country", "date"}, OutputPartitioning: "hive", ForceFolders: true},
		{SliceKeys: []string{"country"}},
		{SliceKeys: []string{"date", "country"}, OutputPartitioning: "hive", HiveKeys: 1, Tensors: true},
	}
	for _, out := range []string{filepath.Join(t.TempDir(), "out"), "s3://owh/out/" + params} {
		loc, err := storage.OpenDir(ctx, out, true)
		if err != nil {
			t.Fatal(err)
		}
		for k, l := range layouts {
			o := l
			o.Inputs, o.Output, o.Overwrite = []string{in}, out, k > 0
			if _, err := Run(ctx, o); err != nil {
				t.Fatalf("%s, layout %d over layout %d: %v", out, k, k-1, err)
			}
			fresh := o
			fresh.Output, fresh.Overwrite = filepath.Join(t.TempDir(), "fresh"), false
			if _, err := Run(ctx, fresh); err != nil {
				t.Fatal(err)
			}
			want, _ := os.ReadFile(filepath.Join(fresh.Output, "manifest.json"))
			got, err := storage.Get(ctx, loc, "manifest.json")
			if err != nil || string(normaliseInputs(got)) != string(normaliseInputs(want)) {
				t.Fatalf("%s, layout %d: the overwritten output's manifest differs from a fresh run's (%v)", out, k, err)
			}
			for _, p := range []string{"parquet/", "tensors/", "_relayout/"} {
				keys, err := storage.ListKeys(ctx, loc, p)
				if err != nil {
					t.Fatal(err)
				}
				var wantKeys []string // the work prefix: nothing left
				if p != "_relayout/" {
					for _, rel := range treeFiles(t, filepath.Join(fresh.Output, p)) {
						wantKeys = append(wantKeys, p+filepath.ToSlash(rel))
					}
				}
				sort.Strings(keys)
				if strings.Join(keys, ",") != strings.Join(wantKeys, ",") {
					t.Fatalf("%s, layout %d: %s holds %d files, a fresh run's %d: %v", out, k, p, len(keys), len(wantKeys), keys)
				}
			}
			if loc.Local != "" { // and no folder of the old layout left empty
				if got, want := treeDirs(t, out, "parquet"), treeDirs(t, fresh.Output, "parquet"); strings.Join(got, ",") != strings.Join(want, ",") {
					t.Fatalf("%s, layout %d: folders %v, a fresh run's %v", out, k, got, want)
				}
			}
			if res, err := verify.Output(ctx, out, true, 2); err != nil || !res.OK || len(res.Warnings) > 0 {
				t.Fatalf("%s, layout %d: %+v %v", out, k, res, err)
			}
		}
		// A file relayout did not write, inside a Hive folder.
		if err := loc.Bucket.WriteAll(ctx, loc.Key("parquet/date=2026-10-01/notes.txt"), []byte("not relayout's"), nil); err != nil {
			t.Fatal(err)
		}
		o := layouts[0]
		o.Inputs, o.Output, o.Overwrite = []string{in}, out, true
		_, err = Run(ctx, o)
		if !errs.Is(err, errs.Precondition) || !strings.Contains(err.Error(), "notes.txt") {
			t.Fatalf("%s: a foreign file in a Hive folder: %v (class %v), want exit 5 naming it", out, err, errs.ClassOf(err))
		}
		if ok, _ := loc.Bucket.Exists(ctx, loc.Key("parquet/date=2026-10-01/notes.txt")); !ok {
			t.Fatalf("%s: a foreign file was deleted", out)
		}
	}
}

// treeDirs lists the folders under dir/prefix, relative to dir.
func treeDirs(t *testing.T, dir, prefix string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(filepath.Join(dir, prefix), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(out)
	return out
}

// TestDistributedHiveMatchesRun: the distributed steps (plan, map, reduce,
// commit; one worker and three) write a Hive-partitioned output (folders of
// the leading slice key, tensors beside) byte-identical to relayout run's,
// manifest included, as they do flat output (TestDistributedMatchesRun);
// and a second plan with --overwrite and other folders replaces it with
// what a fresh run writes, leaving no folder of the old layout. No test ran
// Hive output through the steps before.
func TestDistributedHiveMatchesRun(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 60_000, Files: 3, Countries: 6, Days: 4, Seed: 48, RowGroupRows: 8 << 10})
	base := t.TempDir()
	opts := func(out string, keys ...string) RunOptions {
		o := distOpts(in, out)
		o.SliceKeys, o.OutputPartitioning, o.HiveKeys, o.Tensors = keys, "hive", 1, true
		return o
	}
	same := func(what, got, want string) {
		t.Helper()
		g, w := readTree(t, got), readTree(t, want)
		if len(g) != len(w) {
			t.Fatalf("%s: %d files, run wrote %d (%v)", what, len(g), len(w), keysOf(g))
		}
		for k, v := range w {
			if !bytes.Equal(g[k], v) {
				t.Fatalf("%s: %s differs from run's", what, k)
			}
		}
		if gd, wd := treeDirs(t, got, "parquet"), treeDirs(t, want, "parquet"); strings.Join(gd, ",") != strings.Join(wd, ",") {
			t.Fatalf("%s: folders %v, run's %v", what, gd, wd)
		}
	}
	ref := filepath.Join(base, "run")
	if _, err := Run(context.Background(), opts(ref, "country", "date")); err != nil {
		t.Fatal(err)
	}
	if n := len(readManifest(t, ref).Files); n < 6 {
		t.Fatalf("run wrote %d files for 6 folders", n)
	}
	for _, workers := range []int{1, 3} {
		out := filepath.Join(base, fmt.Sprintf("dist-%d", workers))
		res := runDistributed(t, opts(out, "country", "date"), 1<<20, workers)
		if res.MapTasks < 2 || res.ReduceTasks < 2 {
			t.Fatalf("plan: %d map and %d reduce tasks; the test wants several of each", res.MapTasks, res.ReduceTasks)
		}
		same(fmt.Sprintf("%d workers", workers), out, ref)
	}
	// Overwrite with folders of another key.
	ref2 := filepath.Join(base, "run2")
	if _, err := Run(context.Background(), opts(ref2, "date", "country")); err != nil {
		t.Fatal(err)
	}
	o := opts(filepath.Join(base, "dist-1"), "date", "country")
	o.Overwrite = true
	runDistributed(t, o, 1<<20, 1)
	same("overwritten by date", o.Output, ref2)
}
