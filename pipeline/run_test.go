package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/parquet-go/parquet-go"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/report"
	"github.com/relayout/relayout/verify"
)

// smallRun runs relayout on in with options sized so that a few tens of
// thousands of rows give many row groups, slices of every kind (owning,
// sharing, spanning row groups and files) and several files.
func smallRun(t *testing.T, in, out string, mod func(*RunOptions)) *Result {
	t.Helper()
	o := RunOptions{
		Inputs: []string{in}, Output: out, SliceKeys: []string{"country", "date"},
		RowGroupBytes: 512 << 10, MinRowGroupBytes: 64 << 10, FileBytes: 1 << 20,
	}
	if mod != nil {
		mod(&o)
	}
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return res
}

func readManifest(t *testing.T, out string) *manifests.Manifest {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(out, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := manifests.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRunRoundTripIndependentReader(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 40_000, Files: 3, Seed: 7})
	out := filepath.Join(t.TempDir(), "out")
	res := smallRun(t, in, out, nil)
	m := readManifest(t, out)
	if m.Totals.Files < 2 || m.Totals.RowGroups < 4 {
		t.Fatalf("want several files and row groups, got %d files, %d row groups", m.Totals.Files, m.Totals.RowGroups)
	}
	if res.Manifest.Totals.Rows != 40_000 {
		t.Fatalf("rows = %d", res.Manifest.Totals.Rows)
	}

	// Same multiset of rows, read by parquet-go (relayout reads and writes
	// with arrow-go).
	want := testutil.ParquetGoRows(t, testutil.Files(t, in)...)
	got := testutil.ParquetGoRows(t, testutil.Files(t, filepath.Join(out, "parquet"))...)
	if len(got) != len(want) {
		t.Fatalf("output has %d rows, input %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("row multisets differ at %d:\n got  %s\n want %s", i, got[i], want[i])
		}
	}

	// Keys never decrease, and each row group's statistics agree with the
	// slices the manifest puts in it (parquet-go reads the statistics).
	checkOrderAndStats(t, out, m)
}

// checkOrderAndStats reads country and date with parquet-go.
func checkOrderAndStats(t *testing.T, out string, m *manifests.Manifest) {
	t.Helper()
	type key struct {
		country string
		date    int32
	}
	var prev *key
	for fi, mf := range m.Files {
		f, err := os.Open(filepath.Join(out, mf.Path))
		if err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		pf, err := parquet.OpenFile(f, st.Size())
		if err != nil {
			t.Fatal(err)
		}
		ci, _ := pf.Schema().Lookup("country")
		di, _ := pf.Schema().Lookup("date")
		if len(pf.RowGroups()) != len(mf.RowGroups) {
			t.Fatalf("%s: %d row groups, manifest %d", mf.Path, len(pf.RowGroups()), len(mf.RowGroups))
		}
		if len(pf.Metadata().RowGroups[0].SortingColumns) != 2 {
			t.Errorf("%s: sorting_columns = %v", mf.Path, pf.Metadata().RowGroups[0].SortingColumns)
		}
		for gi, rg := range pf.RowGroups() {
			// Expected min/max from the manifest's slice index.
			var minK, maxK *key
			for _, s := range m.Slices {
				for _, sg := range s.Segments {
					if sg.File == fi && sg.RowGroup == gi {
						k := key{s.Key[0].Value.(string), dateDays(t, s.Key[1].Value.(string))}
						if minK == nil || k.country < minK.country {
							kk := k
							minK = &kk
						}
						if maxK == nil || k.country > maxK.country {
							kk := k
							maxK = &kk
						}
					}
				}
			}
			cmin, cmax, ok := rg.ColumnChunks()[ci.ColumnIndex].(*parquet.FileColumnChunk).Bounds()
			if !ok || minK == nil {
				t.Fatalf("%s rg %d: no country statistics or no slices", mf.Path, gi)
			}
			if string(cmin.ByteArray()) != minK.country || string(cmax.ByteArray()) != maxK.country {
				t.Errorf("%s rg %d: country stats [%s,%s], manifest [%s,%s]", mf.Path, gi, cmin, cmax, minK.country, maxK.country)
			}
			if minK.country == maxK.country {
				dmin, dmax, _ := rg.ColumnChunks()[di.ColumnIndex].(*parquet.FileColumnChunk).Bounds()
				var lo, hi int32 = 1 << 30, -1 << 30
				for _, s := range m.Slices {
					for _, sg := range s.Segments {
						if sg.File == fi && sg.RowGroup == gi {
							d := dateDays(t, s.Key[1].Value.(string))
							lo, hi = min(lo, d), max(hi, d)
						}
					}
				}
				if dmin.Int32() != lo || dmax.Int32() != hi {
					t.Errorf("%s rg %d: date stats [%d,%d], manifest [%d,%d]", mf.Path, gi, dmin.Int32(), dmax.Int32(), lo, hi)
				}
			}
			// Row order.
			testutil.EachRow(t, rg, func(r parquet.Row) {
				k := key{string(col(r, ci.ColumnIndex).ByteArray()), col(r, di.ColumnIndex).Int32()}
				if prev != nil && (k.country < prev.country || (k.country == prev.country && k.date < prev.date)) {
					t.Fatalf("%s rg %d: key %v after %v", mf.Path, gi, k, *prev)
				}
				kk := k
				prev = &kk
			})
		}
		f.Close()
	}
}

