package loader_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/parquet-go/parquet-go"

	"github.com/relayout/relayout/dataset"
	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/loader"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/pipeline"
)

const flatSpec = `
tensors:
  dense:
    columns: ["user_f*", "item_f*"]
    dtype: float32
  country: {buckets: 1000}
  item_price: {dtype: float16}
  model_score: {dtype: bfloat16}
  click: {fill: -1}
  label: {column: purchase}
drop: ["session_id"]
`

const packedSpec = `
tensors:
  dense_user: {columns: ["user_f*"], dtype: float32}
  dense_item: {columns: ["item_f*"], dtype: float32}
  country: {buckets: 1000}
  item_price: {dtype: float16}
  model_score: {dtype: bfloat16}
  click: {fill: -1}
  label: {column: purchase}
drop: ["session_id"]
`

func writeSpec(t *testing.T, s string) string {
	p := filepath.Join(t.TempDir(), "tensors.yaml")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// readOutput reads an output's Parquet rows in order with parquet-go.
func readOutput(t *testing.T, out string) []gen.Impression {
	t.Helper()
	var rows []gen.Impression
	for _, p := range testutil.Files(t, filepath.Join(out, "parquet")) {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		r := parquet.NewGenericReader[gen.Impression](f)
		buf := make([]gen.Impression, int(r.NumRows()))
		n, err := r.Read(buf)
		if n != len(buf) {
			t.Fatalf("%s: read %d of %d rows: %v", p, n, len(buf), err)
		}
		rows = append(rows, buf...)
		r.Close()
		f.Close()
	}
	return rows
}

// expected collects expected tensors as .npy files plus index.json.
type expected struct {
	t     *testing.T
	dir   string
	index map[string]map[string]string
}

func newExpected(t *testing.T) *expected {
	return &expected{t: t, dir: t.TempDir(), index: map[string]map[string]string{}}
}

func (e *expected) add(name, dtype, descr string, shape []int, data []byte) {
	file := fmt.Sprintf("t%03d.npy", len(e.index))
	testutil.WriteNpy(e.t, filepath.Join(e.dir, file), descr, shape, data)
	e.index[name] = map[string]string{"file": file, "dtype": dtype}
}

func (e *expected) ints(name, dtype string, v []int64, shape ...int) {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
	}
	e.add(name, dtype, "<i8", append([]int{len(v) / max(prod(shape), 1)}, shape...), b)
}

func (e *expected) floats(name, dtype string, v []float64, shape ...int) {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
	}
	e.add(name, dtype, "<f8", append([]int{len(v) / max(prod(shape), 1)}, shape...), b)
}

func (e *expected) write() {
	data, _ := json.Marshal(e.index)
	if err := os.WriteFile(filepath.Join(e.dir, "index.json"), data, 0o644); err != nil {
		e.t.Fatal(err)
	}
}

func prod(s []int) int {
	n := 1
	for _, x := range s {
		n *= x
	}
	return n
}

func hashID(s string) int64 { return int64(xxhash.Sum64String(s)) }

