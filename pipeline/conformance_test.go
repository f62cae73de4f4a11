package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	apq "github.com/apache/arrow-go/v18/parquet"
	"github.com/parquet-go/parquet-go"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestConformance rewrites every Parquet file of apache/parquet-testing
// (shredded variants included) and DuckDB's test suite. Each must either be
// rewritten (the run's own check proves the output's content fingerprint
// equals the input's) or be refused as bad input with a one-line reason;
// its dry run must estimate or refuse as bad input or usage too, never fail
// as an internal error (exit 1). The outcome of every file is kept in
// testdata/conformance.golden, so any change in what is supported shows up
// as a diff (go test ./pipeline -run Conformance -update rewrites it).
func TestConformance(t *testing.T) {
	data := testutil.DataDir(t)
	var files []string
	for _, sub := range []string{"parquet-testing/data", "parquet-testing/shredded_variant", "duckdb-parquet-testing"} {
		filepath.WalkDir(filepath.Join(data, sub), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.Contains(strings.ToLower(d.Name()), ".parquet") && !strings.HasSuffix(d.Name(), ".json") {
				files = append(files, p)
			}
			return nil
		})
	}
	sort.Strings(files)
	if len(files) < 50 {
		t.Fatalf("found only %d conformance files under %s", len(files), data)
	}
	var lines []string
	rewritten := 0
	for _, p := range files {
		rel, _ := filepath.Rel(data, p)
		outcome := rewriteOutcome(t, p)
		if strings.HasPrefix(outcome, "ok") {
			rewritten++
		}
		lines = append(lines, rel+": "+outcome)
	}
	got := strings.Join(lines, "\n") + "\n"
	golden := filepath.Join(testutil.Root(), "testdata", "conformance.golden")
	if *update {
		os.WriteFile(golden, []byte(got), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("conformance outcomes changed (rerun with -update and review the diff):\n%s", diffLines(string(want), got))
	}
	t.Logf("%d of %d files rewritten with identical fingerprints", rewritten, len(files))
}

func rewriteOutcome(t *testing.T, p string) string {
	dryRunRefusesAsBadInput(t, p)
	out := filepath.Join(t.TempDir(), "out")
	res, err := Run(context.Background(), RunOptions{Inputs: []string{p}, Output: out, MemoryLimit: 256 << 20})
	if err != nil {
		if !errs.Is(err, errs.BadInput) {
			t.Errorf("%s: error of class %v, want bad input: %v", p, errs.ClassOf(err), err)
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") || strings.Contains(msg, "goroutine ") {
			t.Errorf("%s: error is not one line: %q", p, msg)
		}
		if _, err := os.Stat(filepath.Join(out, "manifest.json")); err == nil {
			t.Errorf("%s: refused but left a manifest", p)
		}
		return "refused: " + strings.ReplaceAll(msg, filepath.Dir(p)+"/", "")
	}
	if res.Manifest.Fingerprint.Rows != res.Report.Input.Rows {
		t.Errorf("%s: fingerprint over %d rows, input has %d", p, res.Manifest.Fingerprint.Rows, res.Report.Input.Rows)
	}
	parquetGoReadsBack(t, p, out, res.Manifest.Totals.Rows)
	return fmt.Sprintf("ok %d rows; %s", res.Manifest.Totals.Rows, tensorOutcome(t, p))
}