func dateDays(t *testing.T, s string) int32 {
	t.Helper()
	var y, mo, d int
	if _, err := fmtSscanf(s, &y, &mo, &d); err != nil {
		t.Fatalf("date %q: %v", s, err)
	}
	return int32(daysFromCivil(y, mo, d))
}

func TestManifestMatchesJSONSchema(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 5_000, Files: 2, Seed: 3})
	out := filepath.Join(t.TempDir(), "out")
	smallRun(t, in, out, func(o *RunOptions) { o.Tensors = true; o.ShardBytes = 256 << 10 })
	sch := manifestSchema(t)
	data, _ := os.ReadFile(filepath.Join(out, "manifest.json"))
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(inst); err != nil {
		t.Fatalf("manifest does not match its schema: %v", err)
	}
	// A broken manifest must not validate: the schema is not vacuous.
	var v map[string]any
	json.Unmarshal(data, &v)
	delete(v, "fingerprint")
	if err := sch.Validate(v); err == nil {
		t.Fatal("schema accepted a manifest without fingerprint")
	}
}

func manifestSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(manifests.SchemaJSON))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddResource("manifest.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("manifest.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

func TestDeterministicAcrossParallelismAndMemory(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 60_000, Files: 3, Seed: 11})
	base := t.TempDir()
	runs := []struct {
		name string
		mod  func(*RunOptions)
	}{
		{"p1", func(o *RunOptions) { o.Parallel = 1 }},
		{"p4", func(o *RunOptions) { o.Parallel = 4 }},
		{"again", nil},
		// Units of 15k rows force several spilled units.
		{"spill", func(o *RunOptions) { o.UnitRows = 15_000; o.TmpDir = t.TempDir() }},
		// Units of 1k rows cut each into pieces of about 300 rows per
		// input row group: the shuffle takes two passes (partition.Bins).
		{"two-pass", func(o *RunOptions) { o.UnitRows = 1_000; o.TmpDir = t.TempDir() }},
	}
	var ref map[string][]byte
	for _, r := range runs {
		out := filepath.Join(base, r.name)
		res := smallRun(t, in, out, func(o *RunOptions) {
			// Tensor shards must be byte-identical too.
			o.Tensors, o.ShardBytes = true, 512<<10
			if r.mod != nil {
				r.mod(o)
			}
		})
		if r.name == "spill" && res.Report.Units < 2 {
			t.Fatalf("spill run used %d units; the test must force spilling", res.Report.Units)
		}
		rebinned := slices.ContainsFunc(res.Report.Stages, func(s report.Stage) bool { return s.Name == "rebin" })
		if rebinned != (r.name == "two-pass") {
			t.Fatalf("%s: %d units; a second shuffle pass: %v", r.name, res.Report.Units, rebinned)
		}
		got := readTree(t, out)
		if ref == nil {
			ref = got
			continue
		}
		if len(got) != len(ref) {
			t.Fatalf("%s: %d files, first run %d", r.name, len(got), len(ref))
		}
		if len(testutil.Files(t, filepath.Join(out, "tensors"))) < 2 {
			t.Fatalf("%s: want several tensor shards", r.name)
		}
		for k, v := range ref {
			if !bytes.Equal(got[k], v) {
				t.Fatalf("%s: %s differs from the first run", r.name, k)
			}
		}
	}
}