// addColumns adds the expected tensors of rows for the columns at one level
// (query-level columns when query is true, else item-level; flat adds both).
func addColumns(e *expected, rows []gen.Impression, prefix string, query, item bool) {
	col := func(f func(r *gen.Impression) int64) []int64 {
		out := make([]int64, len(rows))
		for i := range rows {
			out[i] = f(&rows[i])
		}
		return out
	}
	fcol := func(f func(r *gen.Impression) float64) []float64 {
		out := make([]float64, len(rows))
		for i := range rows {
			out[i] = f(&rows[i])
		}
		return out
	}
	if query {
		e.ints(prefix+"event_time", "I64", col(func(r *gen.Impression) int64 { return r.EventTime.UnixMilli() }))
		e.ints(prefix+"country", "I64", col(func(r *gen.Impression) int64 { return int64(xxhash.Sum64String(r.Country) % 1000) }))
		e.ints(prefix+"date", "I32", col(func(r *gen.Impression) int64 { return int64(r.Date) }))
		e.ints(prefix+"query_id", "I64", col(func(r *gen.Impression) int64 { return r.QueryID }))
		e.ints(prefix+"user_id", "I64", col(func(r *gen.Impression) int64 { return r.UserID }))
		e.ints(prefix+"device", "I64", col(func(r *gen.Impression) int64 { return hashID(r.Device) }))
		e.ints(prefix+"os", "I64", col(func(r *gen.Impression) int64 { return hashID(r.OS) }))
		e.ints(prefix+"app_version", "I64", col(func(r *gen.Impression) int64 { return hashID(r.AppVersion) }))
		e.ints(prefix+"user_age", "I32", col(func(r *gen.Impression) int64 { return int64(r.UserAge) }))
		e.ints(prefix+"user_gender", "I64", col(func(r *gen.Impression) int64 {
			if r.UserGender == nil {
				return 0
			}
			return hashID(*r.UserGender)
		}))
		e.ints(prefix+"user_gender.valid", "U8", col(func(r *gen.Impression) int64 { return b2i(r.UserGender != nil) }))
		var emb []float64
		for i := range rows {
			if len(rows[i].QueryEmb) != 8 {
				e.t.Fatalf("row %d: query_embedding has %d values", i, len(rows[i].QueryEmb))
			}
			for _, v := range rows[i].QueryEmb {
				emb = append(emb, float64(v))
			}
		}
		e.floats(prefix+"query_embedding", "F32", emb, 8)
		e.ints(prefix+"query_text", "I64", col(func(r *gen.Impression) int64 { return hashID(r.QueryText) }))
		e.ints(prefix+"experiment_id", "I32", col(func(r *gen.Impression) int64 { return int64(r.Experiment) }))
	}
	if item {
		e.ints(prefix+"item_id", "I64", col(func(r *gen.Impression) int64 { return r.ItemID }))
		e.ints(prefix+"position", "I32", col(func(r *gen.Impression) int64 { return int64(r.Position) }))
		e.ints(prefix+"item_category", "I64", col(func(r *gen.Impression) int64 { return hashID(r.ItemCat) }))
		e.floats(prefix+"item_price", "F16", fcol(func(r *gen.Impression) float64 { return r.ItemPrice }))
		var tags, offs []int64
		offs = append(offs, 0)
		for i := range rows {
			for _, s := range rows[i].ItemTags {
				tags = append(tags, hashID(s))
			}
			offs = append(offs, int64(len(tags)))
		}
		e.ints(prefix+"item_tags.values", "I64", tags)
		e.ints(prefix+"item_tags.offsets", "I64", offs)
		e.floats(prefix+"model_score", "BF16", fcol(func(r *gen.Impression) float64 { return r.Score }))
		e.ints(prefix+"click", "I32", col(func(r *gen.Impression) int64 {
			if r.Click == nil {
				return -1
			}
			return int64(*r.Click)
		}))
		e.ints(prefix+"click.valid", "U8", col(func(r *gen.Impression) int64 { return b2i(r.Click != nil) }))
		e.ints(prefix+"dwell_ms", "I64", col(func(r *gen.Impression) int64 {
			if r.DwellMs == nil {
				return 0
			}
			return *r.DwellMs
		}))
		e.ints(prefix+"dwell_ms.valid", "U8", col(func(r *gen.Impression) int64 { return b2i(r.DwellMs != nil) }))
		e.ints(prefix+"label", "U8", col(func(r *gen.Impression) int64 { return b2i(r.Purchase) }))
		e.floats(prefix+"sample_weight", "F32", fcol(func(r *gen.Impression) float64 { return float64(r.Weight) }))
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func floatMatrix(rows []gen.Impression, user, item bool) []float64 {
	var out []float64
	for i := range rows {
		r := &rows[i]
		if user {
			out = append(out, float64(r.UserF0), float64(r.UserF1), float64(r.UserF2), float64(r.UserF3), float64(r.UserF4), float64(r.UserF5), float64(r.UserF6), float64(r.UserF7))
		}
		if item {
			out = append(out, float64(r.ItemF0), float64(r.ItemF1), float64(r.ItemF2), float64(r.ItemF3), float64(r.ItemF4), float64(r.ItemF5), float64(r.ItemF6), float64(r.ItemF7))
		}
	}
	return out
}

func run(t *testing.T, opts pipeline.RunOptions) string {
	t.Helper()
	if opts.Output == "" {
		opts.Output = filepath.Join(t.TempDir(), "out")
	}
	if _, err := pipeline.Run(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	return opts.Output
}

// TestShardValuesFlat: every tensor value of a flat output equals its source
// value after the documented transform. The source is the output Parquet read
// with parquet-go (its content equals the input's, as every run checks); the
// shards are read with NumPy through python/relayout_loader.py, which also
// parses the safetensors headers itself and checks checksums and alignment.
func TestShardValuesFlat(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 30_000, Files: 3, Seed: 11})
	out := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country", "date"},
		TensorSpec: writeSpec(t, flatSpec), ShardBytes: 1 << 20})
	rows := readOutput(t, out)
	if len(rows) != 30_000 {
		t.Fatalf("read %d rows", len(rows))
	}
	e := newExpected(t)
	addColumns(e, rows, "", true, true)
	e.floats("dense", "F32", floatMatrix(rows, true, true), 16)
	e.write()
	sum, res := checkValues(t, out, e)
	if sum.Rows != 30_000 || len(sum.Checked) != len(e.index) {
		t.Fatalf("checked %d tensors over %d rows: %s", len(sum.Checked), sum.Rows, res)
	}
	m := manifestOf(t, out)
	if m.Tensors.Totals.Shards < 4 {
		t.Fatalf("want several shards at --shard-bytes 1MiB, got %d", m.Tensors.Totals.Shards)
	}
}

// TestShardValuesPacked: the same for a packed output: query.* once per
// query, item.* once per item, query.item_offsets between them. The flat run
// sorted by query_id has the packed order's rows.
func TestShardValuesPacked(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 30_000, Files: 3, Seed: 12})
	flat := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country", "date"}, SortKeys: []string{"query_id"}})
	out := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country", "date"}, QueryKey: []string{"query_id"},
		QueryColumns: gen.QueryLevelColumns, TensorSpec: writeSpec(t, packedSpec), ShardBytes: 1 << 20})
	rows := readOutput(t, flat)
	var queries []gen.Impression
	offs := []int64{0}
	for i := range rows {
		if i == 0 || rows[i].QueryID != rows[i-1].QueryID {
			queries = append(queries, rows[i])
			if i > 0 {
				offs = append(offs, int64(i))
			}
		}
	}
	offs = append(offs, int64(len(rows)))
	e := newExpected(t)
	addColumns(e, queries, "query.", true, false)
	addColumns(e, rows, "item.", false, true)
	e.ints("query.item_offsets", "I64", offs)
	e.floats("query.dense_user", "F32", floatMatrix(queries, true, false), 8)
	e.floats("item.dense_item", "F32", floatMatrix(rows, false, true), 8)
	e.write()
	sum, res := checkValues(t, out, e)
	if sum.Rows != int64(len(queries)) || len(sum.Checked) != len(e.index) {
		t.Fatalf("checked %d tensors over %d queries (want %d): %s", len(sum.Checked), sum.Rows, len(queries), res)
	}
	m := manifestOf(t, out)
	if m.Tensors.Sample != "query" || m.Tensors.Totals.Items != 30_000 || m.Tensors.Totals.Shards < 2 {
		t.Fatalf("tensors totals %+v, sample %s", m.Tensors.Totals, m.Tensors.Sample)
	}
	// Shards hold whole queries: per-shard item counts add up.
	var items int64
	for _, s := range m.Tensors.Shards {
		if s.FirstItem != items {
			t.Fatalf("%s: first_item %d, want %d", s.Path, s.FirstItem, items)
		}
		items += s.Items
	}
}