// dryRunRefusesAsBadInput dry-runs p: it must estimate, or refuse with a
// one-line error of class bad input or usage. A dry run of a shredded
// variant without its value field failed as an internal error (exit 1)
// where the run refused it as bad input (exit 3).
func dryRunRefusesAsBadInput(t *testing.T, p string) {
	_, err := DryRun(context.Background(), RunOptions{Inputs: []string{p}, Output: filepath.Join(t.TempDir(), "dry"), MemoryLimit: 256 << 20})
	if err == nil {
		return
	}
	if c := errs.ClassOf(err); c != errs.BadInput && c != errs.Usage {
		t.Errorf("%s: dry run: error of class %v, want bad input or usage: %v", p, c, err)
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || strings.Contains(msg, "goroutine ") {
		t.Errorf("%s: dry run: error is not one line: %q", p, msg)
	}
}

// parquetGoReadsBack reads every page of the output with parquet-go, which
// checks each page's CRC32 (relayout writes one in every page header), and
// counts the rows.
func parquetGoReadsBack(t *testing.T, in, out string, want int64) {
	var rows int64
	files, _ := filepath.Glob(filepath.Join(out, "parquet", "*.parquet"))
	for _, fp := range files {
		b, err := os.ReadFile(fp)
		if err != nil {
			t.Fatal(err)
		}
		pf, err := parquet.OpenFile(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Errorf("%s: parquet-go cannot open the output %s: %v", in, filepath.Base(fp), err)
			return
		}
		for _, rg := range pf.RowGroups() {
			for _, cc := range rg.ColumnChunks() {
				pages := cc.Pages()
				for {
					pg, err := pages.ReadPage()
					if err == io.EOF {
						break
					}
					if err != nil {
						t.Errorf("%s: parquet-go reading the output %s, column %d: %v", in, filepath.Base(fp), cc.Column(), err)
						pages.Close()
						return
					}
					parquet.Release(pg)
				}
				pages.Close()
			}
			rows += rg.NumRows()
		}
	}
	if rows != want {
		t.Errorf("%s: parquet-go counts %d rows in the output, the manifest %d", in, rows, want)
	}
}

// tensorOutcome runs the file again with --tensors: it must either write
// shards whose sample count equals the rows, or refuse with a one-line usage
// error (exit 2) naming the column that cannot become a tensor.
func tensorOutcome(t *testing.T, p string) string {
	out := filepath.Join(t.TempDir(), "tensors")
	res, err := Run(context.Background(), RunOptions{Inputs: []string{p}, Output: out, MemoryLimit: 256 << 20, Tensors: true})
	if err != nil {
		msg := err.Error()
		if !errs.Is(err, errs.Usage) || !strings.Contains(msg, "column") || strings.Contains(msg, "\n") {
			t.Errorf("%s --tensors: want a one-line usage error naming a column, got class %v: %v", p, errs.ClassOf(err), err)
		}
		return "tensors refused: " + msg
	}
	mt := res.Manifest.Tensors
	if mt.Totals.Rows != res.Manifest.Totals.Rows {
		t.Errorf("%s --tensors: shards hold %d rows, the table %d", p, mt.Totals.Rows, res.Manifest.Totals.Rows)
	}
	return fmt.Sprintf("tensors ok: %d tensors in %d shards", len(mt.Schema), mt.Totals.Shards)
}

// TestBadDataIsRefused: every file of parquet-testing/bad_data is refused as
// bad input (exit 3) with a one-line error, never a panic.
func TestBadDataIsRefused(t *testing.T) {
	data := testutil.DataDir(t)
	files, _ := filepath.Glob(filepath.Join(data, "parquet-testing", "bad_data", "*.parquet"))
	if len(files) == 0 {
		t.Fatal("no bad_data files")
	}
	for _, p := range files {
		t.Run(filepath.Base(p), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "o")
			res, err := Run(context.Background(), RunOptions{Inputs: []string{p}, Output: out})
			if reason, ok := decodableBadData[filepath.Base(p)]; ok {
				// Readable after all: both arrow-go and DuckDB decode it the
				// same way, so relayout rewrites it; check DuckDB agrees.
				if err != nil {
					t.Fatalf("%s (%s): %v", p, reason, err)
				}
				q := func(path string) string {
					return fmt.Sprintf("select count(*) n, count(distinct columns(*)) d, min(columns(*)) lo, max(columns(*)) hi from read_parquet('%s')", path)
				}
				a, _ := testutil.DuckDB(t, q(p))
				b, _ := testutil.DuckDB(t, q(filepath.Join(out, "parquet", "*.parquet")))
				if fmt.Sprint(a) != fmt.Sprint(b) || res.Manifest.Totals.Rows == 0 {
					t.Fatalf("DuckDB reads input %v, output %v", a, b)
				}
				return
			}
			if !errs.Is(err, errs.BadInput) {
				t.Fatalf("err = %v (class %v), want bad input", err, errs.ClassOf(err))
			}
			if strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), filepath.Base(p)) {
				t.Fatalf("error must be one line naming the file: %q", err)
			}
		})
	}
}

// decodableBadData lists bad_data files that arrow-go and DuckDB both decode
// to the same unambiguous values, with why they are in bad_data/.
var decodableBadData = map[string]string{
	"ARROW-GH-43605.parquet": "RLE dictionary indices with bit width 0; the dictionary has one value, so every index is 0",
}

func diffLines(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	in := map[string]bool{}
	for _, l := range al {
		in[l] = true
	}
	inB := map[string]bool{}
	for _, l := range bl {
		inB[l] = true
	}
	var d []string
	for _, l := range al {
		if !inB[l] {
			d = append(d, "- "+l)
		}
	}
	for _, l := range bl {
		if !in[l] {
			d = append(d, "+ "+l)
		}
	}
	return strings.Join(d, "\n")
}

