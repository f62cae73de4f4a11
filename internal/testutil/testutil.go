// Package testutil holds helpers shared by relayout's tests: where the shared
// third-party data lives, generated inputs, an independent Parquet reader
// (parquet-go, while relayout reads with arrow-go) and the DuckDB peer.
package testutil

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	apq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/parquet-go/parquet-go"
	"gocloud.dev/blob"

	"github.com/relayout/relayout/internal/gen"
)

// Root returns the module's root folder.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// DataDir returns the shared third-party test data folder: $RELAYOUT_TEST_DATA,
// or ../shared/data beside the checkout. It skips the test, saying why, when
// the folder is absent.
func DataDir(tb testing.TB) string {
	tb.Helper()
	d := os.Getenv("RELAYOUT_TEST_DATA")
	if d == "" {
		d = filepath.Join(Root(), "..", "shared", "data")
	}
	if st, err := os.Stat(d); err != nil || !st.IsDir() {
		Missing(tb, "shared test data not found at %s (set RELAYOUT_TEST_DATA)", d)
	}
	return d
}

// Missing ends a test that lacks something outside the project (a peer, the
// shared data, a privilege): it fails when RELAYOUT_REQUIRE_PEERS=1 (as
// `make test` sets), so no skip goes unnoticed there, and skips otherwise.
func Missing(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if os.Getenv("RELAYOUT_REQUIRE_PEERS") == "1" {
		tb.Fatalf("RELAYOUT_REQUIRE_PEERS=1: "+format, args...)
	}
	tb.Skipf(format, args...)
}

// Generate writes a generated impression log under a temporary folder.
func Generate(tb testing.TB, o gen.Options) string {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "events")
	if _, err := gen.Write(dir, o); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// ParquetGoFile opens a Parquet file with parquet-go, whose metadata and
// pages it reads from memory (the file is read whole).
func ParquetGoFile(tb testing.TB, path string) *parquet.File {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	pf, err := parquet.OpenFile(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		tb.Fatalf("parquet-go open %s: %v", path, err)
	}
	return pf
}

// ParquetGoRows reads every row of the files with parquet-go and returns them
// as canonical strings (column, levels and value of each leaf value), sorted:
// a multiset that does not depend on row order, row groups or encodings.
func ParquetGoRows(tb testing.TB, paths ...string) []string {
	tb.Helper()
	var out []string
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			tb.Fatal(err)
		}
		st, _ := f.Stat()
		pf, err := parquet.OpenFile(f, st.Size())
		if err != nil {
			f.Close()
			tb.Fatalf("parquet-go open %s: %v", p, err)
		}
		for _, rg := range pf.RowGroups() {
			EachRow(tb, rg, func(r parquet.Row) { out = append(out, RowString(r)) })
		}
		f.Close()
	}
	sort.Strings(out)
	return out
}

// RowString formats a parquet-go row canonically.
func RowString(r parquet.Row) string {
	var b strings.Builder
	for _, v := range r {
		fmt.Fprintf(&b, "%d/%d/%d=", v.Column(), v.RepetitionLevel(), v.DefinitionLevel())
		if v.IsNull() {
			b.WriteString("null")
		} else {
			fmt.Fprintf(&b, "%v", v)
		}
		b.WriteByte('|')
	}
	return b.String()
}