// checkValues runs python/tests/check_values.py on out against e and
// returns its summary (and raw output, for messages).
func checkValues(t *testing.T, out string, e *expected) (sum struct {
	Rows    int64
	Checked []string
}, res []byte) {
	t.Helper()
	res = testutil.Python(t, filepath.Join(testutil.Root(), "python", "tests", "check_values.py"), out, e.dir)
	if err := json.Unmarshal(res, &sum); err != nil {
		t.Fatalf("%v: %s", err, res)
	}
	return sum, res
}

func manifestOf(t *testing.T, out string) *manifests.Manifest {
	t.Helper()
	d, err := loader.Open(out, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d.Manifest
}

// TestGoAndPythonAgreeOnOrder: the Go loader and python/relayout_loader.py,
// two implementations of relayout-order-v1, assign the same batches.
func TestGoAndPythonAgreeOnOrder(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 20_000, Files: 2, Seed: 3})
	out := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, Tensors: true, ShardBytes: 512 << 10, BlockSamples: 1000})
	type cfg struct {
		Batch       int64  `json:"batch"`
		Seed        uint64 `json:"seed"`
		Epoch       int    `json:"epoch"`
		Shuffle     bool   `json:"shuffle"`
		Rank        int    `json:"rank"`
		World       int    `json:"world"`
		Worker      int    `json:"worker"`
		NumWorkers  int    `json:"num_workers"`
		SamplesSeen int64  `json:"samples_seen"`
		DropLast    bool   `json:"drop_last"`
		Slices      []int  `json:"slices,omitempty"`
	}
	cfgs := []cfg{
		{Batch: 512, Seed: 1, Shuffle: true, World: 1, NumWorkers: 1},
		{Batch: 300, Seed: 1 << 63, Epoch: 5, Shuffle: true, Rank: 1, World: 3, Worker: 1, NumWorkers: 2},
		{Batch: 4096, Seed: 99, Epoch: 1, Shuffle: false, Rank: 0, World: 2, Worker: 0, NumWorkers: 1, DropLast: true},
		{Batch: 100, Seed: 7, Epoch: 2, Shuffle: true, Rank: 2, World: 4, Worker: 2, NumWorkers: 3, SamplesSeen: 1234},
		{Batch: 64, Seed: 7, Shuffle: true, World: 1, NumWorkers: 1, Slices: []int{0, 3, 5}},
	}
	data, _ := json.Marshal(cfgs)
	res := testutil.Python(t, filepath.Join(testutil.Root(), "python", "tests", "order.py"), out, string(data))
	var py [][][][2]int64
	if err := json.Unmarshal(res, &py); err != nil {
		t.Fatalf("%v: %s", err, res)
	}
	for i, c := range cfgs {
		d, err := loader.Open(out, loader.Options{Slices: c.Slices})
		if err != nil {
			t.Fatal(err)
		}
		bs, err := d.Batches(loader.Assignment{Seed: c.Seed, Epoch: c.Epoch, Shuffle: c.Shuffle, Rank: c.Rank, World: c.World,
			Worker: c.Worker, NumWorkers: c.NumWorkers, SamplesSeen: c.SamplesSeen, DropLast: c.DropLast}, c.Batch)
		d.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(bs) == 0 {
			t.Fatalf("config %d: no batches", i)
		}
		var goR [][][2]int64
		for _, b := range bs {
			var rs [][2]int64
			for _, r := range b {
				rs = append(rs, [2]int64{r.Start, r.End})
			}
			goR = append(goR, rs)
		}
		if fmt.Sprint(goR) != fmt.Sprint(py[i]) {
			t.Fatalf("config %d %+v: Go and Python batches differ\nGo: %v\nPy: %v", i, c, head(goR), head(py[i]))
		}
	}
}

func head[T any](s []T) []T { return s[:min(len(s), 4)] }

// TestGoLoaderBatches reads a packed output through the Go loader with
// shuffling, 2 ranks and 3 workers, and checks the content: every item
// exactly once, each batch's item offsets rebased and consistent with its
// item tensors, ragged values cut by their offsets.
func TestGoLoaderBatches(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 20_000, Files: 2, Seed: 4})
	out := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, QueryKey: []string{"query_id"},
		Tensors: true, ShardBytes: 256 << 10, BlockSamples: 100})
	var items []int64
	var queries int64
	for rank := 0; rank < 2; rank++ {
		for w := 0; w < 3; w++ {
			d, err := loader.Open(out, loader.Options{VerifyChecksums: true})
			if err != nil {
				t.Fatal(err)
			}
			bs, err := d.Batches(loader.Assignment{Seed: 5, Shuffle: true, Rank: rank, World: 2, Worker: w, NumWorkers: 3}, 64)
			if err != nil {
				t.Fatal(err)
			}
			for _, rs := range bs {
				b, err := d.Batch(rs)
				if err != nil {
					t.Fatal(err)
				}
				io, _ := b.Get("query.item_offsets")
				offs := i64(io.Data)
				ids, _ := b.Get("item.item_id")
				tags, _ := b.Get("item.item_tags.values")
				toffs, _ := b.Get("item.item_tags.offsets")
				emb, _ := b.Get("query.query_embedding")
				if offs[0] != 0 || int64(len(offs)) != b.Samples+1 || offs[len(offs)-1] != int64(ids.Shape[0]) {
					t.Fatalf("item offsets %v... do not span the batch's %d items", head(offs), ids.Shape[0])
				}
				to := i64(toffs.Data)
				if int64(len(to)) != int64(ids.Shape[0])+1 || to[len(to)-1] != int64(tags.Shape[0]) {
					t.Fatalf("tag offsets do not span the %d tag values", tags.Shape[0])
				}
				if emb.Shape[0] != int(b.Samples) || emb.Shape[1] != 8 || len(emb.Data) != int(b.Samples)*8*4 {
					t.Fatalf("query_embedding shape %v for %d queries", emb.Shape, b.Samples)
				}
				items = append(items, i64(ids.Data)...)
				queries += b.Samples
			}
			d.Close()
		}
	}
	rows := readOutput(t, run(t, pipeline.RunOptions{Inputs: []string{in}}))
	var want []int64
	for _, r := range rows {
		want = append(want, r.ItemID)
	}
	slices.Sort(want)
	slices.Sort(items)
	if !slices.Equal(items, want) {
		t.Fatalf("read %d items, want the input's %d item ids exactly once", len(items), len(want))
	}
	if m := manifestOf(t, out); queries != m.Packing.Queries {
		t.Fatalf("read %d queries, the output has %d", queries, m.Packing.Queries)
	}
}