// TestInvalidUTF8SliceKeyIsRefused: a slice key value of a string column
// that is not valid UTF-8 is bad input (exit 3) naming the column, the
// value and the file, in the run, the dry run and inspect. Before, the run
// wrote it to the manifest as U+FFFD, so "a\xff" and "a\xfe" were two
// slices of one name. Files from DuckDB and arrow-go writers; a column
// that is not a key is carried over byte for byte (the run's fingerprint
// check), and slicing by another column of the same file works.
func TestInvalidUTF8SliceKeyIsRefused(t *testing.T) {
	own := filepath.Join(t.TempDir(), "own.parquet")
	kb, vb := array.NewStringBuilder(memory.DefaultAllocator), array.NewInt64Builder(memory.DefaultAllocator)
	kb.AppendValues([]string{"a\xff", "a\xfe", "b"}, nil)
	vb.AppendValues([]int64{1, 2, 3}, nil)
	k, v := kb.NewArray(), vb.NewArray()
	defer k.Release()
	defer v.Release()
	sc := arrow.NewSchema([]arrow.Field{{Name: "k", Type: arrow.BinaryTypes.String}, {Name: "v", Type: arrow.PrimitiveTypes.Int64}}, nil)
	testutil.WriteArrow(t, own, array.NewRecordBatch(sc, []arrow.Array{k, v}, 3))
	duck := filepath.Join(testutil.DataDir(t), "duckdb-parquet-testing")
	for _, c := range []struct{ file, key, value, other string }{
		{own, "k", `"a\xff"`, "v"},
		{filepath.Join(duck, "invalid.parquet"), "X1", `"TREL\xc3"`, ""},
		{filepath.Join(duck, "invalid_utf8_dictionary.parquet"), "X1", `"TREL\xc3"`, ""},
	} {
		if _, err := os.Stat(c.file); err != nil {
			testutil.Missing(t, "%s: %v", c.file, err)
			continue
		}
		out := filepath.Join(t.TempDir(), "out")
		o := RunOptions{Inputs: []string{c.file}, Output: out, SliceKeys: []string{c.key}, MemoryLimit: 256 << 20}
		refused := func(what string, err error) {
			t.Helper()
			if !errs.Is(err, errs.BadInput) {
				t.Fatalf("%s %s: want bad input, got class %v: %v", what, c.file, errs.ClassOf(err), err)
			}
			msg := err.Error()
			for _, want := range []string{`"` + c.key + `"`, c.value, c.file, "not valid UTF-8"} {
				if !strings.Contains(msg, want) {
					t.Errorf("%s %s: message %q does not name %s", what, c.file, msg, want)
				}
			}
		}
		_, err := Run(context.Background(), o)
		refused("run", err)
		if _, err := os.Stat(filepath.Join(out, "manifest.json")); err == nil {
			t.Errorf("%s: refused but left a manifest", c.file)
		}
		_, err = DryRun(context.Background(), o)
		refused("dry run", err)
		_, err = Inspect(context.Background(), InspectOptions{Inputs: []string{c.file}, SliceKeys: []string{c.key}})
		refused("inspect", err)
		if c.other != "" {
			o.SliceKeys, o.Output = []string{c.other}, filepath.Join(t.TempDir(), "other")
			if _, err := Run(context.Background(), o); err != nil {
				t.Errorf("%s sliced by %s: %v", c.file, c.other, err)
			}
		}
	}
}