// readTree returns the manifest and data files of an output.
func readTree(t *testing.T, out string) map[string][]byte {
	t.Helper()
	return testutil.ReadTree(t, out)
}

func TestSortKeysAndSplitHotSlice(t *testing.T) {
	// Two countries only: each slice is huge relative to the tiny memory
	// limit, so slices are split over units and ranked by sort key.
	in := testutil.Generate(t, gen.Options{Rows: 60_000, Files: 2, Seed: 5, Countries: 2, Days: 1})
	base := t.TempDir()
	mod := func(spill bool) func(*RunOptions) {
		return func(o *RunOptions) {
			o.SortKeys = []string{"user_id", "item_id"}
			if spill {
				o.UnitRows, o.TmpDir = 15_000, t.TempDir()
			}
		}
	}
	a := smallRun(t, in, filepath.Join(base, "mem"), mod(false))
	b := smallRun(t, in, filepath.Join(base, "spill"), mod(true))
	if b.Report.Units < 2 {
		t.Fatalf("spill run used %d units", b.Report.Units)
	}
	ta, tb := readTree(t, filepath.Join(base, "mem")), readTree(t, filepath.Join(base, "spill"))
	for k, v := range ta {
		if !bytes.Equal(tb[k], v) {
			t.Fatalf("%s differs between in-memory and spilled runs", k)
		}
	}
	if len(a.Manifest.Slices) != 2 {
		t.Fatalf("slices = %d", len(a.Manifest.Slices))
	}
	// Within each slice rows are ordered by (user_id, item_id).
	for _, p := range testutil.Files(t, filepath.Join(base, "mem", "parquet")) {
		f, _ := os.Open(p)
		st, _ := f.Stat()
		pf, err := parquet.OpenFile(f, st.Size())
		if err != nil {
			t.Fatal(err)
		}
		ci, _ := pf.Schema().Lookup("country")
		ui, _ := pf.Schema().Lookup("user_id")
		ii, _ := pf.Schema().Lookup("item_id")
		var prev []any
		for _, rg := range pf.RowGroups() {
			testutil.EachRow(t, rg, func(r parquet.Row) {
				cur := []any{string(col(r, ci.ColumnIndex).ByteArray()), col(r, ui.ColumnIndex).Int64(), col(r, ii.ColumnIndex).Int64()}
				if prev != nil && cur[0] == prev[0] && (cur[1].(int64) < prev[1].(int64) || (cur[1] == prev[1] && cur[2].(int64) < prev[2].(int64))) {
					t.Fatalf("sort keys decrease: %v after %v", cur, prev)
				}
				prev = cur
			})
		}
		f.Close()
	}
}

func TestNoSliceKeysIsFaithfulRewrite(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 10_000, Files: 2, Seed: 9})
	out := filepath.Join(t.TempDir(), "out")
	smallRun(t, in, out, func(o *RunOptions) { o.SliceKeys = nil })
	// Same rows in the same order.
	var want, got []string
	for _, p := range testutil.Files(t, in) {
		want = append(want, orderedRows(t, p)...)
	}
	for _, p := range testutil.Files(t, filepath.Join(out, "parquet")) {
		got = append(got, orderedRows(t, p)...)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("rewrite without slice keys changed rows or their order (%d vs %d rows)", len(got), len(want))
	}
}