func i64(b []byte) []int64 {
	out := make([]int64, len(b)/8)
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return out
}

// TestTensorConfigErrors: specs that cannot apply fail with a usage error
// (exit 2) naming the tensor and column, before anything is committed.
func TestTensorConfigErrors(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 2000, Files: 1, Seed: 5})
	cases := []struct{ spec, want string }{
		{"tensors:\n  x: {column: nope}\n", `tensor "x": the input has no column "nope"`},
		{"tensors:\n  g: {columns: [\"nothing*\"]}\n", `no column matches`},
		{"tensors:\n  g: {columns: [\"user_f0\", \"country\"]}\n", `column "country" is utf8; only numeric and bool columns can be grouped`},
		{"tensors:\n  country: {dtype: float32}\n", `ids of utf8 column "country" need dtype int64`},
		{"tensors:\n  item_tags: {shape: [3]}\n", `column "item_tags" has lists of`},
		{"tensors:\n  user_age: {buckets: 10}\n", `buckets apply to string and binary columns`},
		{"tensors:\n  user_age: {dtype: float8}\n", `unknown dtype "float8"`},
		{"tensors:\n  user_age: {colour: red}\n", `unknown setting "colour"`},
		{"drop: [\"*\"]\n", `no column is left`},
		{"tensors:\n  item_id: {column: user_id}\n", `two tensors are named "item_id"`},
	}
	for _, c := range cases {
		_, err := pipeline.Run(context.Background(), pipeline.RunOptions{Inputs: []string{in}, Output: filepath.Join(t.TempDir(), "out"),
			TensorSpec: writeSpec(t, c.spec)})
		if err == nil || errs.ClassOf(err) != errs.Usage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("spec %q: got %v (class %v), want a usage error containing %q", c.spec, err, errs.ClassOf(err), c.want)
		}
	}
	// Packed: a group across levels.
	_, err := pipeline.Run(context.Background(), pipeline.RunOptions{Inputs: []string{in}, Output: filepath.Join(t.TempDir(), "out"),
		QueryKey: []string{"query_id"}, QueryColumns: gen.QueryLevelColumns, TensorSpec: writeSpec(t, "tensors:\n  d: {columns: [\"user_f*\", \"item_f*\"]}\n")})
	if err == nil || errs.ClassOf(err) != errs.Usage || !strings.Contains(err.Error(), "cannot share a tensor") {
		t.Errorf("cross-level group: got %v", err)
	}
}

// TestPythonUnitTests runs python/tests/test_*.py with Debian's NumPy.
func TestPythonUnitTests(t *testing.T) {
	testutil.Python(t, "-m", "unittest", "discover", "-s", filepath.Join(testutil.Root(), "python", "tests"), "-p", "test_*.py")
}

// TestWindowOrderGoAndPython: the Go loader and python/relayout_loader.py,
// two implementations of relayout-order-v2, yield the same samples in the
// same batches with the same bytes, flat and packed, with several readers,
// selections, weights and a resume.
func TestWindowOrderGoAndPython(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 20_000, Files: 2, Seed: 3})
	flat := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, Tensors: true, ShardBytes: 512 << 10, BlockSamples: 500})
	packed := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, QueryKey: []string{"query_id"},
		Tensors: true, ShardBytes: 256 << 10, BlockSamples: 100})
	cfgs := []orderCfg{
		{Batch: 512, Seed: 1, World: 1, NumWorkers: 1},
		{Batch: 300, Seed: 1 << 63, Epoch: 5, Rank: 1, World: 2, Worker: 1, NumWorkers: 2, WindowBytes: 1 << 20},
		{Batch: 128, Seed: 9, Epoch: 1, Rank: 2, World: 4, NumWorkers: 1, Streams: 8, SamplesSeen: 1280, DropLast: true, WindowBytes: 256 << 10},
		{Batch: 64, Seed: 7, World: 1, NumWorkers: 1, Slices: []int{0, 3, 5}, WindowBytes: 64 << 10},
		{Batch: 100, Seed: 7, World: 1, NumWorkers: 1, Weights: map[string]map[string]float64{"country": {"C01": 5, "C02": 0.25}}, SliceW: map[int]float64{4: 0}},
		{Batch: 200, Seed: 5, Rank: 1, World: 2, NumWorkers: 1, PieceSamples: 64},
		// One shard file open for pread, the others read through the maps.
		{Batch: 256, Seed: 2, World: 1, NumWorkers: 1, WindowBytes: 1 << 20, MaxOpenFiles: 1},
	}
	for _, out := range []string{flat, packed} {
		goAndPython(t, out, cfgs)
	}
}

// orderCfg is one reader configuration python/tests/order2.py reads too.
type orderCfg struct {
	Batch        int64                         `json:"batch"`
	Seed         uint64                        `json:"seed"`
	Epoch        int                           `json:"epoch"`
	Rank         int                           `json:"rank"`
	World        int                           `json:"world"`
	Worker       int                           `json:"worker"`
	NumWorkers   int                           `json:"num_workers"`
	SamplesSeen  int64                         `json:"samples_seen"`
	DropLast     bool                          `json:"drop_last"`
	Streams      int                           `json:"streams,omitempty"`
	PieceSamples int64                         `json:"piece_samples,omitempty"`
	WindowBytes  int64                         `json:"window_bytes,omitempty"`
	Slices       []int                         `json:"slices,omitempty"`
	MaxOpenFiles int                           `json:"max_open_files,omitempty"` // Python only
	Weights      map[string]map[string]float64 `json:"-"`
	SliceW       map[int]float64               `json:"-"`
	W            map[string]any                `json:"weights,omitempty"`
}