// Files returns the regular files directly under dir (any name: debris
// such as *.tmp counts), sorted; none when dir does not exist.
func Files(tb testing.TB, dir string) []string {
	tb.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		tb.Fatal(err)
	}
	var m []string
	for _, e := range ents {
		if e.Type().IsRegular() {
			m = append(m, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(m)
	return m
}

// ReadTree returns every file under an output folder but its run report
// (_report.json, which records the process's own timings and memory), by
// path relative to dir.
func ReadTree(tb testing.TB, dir string) map[string][]byte {
	tb.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "_report.json" {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		files[rel] = data
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return files
}

// SameTree fails tb unless got holds the files of want, byte for byte
// (ReadTree's maps); what names the comparison.
func SameTree(tb testing.TB, what string, want, got map[string][]byte) {
	tb.Helper()
	if len(got) != len(want) {
		tb.Fatalf("%s: %d files (%v), want %d (%v)", what, len(got), SortedKeys(got), len(want), SortedKeys(want))
	}
	for name, b := range want {
		if !bytes.Equal(got[name], b) {
			tb.Fatalf("%s: %s differs", what, name)
		}
	}
}

// SortedKeys returns m's keys, sorted.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// DuckDB runs SQL statements with the npm @duckdb/node-api package (the
// project's tools/node) and returns the last statement's rows and the bytes
// read for each statement. Without node or the package it fails when
// RELAYOUT_REQUIRE_PEERS=1 (as `make test` sets) and skips otherwise.
func DuckDB(tb testing.TB, sql ...string) (rows []map[string]any, readBytes []int64) {
	tb.Helper()
	script := filepath.Join(Root(), "tools", "node", "duckdb.mjs")
	if _, err := exec.LookPath("node"); err != nil || !exists(filepath.Join(Root(), "tools", "node", "node_modules", "@duckdb", "node-api")) {
		if os.Getenv("RELAYOUT_REQUIRE_PEERS") == "1" {
			tb.Fatalf("DuckDB peer missing: run `make deps`")
		}
		tb.Skip("DuckDB peer not installed (run `make deps`)")
	}
	cmd := exec.Command("node", append([]string{script, "--threads", "2"}, sql...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("duckdb: %v: %s", err, stderr.String())
	}
	var res struct {
		Rows      []map[string]any `json:"rows"`
		ReadBytes []int64          `json:"read_bytes"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		tb.Fatalf("duckdb output: %v: %s", err, out)
	}
	return res.Rows, res.ReadBytes
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// EachRow calls fn for every row of the row group, read with parquet-go.
func EachRow(tb testing.TB, rg parquet.RowGroup, fn func(parquet.Row)) {
	tb.Helper()
	rows := rg.Rows()
	defer rows.Close()
	buf := make([]parquet.Row, 256)
	for {
		n, err := rows.ReadRows(buf)
		for _, r := range buf[:n] {
			fn(r)
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			tb.Fatalf("parquet-go read: %v", err)
		}
	}
}

// Python runs a script from the project's python/ folder with Debian's
// /usr/bin/python3 (which has python3-numpy) and returns its stdout. Without
// NumPy it fails when RELAYOUT_REQUIRE_PEERS=1 (as `make test` sets) and
// skips otherwise.
func Python(tb testing.TB, args ...string) []byte {
	tb.Helper()
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import numpy").Run(); err != nil {
		if os.Getenv("RELAYOUT_REQUIRE_PEERS") == "1" {
			tb.Fatalf("python3-numpy missing at %s: run `make deps`", py)
		}
		tb.Skipf("python3-numpy not installed at %s (run `make deps`)", py)
	}
	cmd := exec.Command(py, args...)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(Root(), "python"), "PYTHONDONTWRITEBYTECODE=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("python %v: %v\n%s", args, err, stderr.String())
	}
	return out
}

// WriteNpy writes a little-endian array as a NumPy .npy file (format 1.0).
func WriteNpy(tb testing.TB, path, descr string, shape []int, data []byte) {
	tb.Helper()
	var sh strings.Builder
	sh.WriteByte('(')
	for _, d := range shape {
		fmt.Fprintf(&sh, "%d,", d)
	}
	sh.WriteByte(')')
	h := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, sh.String())
	for (10+len(h)+1)%64 != 0 {
		h += " "
	}
	h += "\n"
	var b bytes.Buffer
	b.WriteString("\x93NUMPY\x01\x00")
	b.WriteByte(byte(len(h)))
	b.WriteByte(byte(len(h) >> 8))
	b.WriteString(h)
	b.Write(data)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// BucketTree reads every object under prefix (keys relative to it), except
// run reports, which hold timings.
func BucketTree(tb testing.TB, b *blob.Bucket, prefix string) map[string][]byte {
	tb.Helper()
	out := map[string][]byte{}
	it := b.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(context.Background())
		if err == io.EOF {
			break
		}
		if err != nil {
			tb.Fatal(err)
		}
		if strings.HasSuffix(obj.Key, "_report.json") {
			continue
		}
		data, err := b.ReadAll(context.Background(), obj.Key)
		if err != nil {
			tb.Fatal(err)
		}
		out[strings.TrimPrefix(obj.Key, prefix)] = data
	}
	return out
}

// Int64Batch is a batch of one int64 column, "x", over vals (little
// endian, len(vals)/8 values) without copying them: a large batch whose
// bytes the test chooses (random, or zeros never touched, which cost no
// memory until read).
func Int64Batch(vals []byte) arrow.RecordBatch {
	n := len(vals) / 8
	d := array.NewData(arrow.PrimitiveTypes.Int64, n, []*memory.Buffer{nil, memory.NewBufferBytes(vals[:n*8])}, nil, 0, 0)
	defer d.Release()
	a := array.MakeFromData(d)
	defer a.Release()
	sc := arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}}, nil)
	return array.NewRecordBatch(sc, []arrow.Array{a}, int64(n))
}

// WriteArrow writes rec as one Parquet file with arrow-go's writer (props
// set row group length, statistics and so on) and releases rec.
func WriteArrow(t testing.TB, path string, rec arrow.RecordBatch, props ...apq.WriterProperty) {
	t.Helper()
	defer rec.Release()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pqarrow.NewFileWriter(rec.Schema(), f, apq.NewWriterProperties(props...), pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// Trials scales a probe's trial count by $RELAYOUT_PROBE_SCALE (default 1):
// `make test` runs each probe briefly, `make probe` many times over.
func Trials(n int) int {
	if s := os.Getenv("RELAYOUT_PROBE_SCALE"); s != "" {
		var k int
		if _, err := fmt.Sscan(s, &k); err == nil && k > 0 {
			return n * k
		}
	}
	return n
}

// JSONEdit is a JSON file with one change (JSONEdits), or, Baseline, as
// written.
type JSONEdit struct {
	File, What string
	Data       []byte
	// Baseline: the file as written, on which every step must succeed
	// (else a sweep over its edits tests nothing).
	Baseline bool
}

// JSONEdits lists the edits of every value in doc (a decoded JSON
// document), at path; array members beyond the first and last are left:
// they repeat the first's shape.
func JSONEdits(doc any, path string) []JSONEdit {
	var out []JSONEdit
	root := doc
	var walk func(v any, path string, set func(any))
	add := func(what string, set func(any), val any, restore any) {
		set(val)
		data, err := json.Marshal(root)
		set(restore)
		if err == nil {
			out = append(out, JSONEdit{What: what, Data: data})
		}
	}
	walk = func(v any, path string, set func(any)) {
		switch x := v.(type) {
		case float64:
			for _, n := range []float64{-1, 0, x + 1, 1 << 40} {
				if n != x {
					add(fmt.Sprintf("%s = %v", path, n), set, n, x)
				}
			}
		case string:
			if x != "" {
				add(path+` = ""`, set, "", x)
			}
		case bool:
			add(fmt.Sprintf("%s = %v", path, !x), set, !x, x)
		case []any:
			if len(x) > 0 {
				add(path+" = []", set, []any{}, x)
				add(path+" without its first", set, x[1:], x)
				add(path+" without its last", set, x[:len(x)-1], x)
				add(path+" with its first twice", set, append([]any{x[0]}, x...), x)
			}
			for i := range x {
				if i != 0 && i != len(x)-1 {
					continue
				}
				i := i
				walk(x[i], fmt.Sprintf("%s[%d]", path, i), func(nv any) { x[i] = nv })
			}
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				k, old := k, x[k]
				p := path + "." + k
				out = append(out, func() JSONEdit {
					delete(x, k)
					data, _ := json.Marshal(root)
					x[k] = old
					return JSONEdit{What: p + " deleted", Data: data}
				}())
				if old != nil {
					add(p+" = null", func(nv any) { x[k] = nv }, nil, old)
				}
				walk(old, p, func(nv any) { x[k] = nv })
			}
		}
	}
	walk(doc, path, func(any) {})
	return out
}

// LinkTree makes dst a copy of folder src whose files are hard links to
// src's (for readers: a file written to dst replaces its link).
func LinkTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, de os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if de.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		return os.Link(p, filepath.Join(dst, rel))
	})
}

// FileEdits reads the JSON file name under dir and returns its edits
// (JSONEdits) and the file as written (Baseline), each with File set and
// its bytes passed through seal when seal is not nil (a sealed manifest
// sealed again, so that the edits reach the checks behind its checksum).
func FileEdits(t testing.TB, dir, name string, seal func([]byte) []byte) []JSONEdit {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	edits := JSONEdits(doc, name)
	if len(edits) < 20 {
		t.Fatalf("only %d edits of %s: the sweep lost its reach", len(edits), name)
	}
	edits = append(edits, JSONEdit{What: name + " as written", Data: data, Baseline: true})
	for i := range edits {
		edits[i].File = name
		if seal != nil && !edits[i].Baseline {
			edits[i].Data = seal(edits[i].Data)
		}
	}
	return edits
}

// SweepEdits runs each edit through try, workers at a time, and fails t
// with what try returned for each that went wrong ("" when it went right),
// the first 20 of them, sorted.
func SweepEdits(t *testing.T, edits []JSONEdit, workers int, try func(JSONEdit) string) {
	t.Helper()
	var mu sync.Mutex
	var failed []string
	work := make(chan JSONEdit)
	var wg sync.WaitGroup
	for w := 0; w < max(workers, 1); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range work {
				if os.Getenv("RELAYOUT_SWEEP_TRACE") != "" {
					fmt.Fprintln(os.Stderr, "edit:", e.File, e.What)
				}
				if msg := try(e); msg != "" {
					mu.Lock()
					failed = append(failed, msg)
					mu.Unlock()
				}
			}
		}()
	}
	for _, e := range edits {
		work <- e
	}
	close(work)
	wg.Wait()
	sort.Strings(failed)
	for i, f := range failed {
		if i == 20 {
			t.Errorf("… and %d more", len(failed)-20)
			break
		}
		t.Error(f)
	}
}