// TestFloatSliceKeyNegativeZero: -0 and 0 are one slice (as SQL's equality
// and DuckDB's GROUP BY have them), named 0 in the manifest however the
// first row spells it; NaNs of any payload are one slice "NaN". The run
// failed its own output check (exit 1: "key f is 0, manifest says -0")
// when a slice's first row was -0. DuckDB, reading the output, counts the
// same rows per value as the manifest.
func TestFloatSliceKeyNegativeZero(t *testing.T) {
	negZero := math.Copysign(0, -1)
	for _, c := range []struct {
		typ  arrow.DataType
		vals []float64
	}{
		{arrow.PrimitiveTypes.Float64, []float64{negZero, 1.5, 0, math.NaN(), math.Float64frombits(0x7ff8000000000001), math.Inf(-1), negZero}},
		{arrow.PrimitiveTypes.Float32, []float64{negZero, 1.5, 0, math.NaN(), math.Float64frombits(0x7ff8000000000001), math.Inf(-1), negZero}},
		// the order that failed the run's check (exit 1)
		{arrow.PrimitiveTypes.Float64, []float64{math.NaN(), negZero, 0, math.Inf(-1), 1.5, math.NaN(), 0}},
	} {
		typ, vals := c.typ, c.vals
		fb := array.NewBuilder(memory.DefaultAllocator, typ)
		ib := array.NewInt64Builder(memory.DefaultAllocator)
		for i, v := range vals {
			switch b := fb.(type) {
			case *array.Float64Builder:
				b.Append(v)
			case *array.Float32Builder:
				b.Append(float32(v))
			}
			ib.Append(int64(i))
		}
		f, id := fb.NewArray(), ib.NewArray()
		sc := arrow.NewSchema([]arrow.Field{{Name: "f", Type: typ}, {Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)
		in := filepath.Join(t.TempDir(), "in.parquet")
		testutil.WriteArrow(t, in, array.NewRecordBatch(sc, []arrow.Array{f, id}, int64(len(vals))))
		f.Release()
		id.Release()
		out := filepath.Join(t.TempDir(), "out")
		res, err := Run(context.Background(), RunOptions{Inputs: []string{in}, Output: out, SliceKeys: []string{"f"}, MemoryLimit: 256 << 20})
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		got := map[string]int64{}
		for _, s := range res.Manifest.Slices {
			j, _ := json.Marshal(s.Key[0].Value)
			got[string(j)] = s.Rows
		}
		want := map[string]int64{"0": 3, "1.5": 1, `"NaN"`: 2, `"-Inf"`: 1}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: slices %v, want %v", typ, got, want)
		}
		rows, _ := testutil.DuckDB(t, fmt.Sprintf("select count(*) filter (where f = 0) as zero, count(*) filter (where isnan(f)) as nan from read_parquet('%s/parquet/*.parquet')", out))
		if len(rows) != 1 || fmt.Sprint(rows[0]["zero"]) != "3" || fmt.Sprint(rows[0]["nan"]) != "2" {
			t.Errorf("%s: DuckDB counts %v in the output, want 3 zeros and 2 NaNs", typ, rows)
		}
	}
}

// TestNaNBitsKept: a float column of few values (one the writer would
// dictionary-encode) holding NaNs of two bit patterns, np.nan's and the
// -NaN of an x86 0/0, comes out with each row's bits, as parquet-go reads
// them; arrow-go's dictionary encoder wrote every NaN with the first one's.
// A column with one NaN pattern keeps its dictionary.
func TestNaNBitsKept(t *testing.T) {
	pats := []uint64{0x7ff8000000000001, 0xfff8000000000000, 0x8000000000000000, 0, 0x3ff8000000000000}
	sc := arrow.NewSchema([]arrow.Field{{Name: "w", Type: arrow.PrimitiveTypes.Float64}, {Name: "one", Type: arrow.PrimitiveTypes.Float64}, {Name: "s", Type: arrow.PrimitiveTypes.Int64}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	want := map[uint64]int{}
	for i := 0; i < 20_000; i++ {
		p := pats[i%len(pats)]
		b.Field(0).(*array.Float64Builder).Append(math.Float64frombits(p))
		b.Field(1).(*array.Float64Builder).Append(math.Float64frombits(pats[(i%3)*2]))
		b.Field(2).(*array.Int64Builder).Append(int64(i % 2))
		want[p]++
	}
	in := filepath.Join(t.TempDir(), "in.parquet")
	testutil.WriteArrow(t, in, b.NewRecordBatch(), apq.WithDictionaryDefault(false))
	out := filepath.Join(t.TempDir(), "out")
	if _, err := Run(context.Background(), RunOptions{Inputs: []string{in}, Output: out, SliceKeys: []string{"s"}}); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(out, "parquet", "*.parquet"))
	got := map[uint64]int{}
	for _, f := range files {
		rows, err := parquet.ReadFile[struct {
			W float64 `parquet:"w"`
		}](f)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			got[math.Float64bits(r.W)]++
		}
		pf, err := parquet.OpenFile(mustOpen(t, f), fileSize(t, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, rg := range pf.Metadata().RowGroups {
			for _, c := range rg.Columns {
				if name := c.MetaData.PathInSchema[0]; name == "one" && c.MetaData.DictionaryPageOffset == 0 {
					t.Errorf("%s: column one, of one NaN pattern, lost its dictionary", f)
				}
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("bit patterns out %x, in %x", got, want)
	}
}

func mustOpen(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}