// goAndPython reads out (an output or a dataset root) in the window order
// with every config, in Go and with python/relayout_loader.py, and
// requires the same batches: sample indices and every tensor's bytes.
func goAndPython(t *testing.T, out string, cfgs []orderCfg) {
	t.Helper()
	for i := range cfgs {
		if cfgs[i].Weights != nil || cfgs[i].SliceW != nil {
			cfgs[i].W = map[string]any{}
			for k, v := range cfgs[i].Weights {
				cfgs[i].W[k] = v
			}
			for k, v := range cfgs[i].SliceW {
				cfgs[i].W[fmt.Sprint(k)] = v
			}
		}
	}
	data, _ := json.Marshal(cfgs)
	type batch struct {
		Index []int64           `json:"index"`
		Hash  map[string]string `json:"hash"`
	}
	{
		res := testutil.Python(t, filepath.Join(testutil.Root(), "python", "tests", "order2.py"), out, string(data))
		var py [][]batch
		if err := json.Unmarshal(res, &py); err != nil {
			t.Fatalf("%v: %s", err, res)
		}
		for i, c := range cfgs {
			d, err := loader.Open(out, loader.Options{Slices: c.Slices, Weights: c.SliceW, KeyWeights: c.Weights})
			if err != nil {
				t.Fatal(err)
			}
			r, err := d.NewReader(loader.ReadOptions{Assignment: loader.Assignment{Seed: c.Seed, Epoch: c.Epoch, Shuffle: true, Rank: c.Rank, World: c.World,
				Worker: c.Worker, NumWorkers: c.NumWorkers, SamplesSeen: c.SamplesSeen, DropLast: c.DropLast},
				Batch: c.Batch, Streams: c.Streams, WindowBytes: c.WindowBytes, PieceSamples: c.PieceSamples, Index: true})
			if err != nil {
				t.Fatal(err)
			}
			var got []batch
			for {
				b, err := r.Next()
				if err != nil {
					t.Fatal(err)
				}
				if b == nil {
					break
				}
				gb := batch{Hash: map[string]string{}}
				for _, x := range b.Tensors {
					if x.Name == loader.IndexTensor {
						gb.Index = i64(x.Data)
						continue
					}
					gb.Hash[x.Name] = fmt.Sprintf("%016x", xxhash.Sum64(x.Data))
				}
				got = append(got, gb)
			}
			d.Close()
			if len(got) == 0 {
				t.Fatalf("%s config %d: no batches", filepath.Base(filepath.Dir(out)), i)
			}
			if len(got) != len(py[i]) {
				t.Fatalf("config %d: Go %d batches, Python %d", i, len(got), len(py[i]))
			}
			for k := range got {
				if !slices.Equal(got[k].Index, py[i][k].Index) {
					t.Fatalf("config %d batch %d: Go samples %v..., Python %v...", i, k, head(got[k].Index), head(py[i][k].Index))
				}
				if fmt.Sprint(got[k].Hash) != fmt.Sprint(py[i][k].Hash) {
					t.Fatalf("config %d batch %d: the tensors' bytes differ\nGo: %v\nPy: %v", i, k, got[k].Hash, py[i][k].Hash)
				}
			}
		}
	}
}

// readAll reads every batch of a reader.
func readAll(t *testing.T, d *loader.Dataset, o loader.ReadOptions) []*loader.Batch {
	t.Helper()
	r, err := d.NewReader(o)
	if err != nil {
		t.Fatal(err)
	}
	var out []*loader.Batch
	for {
		b, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if b == nil {
			return out
		}
		out = append(out, b)
	}
}

// TestWindowBatchesHoldTheirSamples: every tensor of a window-order batch
// equals the same samples read one by one through the block reader (views
// of the shards), packed (items, ragged item lists) and flat.
func TestWindowBatchesHoldTheirSamples(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 6_000, Files: 2, Seed: 8})
	for _, out := range []string{
		run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, Tensors: true, ShardBytes: 128 << 10, BlockSamples: 200}),
		run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, QueryKey: []string{"query_id"}, Tensors: true, ShardBytes: 64 << 10, BlockSamples: 50}),
	} {
		d, err := loader.Open(out, loader.Options{})
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		for _, b := range readAll(t, d, loader.ReadOptions{Assignment: loader.Assignment{Seed: 3, Shuffle: true, World: 2, Rank: 1}, Batch: 37, WindowBytes: 200 << 10, Index: true}) {
			ix, _ := b.Get(loader.IndexTensor)
			var rs []loader.Range
			for _, s := range i64(ix.Data) {
				rs = append(rs, loader.Range{Start: s, End: s + 1})
			}
			want, err := d.Batch(rs)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range want.Tensors {
				g, ok := b.Get(w.Name)
				if !ok || !slices.Equal(g.Data, w.Data) || fmt.Sprint(g.Shape) != fmt.Sprint(w.Shape) {
					t.Fatalf("%s: tensor %s of samples %v differs from the samples read one by one", out, w.Name, head(i64(ix.Data)))
				}
			}
			seen += len(rs)
		}
		if seen == 0 {
			t.Fatal("no samples read")
		}
		d.Close()
	}
}

