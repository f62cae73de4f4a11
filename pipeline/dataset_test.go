package pipeline

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/relayout/relayout/dataset"
	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/storage"
)

// dailyDays writes a generated log of days days as a Hive table
// partitioned by date (date=…/data_0.parquet) under dir/all, and returns
// the day folders in date order.
func dailyDays(t *testing.T, rows int64, days int) (string, []string) {
	t.Helper()
	flat := testutil.Generate(t, gen.Options{Rows: rows, Files: 2, Days: days, Countries: 8, Seed: 51})
	dir := filepath.Join(t.TempDir(), "all")
	testutil.DuckDB(t, fmt.Sprintf(`copy (select * exclude (date), date from read_parquet('%s/*.parquet')) to '%s' (format parquet, partition_by (date))`, flat, dir))
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	slices.Sort(out)
	if len(out) != days {
		t.Fatalf("%d day folders, want %d", len(out), days)
	}
	return dir, out
}

// linkDays makes a Hive table of the given day folders of src under dst
// (hard links: the same bytes and mtimes as the source).
func linkDays(t *testing.T, src, dst string, days []string) {
	t.Helper()
	for _, d := range days {
		if err := os.MkdirAll(filepath.Join(dst, d), 0o755); err != nil {
			t.Fatal(err)
		}
		ents, _ := os.ReadDir(filepath.Join(src, d))
		for _, e := range ents {
			to := filepath.Join(dst, d, e.Name())
			if _, err := os.Stat(to); err == nil {
				continue
			}
			if err := os.Link(filepath.Join(src, d, e.Name()), to); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func dsOpts(root, in string) RunOptions {
	return RunOptions{Dataset: root, Inputs: []string{in}, SliceKeys: []string{"date", "country"}, RowGroupBytes: 256 << 10, MinRowGroupBytes: 32 << 10}
}

func dsRun(t *testing.T, root, in string, mod func(*RunOptions)) *DatasetResult {
	t.Helper()
	o := dsOpts(root, in)
	if mod != nil {
		mod(&o)
	}
	res, err := RunDataset(context.Background(), o, false)
	if err != nil {
		t.Fatalf("dataset run: %v", err)
	}
	return res
}

func verifyGeneration(t *testing.T, root string, n int) {
	t.Helper()
	r, err := VerifyDataset(context.Background(), root, n, true, 2)
	if err != nil || !r.OK {
		t.Fatalf("verify generation %d: %+v %v", n, r, err)
	}
}

// TestDatasetAddsOneDay: a 5-day dataset gets a sixth day; the run writes
// only the new day's part (bytes written within 5% of that part), reuses
// the other five by reference, and generation 2's parts are byte-identical
// to those a full run over the 6 days writes; DuckDB reads the same rows
// from the generation's files as from the input.
func TestDatasetAddsOneDay(t *testing.T) {
	all, days := dailyDays(t, 36_000, 6)
	base := t.TempDir()
	in := filepath.Join(base, "in")
	linkDays(t, all, in, days[:5])
	root := filepath.Join(base, "ds")
	g1 := dsRun(t, root, in, nil).Generation
	if g1.Generation != 1 || len(g1.Parts) != 5 || len(g1.Changes.New) != 5 {
		t.Fatalf("generation 1: %d parts, changes %+v", len(g1.Parts), g1.Changes)
	}
	// Nothing new: no generation.
	if r := dsRun(t, root, in, nil); !r.Unchanged || r.Generation.Generation != 1 {
		t.Fatalf("rerun on the same input: unchanged %v, generation %d", r.Unchanged, r.Generation.Generation)
	}
	linkDays(t, all, in, days[5:])
	// The dry run says what the run will do, and writes nothing.
	dry, err := RunDataset(context.Background(), dsOpts(root, in), true)
	if err != nil {
		t.Fatal(err)
	}
	var dayBytes int64
	for _, f := range testutil.Files(t, filepath.Join(in, days[5])) {
		st, _ := os.Stat(f)
		dayBytes += st.Size()
	}
	if dc := dry.Generation.Changes; !dry.DryRun || len(dc.New) != 1 || dc.New[0] != days[5] || len(dc.Reused) != 5 ||
		dc.InputBytesRead != dayBytes || dc.FullInputBytes <= dayBytes {
		t.Fatalf("dry run: %+v; the new day's files hold %d bytes", dc, dayBytes)
	}
	if ents, _ := os.ReadDir(filepath.Join(root, "parts")); len(ents) != 5 {
		t.Fatalf("the dry run wrote parts: %d partition folders", len(ents))
	}
	r2 := dsRun(t, root, in, nil)
	g2 := r2.Generation
	ch := g2.Changes
	if g2.Generation != 2 || len(g2.Parts) != 6 || len(ch.New) != 1 || ch.New[0] != days[5] || len(ch.Reused) != 5 || len(ch.Changed)+len(ch.Dropped) != 0 {
		t.Fatalf("generation 2: %d parts, changes %+v", len(g2.Parts), ch)
	}
	newPart := g2.Parts[5]
	if ch.BytesWritten > newPart.Bytes+newPart.Bytes/20 {
		t.Fatalf("wrote %d bytes for a new part of %d", ch.BytesWritten, newPart.Bytes)
	}
	for i, p := range g2.Parts[:5] {
		if p.Path != g1.Parts[i].Path || p.WrittenIn != 1 {
			t.Fatalf("part %s was not reused: %s (written in %d), was %s", p.Folder, p.Path, p.WrittenIn, g1.Parts[i].Path)
		}
	}
	verifyGeneration(t, root, 2)
	verifyGeneration(t, root, 1) // time travel: generation 1 still reads

	// A full run over the 6 days writes the same parts, byte for byte.
	full := filepath.Join(base, "full")
	gf := dsRun(t, full, in, nil).Generation
	if len(gf.Parts) != 6 {
		t.Fatalf("full run: %d parts", len(gf.Parts))
	}
	for i, p := range gf.Parts {
		if p.Path != g2.Parts[i].Path {
			t.Fatalf("full run's part %s is %s, the incremental one %s", p.Folder, p.Path, g2.Parts[i].Path)
		}
		a, b := readTree(t, filepath.Join(full, p.Path)), readTree(t, filepath.Join(root, p.Path))
		for k, v := range a {
			if k != "_report.json" && string(b[k]) != string(v) {
				t.Fatalf("part %s: %s differs between the full and the incremental run", p.Folder, k)
			}
		}
	}
	urls, err := DatasetFiles(context.Background(), root, 0)
	if err != nil || len(urls) < 6 {
		t.Fatalf("files: %v %v", urls, err)
	}
	list := "['" + strings.Join(urls, "','") + "']"
	sameRowsInDuckDB(t, "generation 2 vs input", duckScan(in, true), "read_parquet("+list+")")
}

// TestDatasetChangesAndWindow: a changed input (same name, new content)
// rewrites exactly its part; a touched one (new mtime, same bytes) is
// reused, the content deciding; --keep-partitions and --where drop parts
// that left the window.
func TestDatasetChangesAndWindow(t *testing.T) {
	all, days := dailyDays(t, 24_000, 4)
	base := t.TempDir()
	in := filepath.Join(base, "in")
	if err := os.CopyFS(in, os.DirFS(all)); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(base, "ds")
	g1 := dsRun(t, root, in, nil).Generation
	// Touch day 0's file: same bytes.
	f0 := filepath.Join(in, days[0], "data_0.parquet")
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(f0, later, later); err != nil {
		t.Fatal(err)
	}
	// Rewrite day 2's file with other rows (the first half of them).
	f2 := filepath.Join(in, days[2], "data_0.parquet")
	testutil.DuckDB(t, fmt.Sprintf(`copy (select * from read_parquet('%s', hive_partitioning=false) limit 1000) to '%s.tmp' (format parquet)`, f2, f2))
	if err := os.Rename(f2+".tmp", f2); err != nil {
		t.Fatal(err)
	}
	r := dsRun(t, root, in, nil)
	ch := r.Generation.Changes
	if len(ch.Changed) != 1 || ch.Changed[0] != days[2] || len(ch.Reused) != 3 || len(ch.New) != 0 {
		t.Fatalf("changes %+v; want %s changed, the rest reused", ch, days[2])
	}
	if p := r.Generation.Parts[2]; p.Path == g1.Parts[2].Path || p.Rows != 1000 {
		t.Fatalf("changed part %s: %d rows at %s", p.Folder, p.Rows, p.Path)
	}
	verifyGeneration(t, root, 2)

	r = dsRun(t, root, in, func(o *RunOptions) { o.KeepPartitions = 2 })
	if ch := r.Generation.Changes; len(r.Generation.Parts) != 2 || len(ch.Dropped) != 2 || ch.BytesWritten != 0 ||
		r.Generation.Parts[0].Folder != days[2] {
		t.Fatalf("--keep-partitions 2: parts %d, changes %+v", len(r.Generation.Parts), ch)
	}
	r = dsRun(t, root, in, func(o *RunOptions) { o.Where = "date >= " + strings.TrimPrefix(days[1], "date=") })
	if len(r.Generation.Parts) != 3 || r.Generation.Parts[0].Folder != days[1] {
		t.Fatalf("--where: %d parts from %s", len(r.Generation.Parts), r.Generation.Parts[0].Folder)
	}
	verifyGeneration(t, root, r.Generation.Generation)
	if _, err := RunDataset(context.Background(), RunOptions{Dataset: root, Inputs: []string{in}, SliceKeys: []string{"date"}, Where: "country = x"}, false); !errs.Is(err, errs.Usage) {
		t.Fatalf("--where on another column: %v", err)
	}
}

// TestDatasetGCKeepsReferencedParts: gc removes old generations and
// unreferenced parts, never one a kept generation references: every kept
// generation verifies after gc.
func TestDatasetGCKeepsReferencedParts(t *testing.T) {
	all, days := dailyDays(t, 24_000, 4)
	base := t.TempDir()
	in := filepath.Join(base, "in")
	root := filepath.Join(base, "ds")
	for i := 2; i <= 4; i++ {
		linkDays(t, all, in, days[:i])
		dsRun(t, root, in, nil)
	}
	dsRun(t, root, in, func(o *RunOptions) { o.KeepPartitions = 2 }) // generation 4 drops two parts
	res, err := GCDataset(context.Background(), root, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.KeptGenerations, []int{3, 4}) || !slices.Equal(res.RemovedGenerations, []int{1, 2}) {
		t.Fatalf("gc: %+v", res)
	}
	if len(res.RemovedParts) != 0 {
		t.Fatalf("gc removed %v, which generation 3 references", res.RemovedParts)
	}
	verifyGeneration(t, root, 3)
	verifyGeneration(t, root, 4)
	res, err = GCDataset(context.Background(), root, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.RemovedParts) != 2 || res.KeptParts != 2 {
		t.Fatalf("gc --keep 1: %+v", res)
	}
	verifyGeneration(t, root, 4)
	if _, err := VerifyDataset(context.Background(), root, 3, false, 2); err == nil {
		t.Fatal("generation 3 still opens after gc removed it")
	}
}

// TestDatasetConcurrentRuns: two runs adding the same day at once: exactly
// one commits; the other fails with exit 5 and leaves nothing visible.
func TestDatasetConcurrentRuns(t *testing.T) {
	all, days := dailyDays(t, 24_000, 3)
	base := t.TempDir()
	in := filepath.Join(base, "in")
	linkDays(t, all, in, days[:2])
	root := filepath.Join(base, "ds")
	dsRun(t, root, in, nil)
	linkDays(t, all, in, days[2:])
	var wg sync.WaitGroup
	errsOut := make([]error, 2)
	for i := range errsOut {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errsOut[i] = RunDataset(context.Background(), RunOptions{Dataset: root, Inputs: []string{in}, SliceKeys: []string{"date", "country"}}, false)
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errsOut {
		if err == nil {
			ok++
		} else if !errs.Is(err, errs.Precondition) {
			t.Fatalf("the losing run: %v (class %v), want exit 5", err, errs.ClassOf(err))
		}
	}
	loc, _ := storage.OpenDir(context.Background(), root, false)
	ns, _ := dataset.List(context.Background(), loc)
	if !slices.Equal(ns, []int{1, 2}) {
		t.Fatalf("generations %v after two racing runs (%d succeeded: %v)", ns, ok, errsOut)
	}
	verifyGeneration(t, root, 2)
}

// TestDatasetPlainFilesAndS3: the partition key may be a file column when
// each file holds one value (a file holding several is bad input naming
// it); the dataset root may be on S3.
func TestDatasetPlainFilesAndS3(t *testing.T) {
	type Row struct {
		Date  string `parquet:"day"`
		ID    int64  `parquet:"id"`
		Label int32  `parquet:"label"`
	}
	in := t.TempDir()
	for d := 0; d < 3; d++ {
		var rows []Row
		for i := 0; i < 500; i++ {
			rows = append(rows, Row{Date: fmt.Sprintf("d%d", d), ID: int64(i), Label: int32(i % 2)})
		}
		if err := parquet.WriteFile(filepath.Join(in, fmt.Sprintf("day-%d.parquet", d)), rows); err != nil {
			t.Fatal(err)
		}
	}
	params, _ := s3Server(t, "ds")
	root := "s3://ds/root/" + params
	res := dsRun(t, root, in, func(o *RunOptions) { o.SliceKeys = []string{"day"}; o.Tensors = true })
	if len(res.Generation.Parts) != 3 || res.Generation.Parts[1].Folder != "day=d1" {
		t.Fatalf("parts %+v", res.Generation.Parts)
	}
	verifyGeneration(t, root, 1)
	if r := dsRun(t, root, in, func(o *RunOptions) { o.SliceKeys = []string{"day"}; o.Tensors = true }); !r.Unchanged {
		t.Fatalf("rerun on S3: %+v", r.Generation.Changes)
	}
	mixed := filepath.Join(in, "mixed.parquet")
	if err := parquet.WriteFile(mixed, []Row{{"d1", 1, 0}, {"d2", 2, 1}}); err != nil {
		t.Fatal(err)
	}
	_, err := RunDataset(context.Background(), RunOptions{Dataset: root, Inputs: []string{in}, SliceKeys: []string{"day"}}, false)
	if !errs.Is(err, errs.BadInput) || !strings.Contains(err.Error(), "mixed.parquet") || !strings.Contains(err.Error(), "several values") {
		t.Fatalf("a file of two days: %v", err)
	}
}

// TestDatasetFanOut: the distributed nightly job: the dry run lists the
// new parts, one --part task per part writes it (at once, committing
// nothing), and a plain run adopts them and commits the same generation a
// single run does.
func TestDatasetFanOut(t *testing.T) {
	all, days := dailyDays(t, 30_000, 5)
	base := t.TempDir()
	in := filepath.Join(base, "in")
	linkDays(t, all, in, days[:3])
	one, fan := filepath.Join(base, "one"), filepath.Join(base, "fan")
	dsRun(t, one, in, nil)
	dsRun(t, fan, in, nil)
	linkDays(t, all, in, days)
	want := dsRun(t, one, in, nil).Generation

	dry, err := RunDataset(context.Background(), dsOpts(fan, in), true)
	if err != nil {
		t.Fatal(err)
	}
	todo := append(dry.Generation.Changes.New, dry.Generation.Changes.Changed...)
	if len(todo) != 2 {
		t.Fatalf("the dry run lists %v to write", todo)
	}
	var wg sync.WaitGroup
	errsOut := make([]error, len(todo))
	for i, f := range todo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := dsOpts(fan, in)
			o.Parts = []string{f}
			var r *DatasetResult
			r, errsOut[i] = RunDataset(context.Background(), o, false)
			if errsOut[i] == nil && !r.PartsOnly {
				errsOut[i] = fmt.Errorf("a --part run is not parts-only")
			}
		}()
	}
	wg.Wait()
	for _, err := range errsOut {
		if err != nil {
			t.Fatal(err)
		}
	}
	loc, _ := storage.OpenDir(context.Background(), fan, false)
	if ns, _ := dataset.List(context.Background(), loc); !slices.Equal(ns, []int{1}) {
		t.Fatalf("--part runs committed generations %v", ns)
	}
	got := dsRun(t, fan, in, nil).Generation
	if got.Generation != 2 || got.Changes.BytesWritten != 0 || len(got.Parts) != len(want.Parts) {
		t.Fatalf("commit step: generation %d, wrote %d bytes, %d parts (want %d)", got.Generation, got.Changes.BytesWritten, len(got.Parts), len(want.Parts))
	}
	for i := range want.Parts {
		if got.Parts[i].Path != want.Parts[i].Path || got.Parts[i].ManifestXXHash64 != want.Parts[i].ManifestXXHash64 {
			t.Fatalf("part %s: %s (%s), a single run wrote %s (%s)", want.Parts[i].Folder, got.Parts[i].Path, got.Parts[i].ManifestXXHash64, want.Parts[i].Path, want.Parts[i].ManifestXXHash64)
		}
	}
	verifyGeneration(t, fan, 2)
	o := dsOpts(fan, in)
	o.Parts = []string{"date=1999-01-01"}
	if _, err := RunDataset(context.Background(), o, false); !errs.Is(err, errs.Usage) {
		t.Fatalf("--part of no partition: %v", err)
	}
}