func orderedRows(t *testing.T, p string) []string {
	f, _ := os.Open(p)
	defer f.Close()
	st, _ := f.Stat()
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, rg := range pf.RowGroups() {
		testutil.EachRow(t, rg, func(r parquet.Row) { out = append(out, testutil.RowString(r)) })
	}
	return out
}

func TestExistingOutputNeedsOverwrite(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 2_000, Files: 1, Seed: 1})
	out := filepath.Join(t.TempDir(), "out")
	smallRun(t, in, out, nil)
	_, err := Run(context.Background(), RunOptions{Inputs: []string{in}, Output: out})
	if !errs.Is(err, errs.Precondition) || !strings.Contains(err.Error(), "--overwrite") {
		t.Fatalf("second run: %v (class %v), want a precondition error naming --overwrite", err, errs.ClassOf(err))
	}
	smallRun(t, in, out, func(o *RunOptions) { o.Overwrite = true; o.FileBytes = 1 << 30 })
	if m := readManifest(t, out); len(m.Files) != 1 || len(testutil.Files(t, filepath.Join(out, "parquet"))) != 1 {
		t.Fatalf("overwrite left stale files")
	}
}

func TestInjectedFailureLeavesNoManifestOrTemp(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 40_000, Files: 2, Seed: 2})
	out := filepath.Join(t.TempDir(), "out")
	tmp := t.TempDir()
	_, err := Run(context.Background(), RunOptions{
		Inputs: []string{in}, Output: out, SliceKeys: []string{"country"},
		RowGroupBytes: 512 << 10, FileBytes: 1 << 20, FailAfterFiles: 2,
		UnitRows: 15_000, TmpDir: tmp, Tensors: true, ShardBytes: 256 << 10,
	})
	if err == nil || !errs.Is(err, errs.Transient) {
		t.Fatalf("want the injected transient failure, got %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "manifest.json")); !os.IsNotExist(err) {
		t.Fatalf("a failed run left a manifest")
	}
	if left := testutil.Files(t, filepath.Join(out, "parquet")); len(left) != 0 {
		t.Fatalf("a failed run left data files: %v", left)
	}
	if left := testutil.Files(t, filepath.Join(out, "tensors")); len(left) != 0 {
		t.Fatalf("a failed run left tensor shards: %v", left)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Fatalf("a failed run left temp files: %v", ents)
	}
	res, err := verify.Output(context.Background(), out, false, 1)
	if err != nil || res.OK {
		t.Fatalf("verify of a failed output: %+v %v", res, err)
	}
}

func TestVerifyCatchesAnyFlippedByte(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 5_000, Files: 1, Seed: 4})
	out := filepath.Join(t.TempDir(), "out")
	smallRun(t, in, out, nil)
	if res, err := verify.Output(context.Background(), out, true, 2); err != nil || !res.OK {
		t.Fatalf("verify of a good output: %+v %v", res, err)
	}
	p := testutil.Files(t, filepath.Join(out, "parquet"))[0]
	orig, _ := os.ReadFile(p)
	for _, off := range []int{0, len(orig) / 3, len(orig) / 2, len(orig) - 9, len(orig) - 1} {
		res := verifyFlipped(t, out, p, orig, int64(off), 0x01)
		if res.OK || !strings.Contains(res.Problem, "xxhash64") {
			t.Fatalf("flipped byte at %d not caught: %+v", off, res)
		}
	}
	os.WriteFile(p, orig, 0o644)
	os.Remove(p)
	if res, _ := verify.Output(context.Background(), out, false, 1); res.OK || !strings.Contains(res.Problem, "missing") {
		t.Fatalf("missing file not caught: %+v", res)
	}
}