// TestReuseYieldsTheSameBatches: readers with ReadOptions.Reuse, three
// epochs on one Dataset, yield byte for byte the batches of readers on
// fresh memory (each batch checked before the next is asked for, as Reuse
// requires), flat and packed, with several windows per epoch, and so do
// readers of a Dataset that reads rows through its maps (ReadMapped), not
// with pread; and the buffers are reused: an epoch-0 batch held past its
// window is overwritten.
func TestReuseYieldsTheSameBatches(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 6_000, Files: 2, Seed: 9})
	for _, out := range []string{
		run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, Tensors: true, ShardBytes: 128 << 10, BlockSamples: 200}),
		run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, QueryKey: []string{"query_id"}, Tensors: true, ShardBytes: 64 << 10, BlockSamples: 50}),
	} {
		hashes := func(d *loader.Dataset, epoch int, reuse bool) []uint64 {
			r, err := d.NewReader(loader.ReadOptions{Assignment: loader.Assignment{Seed: 4, Epoch: epoch, Shuffle: true}, Batch: 16, WindowBytes: 20 << 10, Index: true, Reuse: reuse})
			if err != nil {
				t.Fatal(err)
			}
			var hs []uint64
			for {
				b, err := r.Next()
				if err != nil {
					t.Fatal(err)
				}
				if b == nil {
					return hs
				}
				h := xxhash.New()
				for _, x := range b.Tensors {
					h.WriteString(x.Name)
					h.Write(x.Data)
				}
				hs = append(hs, h.Sum64())
			}
		}
		fresh, err := loader.Open(out, loader.Options{})
		if err != nil {
			t.Fatal(err)
		}
		reused, err := loader.Open(out, loader.Options{})
		if err != nil {
			t.Fatal(err)
		}
		mapped, err := loader.Open(out, loader.Options{ReadMapped: true})
		if err != nil {
			t.Fatal(err)
		}
		defer mapped.Close()
		for epoch := 0; epoch < 3; epoch++ {
			want, got := hashes(fresh, epoch, false), hashes(reused, epoch, true)
			if len(want) < 10 || !slices.Equal(got, want) {
				t.Fatalf("%s epoch %d: %d batches with Reuse differ from %d without", out, epoch, len(got), len(want))
			}
			// Rows read through the maps, not with pread: the same batches.
			if got := hashes(mapped, epoch, epoch > 0); !slices.Equal(got, want) {
				t.Fatalf("%s epoch %d: %d batches read through the maps (ReadMapped) differ from %d read with pread", out, epoch, len(got), len(want))
			}
		}
		// A batch held past its window is overwritten by the next window.
		r, err := reused.NewReader(loader.ReadOptions{Assignment: loader.Assignment{Seed: 4, Shuffle: true}, Batch: 16, WindowBytes: 20 << 10, Index: true, Reuse: true})
		if err != nil {
			t.Fatal(err)
		}
		first, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		ix, _ := first.Get(loader.IndexTensor)
		held, kept := ix.Data, slices.Clone(ix.Data)
		for b, err := r.Next(); b != nil; b, err = r.Next() {
			if err != nil {
				t.Fatal(err)
			}
		}
		if slices.Equal(held, kept) {
			t.Fatalf("%s: a held batch's _index is unchanged after its window: buffers were not reused", out)
		}
		fresh.Close()
		reused.Close()
	}
}

// TestWindowMixesLikeAUniformShuffle measures batch composition on the
// generated log (40 countries, output sorted by country and date) against
// a uniform permutation of the same samples: distinct countries per
// 512-batch at least 0.9x uniform's, and the spread (standard deviation)
// of per-batch click rate at most 1.1x uniform's. The block order (v1) is
// the control that fails both.
func TestWindowMixesLikeAUniformShuffle(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 200_000, Files: 4, Seed: 1})
	out := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country", "date"}, Tensors: true})
	d, err := loader.Open(out, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// Every sample's country id and click, in output order.
	n := d.Samples()
	country, click := make([]int64, n), make([]float64, n)
	for _, b := range readAll(t, d, loader.ReadOptions{Assignment: loader.Assignment{}, Order: loader.OrderNone, Batch: 8192, Index: true}) {
		ix, _ := b.Get(loader.IndexTensor)
		c, _ := b.Get("country")
		k, _ := b.Get("click")
		cs, ks := i64(c.Data), k.Data
		for i, s := range i64(ix.Data) {
			country[s] = cs[i]
			click[s] = float64(int32(binary.LittleEndian.Uint32(ks[4*i:])))
		}
	}
	stats := func(order []int64) (float64, float64) {
		var distinct, sum, sum2 float64
		nb := len(order) / 512
		for b := 0; b < nb; b++ {
			set := map[int64]bool{}
			var clicks float64
			for _, s := range order[b*512 : (b+1)*512] {
				set[country[s]] = true
				clicks += click[s]
			}
			rate := clicks / 512
			distinct += float64(len(set))
			sum += rate
			sum2 += rate * rate
		}
		mean := sum / float64(nb)
		return distinct / float64(nb), math.Sqrt(sum2/float64(nb) - mean*mean)
	}
	orderOf := func(o loader.ReadOptions) []int64 {
		var order []int64
		for _, b := range readAll(t, d, o) {
			ix, _ := b.Get(loader.IndexTensor)
			order = append(order, i64(ix.Data)...)
		}
		return order
	}
	uniform := make([]int64, n)
	for i := range uniform {
		uniform[i] = int64(i)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(uniform), func(i, j int) { uniform[i], uniform[j] = uniform[j], uniform[i] })
	ud, us := stats(uniform)
	wd, ws := stats(orderOf(loader.ReadOptions{Assignment: loader.Assignment{Seed: 1, Shuffle: true}, Batch: 512, Index: true}))
	bd, bs := stats(orderOf(loader.ReadOptions{Assignment: loader.Assignment{Seed: 1, Shuffle: true}, Order: loader.OrderBlock, Batch: 512, Index: true}))
	t.Logf("distinct countries per 512-batch: window %.2f, block %.2f, uniform %.2f; click-rate spread: window %.4f, block %.4f, uniform %.4f", wd, bd, ud, ws, bs, us)
	if wd < 0.9*ud || ws > 1.1*us {
		t.Fatalf("window order: %.2f countries per batch (uniform %.2f), click-rate spread %.4f (uniform %.4f)", wd, ud, ws, us)
	}
	if bd >= 0.9*ud { // the control: the block order does not mix
		t.Fatalf("block order mixes as well as uniform (%.2f vs %.2f): the measure is broken", bd, ud)
	}
}

// TestWindowBytesTouchedOncePerEpoch: from each reader's samples (_index)
// and the shards' layout, the byte ranges of shard data every reader
// touches. Over 2 ranks x 2 workers and 4 ranks x 1 worker the ranges of
// different readers are disjoint and, summed, at most 1.05x the shards'
// data: each byte is fetched once per epoch. It also logs the 4 KiB pages
// touched (narrow tensors make small pieces, whose edge pages two readers
// share).
func TestWindowBytesTouchedOncePerEpoch(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 60_000, Files: 2, Seed: 6})
	out := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country", "date"}, Tensors: true, ShardBytes: 2 << 20, BlockSamples: 4096})
	m := manifestOf(t, out)
	type layout struct {
		h   *loader.Header
		off map[string][]int64 // offsets tensors, for their values
	}
	shards := make([]layout, len(m.Tensors.Shards))
	var dataBytes int64
	for i, s := range m.Tensors.Shards {
		data, err := os.ReadFile(filepath.Join(out, s.Path))
		if err != nil {
			t.Fatal(err)
		}
		h, err := loader.ReadHeader(bytesAt(data), int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		l := layout{h: h, off: map[string][]int64{}}
		for _, ti := range h.Tensors {
			if strings.HasSuffix(ti.Name, ".offsets") {
				l.off[ti.Name] = i64(data[h.DataStart+ti.Begin : h.DataStart+ti.End])
			}
		}
		shards[i] = l
		dataBytes += s.Bytes - h.DataStart
	}
	type span struct {
		shard, lo, hi int64
		reader        int
	}
	for _, ws := range [][2]int{{2, 2}, {4, 1}} {
		var spans []span
		pages := map[[3]int64]bool{} // (reader, shard, page)
		for r := 0; r < ws[0]; r++ {
			for w := 0; w < ws[1]; w++ {
				d, err := loader.Open(out, loader.Options{})
				if err != nil {
					t.Fatal(err)
				}
				reader := r*ws[1] + w
				for _, b := range readAll(t, d, loader.ReadOptions{Assignment: loader.Assignment{Seed: 2, Shuffle: true, Rank: r, World: ws[0], Worker: w, NumWorkers: ws[1]}, Batch: 512, Index: true}) {
					ix, _ := b.Get(loader.IndexTensor)
					for _, s := range i64(ix.Data) {
						k := sort.Search(len(m.Tensors.Shards), func(k int) bool {
							return m.Tensors.Shards[k].FirstRow+m.Tensors.Shards[k].Rows > s
						})
						l, row := shards[k], s-m.Tensors.Shards[k].FirstRow
						for _, ti := range l.h.Tensors {
							lo, hi, per := row, row+1, int64(0)
							switch {
							case strings.HasSuffix(ti.Name, ".offsets"):
								per = 8 // the sample's end offset (its start is the previous sample's)
								lo, hi = row+1, row+2
								if row == 0 {
									lo = 0
								}
							case strings.HasSuffix(ti.Name, ".values"):
								o := l.off[strings.TrimSuffix(ti.Name, ".values")+".offsets"]
								lo, hi = o[row], o[row+1]
								per = (ti.End - ti.Begin) / max(o[len(o)-1], 1)
							default:
								per = (ti.End - ti.Begin) / m.Tensors.Shards[k].Rows
							}
							if hi <= lo || per == 0 {
								continue
							}
							a, e := l.h.DataStart+ti.Begin+lo*per, l.h.DataStart+ti.Begin+hi*per
							spans = append(spans, span{int64(k), a, e, reader})
							for p := a / 4096; p <= (e-1)/4096; p++ {
								pages[[3]int64{int64(reader), int64(k), p}] = true
							}
						}
					}
				}
				d.Close()
			}
		}
		slices.SortFunc(spans, func(a, b span) int {
			if a.shard != b.shard {
				return int(a.shard - b.shard)
			}
			return int(a.lo - b.lo)
		})
		var total int64
		for i, sp := range spans {
			total += sp.hi - sp.lo
			if i > 0 && spans[i-1].shard == sp.shard && spans[i-1].hi > sp.lo {
				t.Fatalf("world %v: readers %d and %d both touch bytes [%d, %d) of shard %d", ws, spans[i-1].reader, sp.reader, sp.lo, spans[i-1].hi, sp.shard)
			}
		}
		ratio := float64(total) / float64(dataBytes)
		t.Logf("world %d x %d workers: bytes touched %.3fx the shards' data; 4 KiB pages touched %.3fx", ws[0], ws[1], ratio, float64(len(pages))*4096/float64(dataBytes))
		if ratio > 1.05 || ratio < 0.95 {
			t.Fatalf("world %v: readers touched %.3fx the shard data", ws, ratio)
		}
	}
}

type bytesAt []byte

func (b bytesAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(b)) {
		return 0, fmt.Errorf("past the end")
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, fmt.Errorf("short")
	}
	return n, nil
}

// TestTorchDataLoader runs python/tests/torch_check.py with Debian's
// python3-torch: DataLoader workers (the window order, every sample once,
// the NumPy reader's tensors, shared buffers reused only once released),
// set_epoch, torch.distributed (gloo, two processes), bfloat16, pin_memory
// and a model trained from packed shards.
func TestTorchDataLoader(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import torch").Run(); err != nil {
		testutil.Missing(t, "python3-torch not installed (run make deps)")
	}
	in := testutil.Generate(t, gen.Options{Rows: 5_000, Files: 1, Seed: 9})
	out := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, Tensors: true, ShardBytes: 128 << 10, BlockSamples: 200})
	t.Setenv("RELAYOUT_TORCH_OUTPUT", out)
	spec := filepath.Join(t.TempDir(), "spec.yaml")
	os.WriteFile(spec, []byte(`tensors:
  user_dense: {columns: ["user_f*"], dtype: bfloat16}
  item_dense: {columns: ["item_f*"], dtype: float32}
  click: {fill: 0}
drop: ["*"]
`), 0o644)
	packed := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, QueryKey: []string{"query_id"},
		TensorSpec: spec, ShardBytes: 128 << 10, BlockSamples: 50})
	t.Setenv("RELAYOUT_TORCH_PACKED", packed)
	testutil.Python(t, filepath.Join(testutil.Root(), "python", "tests", "torch_check.py"))
}