// verifyFlipped writes orig to the output file p with the byte at at
// XORed with mask, and runs a plain verify of out.
func verifyFlipped(t *testing.T, out, p string, orig []byte, at int64, mask byte) *verify.Result {
	t.Helper()
	bad := bytes.Clone(orig)
	bad[at] ^= mask
	if err := os.WriteFile(p, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := verify.Output(context.Background(), out, false, 1)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestVerifyNamesTheDamagedPage: relayout's output has page CRC32s, so a
// byte flipped inside a data page is located, not only detected. The page
// is found with parquet-go's offset index, not relayout's code.
func TestVerifyNamesTheDamagedPage(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 20_000, Files: 1, Seed: 5})
	out := filepath.Join(t.TempDir(), "out")
	smallRun(t, in, out, func(o *RunOptions) { o.RowGroupBytes = 256 << 10 })
	p := testutil.Files(t, filepath.Join(out, "parquet"))[0]
	orig, _ := os.ReadFile(p)
	pf, err := parquet.OpenFile(bytes.NewReader(orig), int64(len(orig)))
	if err != nil {
		t.Fatal(err)
	}
	rgs := pf.Metadata().RowGroups
	if len(rgs) < 2 {
		t.Fatalf("%d row groups: too few to test", len(rgs))
	}
	oi := pf.OffsetIndexes()
	for _, rg := range []int{0, len(rgs) - 1} {
		ncol := len(rgs[rg].Columns)
		for _, c := range []int{0, ncol / 2, ncol - 1} {
			locs := oi[rg*ncol+c].PageLocations
			page := len(locs) - 1
			loc := locs[page]
			// The page's last byte: inside its body, whatever its header's size.
			at := loc.Offset + int64(loc.CompressedPageSize) - 1
			res := verifyFlipped(t, out, p, orig, at, 0x20)
			// A dictionary page comes first in a chunk and is page 0 to
			// the checker; the offset index lists data pages only.
			if rgs[rg].Columns[c].MetaData.DictionaryPageOffset > 0 {
				page++
			}
			want := fmt.Sprintf("row group %d, column %s, page %d does not match its CRC32", rg, strings.Join(rgs[rg].Columns[c].MetaData.PathInSchema, "."), page)
			if res.OK || !strings.Contains(res.Problem, want) {
				t.Fatalf("byte %d flipped: want %q, got %+v", at, want, res)
			}
		}
	}
	os.WriteFile(p, orig, 0o644)
	if res, err := verify.Output(context.Background(), out, true, 1); err != nil || !res.OK {
		t.Fatalf("verify of the restored output: %+v %v", res, err)
	}
}

func TestVerifyChecksShards(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 5_000, Files: 1, Seed: 4})
	out := filepath.Join(t.TempDir(), "out")
	smallRun(t, in, out, func(o *RunOptions) { o.Tensors = true; o.ShardBytes = 128 << 10 })
	res, err := verify.Output(context.Background(), out, false, 2)
	if err != nil || !res.OK || res.Shards < 2 {
		t.Fatalf("verify of a good output: %+v %v", res, err)
	}
	p := testutil.Files(t, filepath.Join(out, "tensors"))[1]
	orig, _ := os.ReadFile(p)
	for _, off := range []int{0, 8, 100, len(orig) / 2, len(orig) - 1} {
		bad := bytes.Clone(orig)
		bad[off] ^= 0x01
		os.WriteFile(p, bad, 0o644)
		res, err := verify.Output(context.Background(), out, false, 1)
		if err != nil {
			t.Fatal(err)
		}
		if res.OK || !strings.Contains(res.Problem, "xxhash64") {
			t.Fatalf("flipped byte at %d of a shard not caught: %+v", off, res)
		}
	}
	os.WriteFile(p, orig, 0o644)

	// The manifest's header entry, what a remote reader checks the header
	// it fetches alone against.
	mp := filepath.Join(out, manifests.FileName)
	mdata, _ := os.ReadFile(mp)
	m, err := manifests.Decode(mdata)
	if err != nil {
		t.Fatal(err)
	}
	if m.Tensors.Shards[1].HeaderBytes == 0 || m.Tensors.Shards[1].HeaderXXHash64 == "" {
		t.Fatalf("shard 1 has no header entry: %+v", m.Tensors.Shards[1])
	}
	m.Tensors.Shards[1].HeaderXXHash64 = "0123456789abcdef"
	edited, _ := manifests.Marshal(m)
	os.WriteFile(mp, edited, 0o644)
	if res, _ := verify.Output(context.Background(), out, false, 1); res.OK || !strings.Contains(res.Problem, "header xxhash64") {
		t.Fatalf("a wrong header hash in the manifest not caught: %+v", res)
	}
	os.WriteFile(mp, mdata, 0o644)

	os.Remove(p)
	if res, _ := verify.Output(context.Background(), out, false, 1); res.OK || !strings.Contains(res.Problem, "missing") {
		t.Fatalf("missing shard not caught: %+v", res)
	}
}