// TestDatasetRootReadsAsOneDataset: a dataset root's generation (one part
// per day) reads as one dataset: every sample once per epoch, the same
// batches in Go and Python, a pinned older generation still readable,
// and a slice filter on the partition key reads only that part's shards
// (the other parts' shards are deleted before it reads).
func TestDatasetRootReadsAsOneDataset(t *testing.T) {
	flat := testutil.Generate(t, gen.Options{Rows: 24_000, Files: 2, Days: 3, Seed: 71})
	base := t.TempDir()
	daily := filepath.Join(base, "daily")
	testutil.DuckDB(t, fmt.Sprintf(`copy (select * exclude (date), date from read_parquet('%s/*.parquet')) to '%s' (format parquet, partition_by (date))`, flat, daily))
	root := filepath.Join(base, "ds")
	opts := pipeline.RunOptions{Dataset: root, Inputs: []string{daily}, SliceKeys: []string{"date", "country"}, Tensors: true, ShardBytes: 256 << 10, BlockSamples: 300}
	res, err := pipeline.RunDataset(context.Background(), opts, false)
	if err != nil {
		t.Fatal(err)
	}
	g := res.Generation
	if len(g.Parts) != 3 {
		t.Fatalf("%d parts", len(g.Parts))
	}
	d, err := loader.Open(root, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Samples() != g.Totals.Rows {
		t.Fatalf("%d samples, the generation has %d rows", d.Samples(), g.Totals.Rows)
	}
	seen := make([]int, d.Samples())
	for _, b := range readAll(t, d, loader.ReadOptions{Assignment: loader.Assignment{Seed: 3, Shuffle: true, World: 1, NumWorkers: 1}, Batch: 256, Index: true}) {
		x, _ := b.Get(loader.IndexTensor)
		for _, i := range i64(x.Data) {
			seen[i]++
		}
	}
	for i, n := range seen {
		if n != 1 {
			t.Fatalf("sample %d read %d times", i, n)
		}
	}
	d.Close()
	goAndPython(t, root, []orderCfg{
		{Batch: 256, Seed: 1, World: 1, NumWorkers: 1},
		{Batch: 100, Seed: 9, Epoch: 2, Rank: 1, World: 2, Worker: 1, NumWorkers: 2, WindowBytes: 256 << 10},
		{Batch: 64, Seed: 4, World: 1, NumWorkers: 1, Slices: []int{0, 2, 7}},
	})

	// A slice filter on the day: only that part is read.
	d, err = loader.Open(root, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	day := g.Parts[1].Folder
	var sel []int
	for i, s := range d.Manifest.Slices {
		if "date="+fmt.Sprint(s.Key[0].Value) == day {
			sel = append(sel, i)
		}
	}
	d.Close()
	if len(sel) == 0 {
		t.Fatalf("no slice of %s", day)
	}
	for _, p := range []int{0, 2} {
		if err := os.RemoveAll(filepath.Join(root, g.Parts[p].Path, "tensors")); err != nil {
			t.Fatal(err)
		}
	}
	d, err = loader.Open(root, loader.Options{Slices: sel})
	if err != nil {
		t.Fatal(err)
	}
	n := int64(0)
	for _, b := range readAll(t, d, loader.ReadOptions{Assignment: loader.Assignment{Seed: 3, Shuffle: true, World: 1, NumWorkers: 1}, Batch: 128}) {
		n += b.Samples
	}
	d.Close()
	if n != g.Parts[1].Rows {
		t.Fatalf("the %s filter read %d samples, the part has %d", day, n, g.Parts[1].Rows)
	}
}

// TestPythonRefusesBadArguments: the Python loader's arguments a training
// script gets wrong are a ValueError naming them (python/tests/arguments.py):
// slices={"country": "C0x"} or a key that is not a slice key read as an
// empty epoch, weights={"country": {"C0x": 5}} weighed nothing (in Go too), samples_seen=-512 as one batch more than the epoch, and a
// batch size of 0 was a ZeroDivisionError, and a manifest of a newer format
// version was read as version 1.
func TestPythonRefusesBadArguments(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 20_000, Files: 2, Seed: 3})
	out := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, Tensors: true, ShardBytes: 512 << 10, BlockSamples: 1000})
	// It also reads only the manifest and generation format versions the Go
	// loader reads.
	want := fmt.Sprintf("ok %d %d", manifests.FormatVersion, dataset.FormatVersion)
	if res := testutil.Python(t, filepath.Join(testutil.Root(), "python", "tests", "arguments.py"), out); strings.TrimSpace(string(res)) != want {
		t.Fatalf("arguments.py printed %q, want %q", res, want)
	}
	// The Go loader: a key weight for a value no slice has weighed
	// nothing, silently (as in Python).
	for _, kw := range []map[string]map[string]float64{{"country": {"C0x": 5}}, {"contry": {"C01": 5}}} {
		if d, err := loader.Open(out, loader.Options{KeyWeights: kw}); err == nil {
			d.Close()
			t.Errorf("KeyWeights %v: opened", kw)
		} else if !strings.Contains(err.Error(), "matches no slice") && !strings.Contains(err.Error(), "is not a slice key") {
			t.Errorf("KeyWeights %v: %v", kw, err)
		}
	}
	if d, err := loader.Open(out, loader.Options{KeyWeights: map[string]map[string]float64{"country": {"C01": 2}}}); err != nil {
		t.Errorf("KeyWeights of a value slices have: %v", err)
	} else {
		d.Close()
	}
}