func TestInputErrorsNameFileAndColumn(t *testing.T) {
	dir := t.TempDir()
	type A struct {
		Country string `parquet:"country"`
		X       int64  `parquet:"x"`
	}
	type B struct {
		X       int32  `parquet:"x"`
		Country string `parquet:"country"`
	}
	type C struct {
		Country string `parquet:"country"`
		X       int64  `parquet:"x"`
		Extra   int64  `parquet:"extra"`
	}
	write := func(name string, rows any) string {
		p := filepath.Join(dir, name)
		var err error
		switch r := rows.(type) {
		case []A:
			err = parquet.WriteFile(p, r)
		case []B:
			err = parquet.WriteFile(p, r)
		case []C:
			err = parquet.WriteFile(p, r)
		}
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a.parquet", []A{{"de", 1}})
	b := write("b.parquet", []B{{2, "fr"}})
	c := write("c.parquet", []C{{"it", 3, 4}})
	bad := filepath.Join(dir, "bad.parquet")
	os.WriteFile(bad, []byte("PAR1 this is not parquet PAR1"), 0o644)
	cases := []struct {
		name   string
		inputs []string
		keys   []string
		want   []string
	}{
		{"type mismatch", []string{a, b}, nil, []string{"a.parquet", "b.parquet", `"x"`, "share one schema"}},
		{"column count", []string{a, c}, nil, []string{"a.parquet", "c.parquet", "share one schema"}},
		{"missing key", []string{a}, []string{"nope"}, []string{`"nope"`, "a.parquet"}},
		{"corrupt", []string{bad}, nil, []string{"bad.parquet"}},
		{"no input", []string{filepath.Join(dir, "none")}, nil, []string{"none"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), RunOptions{Inputs: tc.inputs, Output: filepath.Join(t.TempDir(), "o"), SliceKeys: tc.keys})
			if !errs.Is(err, errs.BadInput) {
				t.Fatalf("err = %v (class %v), want bad input", err, errs.ClassOf(err))
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
}

// col returns the first value of leaf column c in a parquet-go row (rows are
// flattened leaf values, so list columns shift positions).
func col(r parquet.Row, c int) parquet.Value {
	for _, v := range r {
		if v.Column() == c {
			return v
		}
	}
	return parquet.Value{}
}

// TestReorderedColumnsAndNullSlices: files whose columns come in another
// order form one table (columns matched by name), and rows whose slice key
// is null form their own slice, ordered first.
func TestReorderedColumnsAndNullSlices(t *testing.T) {
	dir := t.TempDir()
	type A struct {
		Country *string `parquet:"country,optional"`
		X       int64   `parquet:"x"`
	}
	type B struct {
		X       int64   `parquet:"x"`
		Country *string `parquet:"country,optional"`
	}
	s := func(v string) *string { return &v }
	if err := parquet.WriteFile(filepath.Join(dir, "a.parquet"), []A{{s("de"), 1}, {nil, 2}, {s("at"), 3}}); err != nil {
		t.Fatal(err)
	}
	if err := parquet.WriteFile(filepath.Join(dir, "b.parquet"), []B{{4, nil}, {5, s("de")}}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out")
	res, err := Run(context.Background(), RunOptions{Inputs: []string{dir}, Output: out, SliceKeys: []string{"country"}})
	if err != nil {
		t.Fatal(err)
	}
	m := res.Manifest
	if m.Schema[0].Name != "country" || m.Schema[1].Name != "x" {
		t.Fatalf("schema order %v, want the first file's", m.Schema)
	}
	var keys []any
	var rows []int64
	for _, sl := range m.Slices {
		keys = append(keys, sl.Key[0].Value)
		rows = append(rows, sl.Rows)
	}
	if fmt.Sprint(keys) != "[<nil> at de]" || fmt.Sprint(rows) != "[2 1 2]" {
		t.Fatalf("slices %v with rows %v, want [<nil> at de] with [2 1 2]", keys, rows)
	}
	// Within the null slice and the "de" slice, input order is kept.
	got := orderedRows(t, testutil.Files(t, filepath.Join(out, "parquet"))[0])
	var xs []string
	for _, r := range got {
		xs = append(xs, r[strings.LastIndex(r[:len(r)-1], "=")+1:len(r)-1])
	}
	if fmt.Sprint(xs) != "[2 4 3 1 5]" {
		t.Fatalf("x in output order %v, want [2 4 3 1 5]", xs)
	}
}

// TestVerifyDeepRederivesShards: verify --deep converts the Parquet rows
// again and requires the shards to equal the conversion, flat and packed
// over several files; a shard altered together with its manifest entry
// passes the shallow check and fails the deep one.
func TestVerifyDeepRederivesShards(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 30_000, Files: 2, Seed: 6})
	for _, packed := range []bool{false, true} {
		out := filepath.Join(t.TempDir(), "out")
		smallRun(t, in, out, func(o *RunOptions) {
			o.Tensors, o.ShardBytes, o.FileBytes = true, 256<<10, 1<<20
			if packed {
				o.QueryKey = []string{"query_id"}
			}
		})
		res, err := verify.Output(context.Background(), out, true, 2)
		if err != nil || !res.OK || !res.Rederived || res.Shards < 3 || res.Files < 2 {
			t.Fatalf("packed %v: deep verify of a good output: %+v %v", packed, res, err)
		}
		// Alter a data byte of the last shard, and its manifest entry's
		// hash to match.
		m := readManifest(t, out)
		last := m.Tensors.Shards[len(m.Tensors.Shards)-1]
		p := filepath.Join(out, last.Path)
		data, _ := os.ReadFile(p)
		data[len(data)-1] ^= 0x01
		os.WriteFile(p, data, 0o644)
		raw, _ := os.ReadFile(filepath.Join(out, "manifest.json"))
		raw = bytes.Replace(raw, []byte(`"`+last.XXHash64+`"`), []byte(fmt.Sprintf(`"%016x"`, xxhash.Sum64(data))), 1)
		os.WriteFile(filepath.Join(out, "manifest.json"), raw, 0o644)
		if res, err := verify.Output(context.Background(), out, false, 2); err != nil || !res.OK {
			t.Fatalf("packed %v: the altered shard should pass the shallow check: %+v %v", packed, res, err)
		}
		res, err = verify.Output(context.Background(), out, true, 2)
		if err != nil || res.OK || !strings.Contains(res.Problem, last.Path) || !strings.Contains(res.Problem, "not the conversion") {
			t.Fatalf("packed %v: deep verify of an altered shard: %+v %v", packed, res, err)
		}
	}
}
