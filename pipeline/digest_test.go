package pipeline

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"

	"github.com/relayout/relayout/dedupe"
	"github.com/relayout/relayout/fingerprint"
	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/partition"
	"github.com/relayout/relayout/plan"
	"github.com/relayout/relayout/storage"
)

// digestRow is one row of the digest tests' inputs: user is query-level
// unless a case makes it vary.
type digestRow struct {
	query, item, user int64
}

var digestSchema = arrow.NewSchema([]arrow.Field{
	{Name: "country", Type: arrow.BinaryTypes.String},
	{Name: "query_id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "item", Type: arrow.PrimitiveTypes.Int64},
	{Name: "user", Type: arrow.PrimitiveTypes.Int64},
	{Name: "score", Type: arrow.PrimitiveTypes.Float64},
}, nil)

func writeDigestInput(t *testing.T, path string, rows []digestRow) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, digestSchema)
	defer b.Release()
	for _, r := range rows {
		c := "DE"
		if r.query%2 == 1 {
			c = "FR"
		}
		b.Field(0).(*array.StringBuilder).Append(c)
		b.Field(1).(*array.Int64Builder).Append(r.query)
		b.Field(2).(*array.Int64Builder).Append(r.item)
		b.Field(3).(*array.Int64Builder).Append(r.user)
		b.Field(4).(*array.Float64Builder).Append(float64((r.query*7+r.item)%97) / 3)
	}
	testutil.WriteArrow(t, path, b.NewRecordBatch(), parquet.WithMaxRowGroupLength(1000))
}

// queries returns five rows for each query in [from, to], user = 10*q.
func digestQueries(from, to int64) []digestRow {
	var out []digestRow
	for q := from; q <= to; q++ {
		for i := int64(0); i < 5; i++ {
			out = append(out, digestRow{q, q*100 + i, q * 10})
		}
	}
	return out
}

// TestDetectByDigests: the detect tasks of a packed plan decide from the
// map tasks' query digests when the digests agree, and read their rows
// otherwise (a query-level column of the probe's that varies across map
// tasks, or inside one task's rows outside the sample); the output is
// run's either way, and a damaged digest is bad input naming it.
func TestDetectByDigests(t *testing.T) {
	ctx := context.Background()
	local := RunOptions{Parallel: 2}
	for _, tc := range []struct {
		name string
		// a is the first file (its first row group is the plan's sample),
		// b the second.
		a, b []digestRow
		// wantBy is how each detect task decides ("" for either), and
		// userVaries whether user ends up an item column.
		wantBy     func(t *testing.T, by []string, why []string)
		userVaries bool
	}{
		{"agree", digestQueries(1, 400), digestQueries(401, 800), func(t *testing.T, by, why []string) {
			for j, b := range by {
				if b != "digests" {
					t.Fatalf("detect task %d decided by %q (%s); want digests", j, b, why[j])
				}
			}
		}, false},
		{"across-tasks", digestQueries(1, 400),
			// Query 7's last item, in the second file, has another user.
			append(digestQueries(401, 800), digestRow{7, 799, 71}),
			func(t *testing.T, by, why []string) {
				rows := 0
				for j, b := range by {
					if b == "rows" {
						rows++
						if !strings.Contains(why[j], "between map tasks") {
							t.Fatalf("detect task %d: why %q", j, why[j])
						}
					}
				}
				if rows != 1 {
					t.Fatalf("%d detect tasks read rows (%v); want the one of query 7's partition", rows, by)
				}
			}, true},
		{"within-a-task", digestQueries(1, 400),
			// Query 450's rows, all in one row group of the second file
			// (outside the sample), have two users.
			append(digestQueries(401, 800)[:50*5], append([]digestRow{{450, 1, 4500}, {450, 2, 4501}}, digestQueries(451, 800)...)...),
			func(t *testing.T, by, why []string) {
				for j, b := range by {
					if b != "rows" || !strings.Contains(why[j], "differ in a column the plan's probe did not see vary") {
						t.Fatalf("detect task %d decided by %q (%s); want rows, a map task's digests unusable", j, b, why[j])
					}
				}
			}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeDigestInput(t, filepath.Join(dir, "in", "a.parquet"), tc.a)
			writeDigestInput(t, filepath.Join(dir, "in", "b.parquet"), tc.b)
			o := func(out string) RunOptions {
				return RunOptions{Inputs: []string{filepath.Join(dir, "in")}, Output: out, SliceKeys: []string{"country"}, QueryKey: []string{"query_id"},
					RowGroupBytes: 4 << 10, MinRowGroupBytes: 1 << 10, FileBytes: 8 << 10, Tensors: true}
			}
			ref := filepath.Join(dir, "run")
			if _, err := Run(ctx, o(ref)); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "dist")
			res, p, err := PlanJob(ctx, o(out), 1) // a map task per row group
			if err != nil {
				t.Fatal(err)
			}
			if res.MapTasks < 4 || res.DetectTasks < 3 {
				t.Fatalf("%d map and %d detect tasks; want several", res.MapTasks, res.DetectTasks)
			}
			if p.Packing.Probe == nil || !p.Packing.Probe.Varying[2] || p.Packing.Probe.Varying[3] {
				t.Fatalf("the probe: %+v; want item seen to vary, user not", p.Packing.Probe)
			}
			for i := 0; i < res.MapTasks; i++ {
				if _, err := MapTask(ctx, res.Plan, i, local); err != nil {
					t.Fatal(err)
				}
			}
			var by, why []string
			for j := 0; j < res.DetectTasks; j++ {
				d, err := DetectTask(ctx, res.Plan, j, local)
				if err != nil {
					t.Fatal(err)
				}
				by, why = append(by, d.DetectedBy), append(why, d.DigestsUnused)
			}
			tc.wantBy(t, by, why)
			for j := 0; j < res.ReduceTasks; j++ {
				if _, err := ReduceTask(ctx, res.Plan, j, local); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := CommitJob(ctx, res.Plan, local); err != nil {
				t.Fatal(err)
			}
			want, got := readTree(t, ref), readTree(t, out)
			if len(got) != len(want) {
				t.Fatalf("%d files, run wrote %d", len(got), len(want))
			}
			for k, v := range want {
				if !bytes.Equal(got[k], v) {
					t.Fatalf("%s differs from run's", k)
				}
			}
			m := readManifest(t, out)
			if got := slices.Contains(m.Packing.ItemColumns, "user"); got != tc.userVaries {
				t.Fatalf("user an item column: %v, want %v (item columns %v)", got, tc.userVaries, m.Packing.ItemColumns)
			}
		})
	}

	// A damaged digest is bad input naming it, with the map task to run
	// again; not a wrong detection, not a retry.
	dir := t.TempDir()
	writeDigestInput(t, filepath.Join(dir, "in", "a.parquet"), digestQueries(1, 400))
	writeDigestInput(t, filepath.Join(dir, "in", "b.parquet"), digestQueries(401, 800))
	res, _, err := PlanJob(ctx, RunOptions{Inputs: []string{filepath.Join(dir, "in")}, Output: filepath.Join(dir, "out"), SliceKeys: []string{"country"},
		QueryKey: []string{"query_id"}, RowGroupBytes: 4 << 10, MinRowGroupBytes: 1 << 10, FileBytes: 8 << 10}, 1)
	if err != nil {
		t.Fatal(err)
	}
	var m0 *TaskManifest
	for i := 0; i < res.MapTasks; i++ {
		d, err := MapTask(ctx, res.Plan, i, local)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			m0 = d
		}
	}
	// The first partition map 0 wrote digests for, and where.
	idxPath := filepath.Join(dir, "out", filepath.FromSlash(mapAttemptPrefix(0, m0.Attempt)+digestIndexName))
	idx, err := os.ReadFile(idxPath)
	if err != nil {
		t.Fatal(err)
	}
	ents, err := partition.DecodeIndex(idx, 0, partition.IndexSeed(digestIndexKind, 0))
	if err != nil || len(ents) == 0 || len(idx) != m0.Digest.Partitions*partition.IndexRecord {
		t.Fatalf("map 0's digest index (%d bytes for %d partitions): %+v, %v", len(idx), m0.Digest.Partitions, ents, err)
	}
	task, off := ents[0].Unit, ents[0].Offset
	path := filepath.Join(dir, "out", filepath.FromSlash(m0.Digest.Path))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[off+9] ^= 1 // a candidate hash
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = DetectTask(ctx, res.Plan, task, local)
	if !errs.Is(err, errs.BadInput) || !strings.Contains(err.Error(), "digests.bin") || !strings.Contains(err.Error(), "damaged") || !strings.Contains(err.Error(), "map task 0") {
		t.Fatalf("detect over a damaged digest: %v", err)
	}
	// Cut short: exit 3 naming it, not a retried read (exit 4).
	if err := os.WriteFile(path, data[:off+8], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = DetectTask(ctx, res.Plan, task, local)
	if !errs.Is(err, errs.BadInput) || !strings.Contains(err.Error(), "digests.bin") || !strings.Contains(err.Error(), "shorter") {
		t.Fatalf("detect over a truncated digest: %v", err)
	}
	// A count the partition cannot hold is refused before any read, and
	// so is a damaged record of the index.
	recs := append([]partition.Segment{{Unit: task, Offset: off, Length: (1 << 40) * digestRecord, Rows: 1 << 40, Bytes: 1, XXHash64: ents[0].XXHash64}}, ents[1:]...)
	big, err := partition.EncodeIndex(recs, m0.Digest.Partitions, partition.IndexSeed(digestIndexKind, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(idxPath, big, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = DetectTask(ctx, res.Plan, task, local)
	if !errs.Is(err, errs.BadInput) || !strings.Contains(err.Error(), "query digests in") || !strings.Contains(err.Error(), "for partition") {
		t.Fatalf("detect with a count beyond the partition's rows: %v", err)
	}
	big[task*partition.IndexRecord+3] ^= 1
	if err := os.WriteFile(idxPath, big, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = DetectTask(ctx, res.Plan, task, local)
	if !errs.Is(err, errs.BadInput) || !strings.Contains(err.Error(), "digests.idx") || !strings.Contains(err.Error(), "damaged") || !strings.Contains(err.Error(), "map task 0") {
		t.Fatalf("detect with a damaged digest index: %v", err)
	}
}

// TestDigesterMerges: a map task's digests over several flushes keep one
// record per query, sorted; a query whose candidates differ, in one batch
// or across flushes, makes them unusable; so do more queries than the
// budget.
func TestDigesterMerges(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "q", Type: arrow.PrimitiveTypes.Int64},
		{Name: "v", Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	batch := func(qs, vs []int64) arrow.RecordBatch {
		b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
		defer b.Release()
		b.Field(0).(*array.Int64Builder).AppendValues(qs, nil)
		b.Field(1).(*array.Int64Builder).AppendValues(vs, nil)
		return b.NewRecordBatch()
	}
	// feed sends queries [0, n) twice, interleaved, in batches of 1000
	// rows to two units of two partitions (by q's parity): several
	// flushes; v of query bad is changed on its second pass.
	feed := func(g *digester, n, bad int64) {
		for pass := int64(0); pass < 2; pass++ {
			for start := int64(0); start < n; start += 1000 {
				var qs, vs []int64
				for q := start; q < min(start+1000, n); q++ {
					v := q * 3
					if pass == 1 && q == bad {
						v++
					}
					qs, vs = append(qs, q), append(vs, v)
				}
				for u := 0; u < 2; u++ {
					var uq, uv []int64
					for i, q := range qs {
						if int(q%2) == u {
							uq, uv = append(uq, q), append(uv, vs[i])
						}
					}
					rec := batch(uq, uv)
					if err := g.add(u, rec); err != nil {
						t.Fatal(err)
					}
					rec.Release()
				}
			}
		}
	}
	const n = 3 * pendingRecords
	work, err := storage.OpenDir(context.Background(), t.TempDir(), true)
	if err != nil {
		t.Fatal(err)
	}
	g := newDigester([]int{0}, []int{1}, []int{0, 1}, 2, 1<<30)
	feed(g, n, -1)
	d, err := g.finish(context.Background(), work, "m/", 0)
	if err != nil || d.Unusable != "" {
		t.Fatalf("%+v %v", d, err)
	}
	idx, err := os.ReadFile(filepath.Join(work.Local, "m", "digests.idx"))
	if err != nil {
		t.Fatal(err)
	}
	ents, err := partition.DecodeIndex(idx, 0, partition.IndexSeed(digestIndexKind, 0))
	if err != nil || len(ents) != 2 || ents[0].Rows != n/2 || ents[1].Rows != n/2 {
		t.Fatalf("index %+v (%v); want %d records for each partition (one per query)", ents, err, n/2)
	}
	data, err := os.ReadFile(filepath.Join(work.Local, "m", "digests.bin"))
	if err != nil || int64(len(data)) != n*digestRecord {
		t.Fatalf("%d bytes, %v", len(data), err)
	}
	for p := 0; p < 2; p++ {
		part := data[int64(p)*n/2*digestRecord : int64(p+1)*n/2*digestRecord]
		for i := digestRecord; i < len(part); i += digestRecord {
			if a, b := leU64(part[i-digestRecord:]), leU64(part[i:]); a >= b {
				t.Fatalf("partition %d: records %d and %d not rising (%x, %x)", p, i/digestRecord-1, i/digestRecord, a, b)
			}
		}
	}
	for _, bad := range []int64{5, n - 3} { // flushed long before, and in the last flush
		g := newDigester([]int{0}, []int{1}, []int{0, 1}, 2, 1<<30)
		feed(g, n, bad)
		if d, _ := g.finish(context.Background(), work, "m/", 0); !strings.Contains(d.Unusable, fmt.Sprintf("partition %d", bad%2)) {
			t.Fatalf("query %d's candidates differ: %+v", bad, d)
		}
	}
	g = newDigester([]int{0}, []int{1}, []int{0, 1}, 2, 1<<20) // a budget of 65,536 records
	feed(g, n, -1)
	if d, _ := g.finish(context.Background(), work, "m/", 0); !strings.Contains(d.Unusable, "--memory-limit") {
		t.Fatalf("over the budget: %+v", d)
	}
}

func leU64(b []byte) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

// TestDetectSorted: run's in-memory detection from the read's row digests
// agrees with the detector reading every row (and the probe's conflicts),
// and gives way to it whenever a query's rows differ: in a candidate
// column outside the sample, and at a slice boundary where the same query
// key continues in the next slice.
func TestDetectSorted(t *testing.T) {
	type r struct {
		country string
		q, item int64
		user    int64
	}
	build := func(rows []r) arrow.RecordBatch {
		b := array.NewRecordBuilder(memory.DefaultAllocator, digestSchema)
		defer b.Release()
		for _, x := range rows {
			b.Field(0).(*array.StringBuilder).Append(x.country)
			b.Field(1).(*array.Int64Builder).Append(x.q)
			b.Field(2).(*array.Int64Builder).Append(x.item)
			b.Field(3).(*array.Int64Builder).Append(x.user)
			b.Field(4).(*array.Float64Builder).Append(float64(x.item) / 3)
		}
		return b.NewRecordBatch()
	}
	queries := func(country string, from, to int64) []r {
		var out []r
		for q := from; q <= to; q++ {
			for i := int64(0); i < 4; i++ {
				out = append(out, r{country, q, q*10 + i, q * 7})
			}
		}
		return out
	}
	keys := plan.Keys{Slice: []int{0}, Query: []int{1}, Sort: []int{1}}
	for _, tc := range []struct {
		name   string
		rows   []r
		wantOK bool
	}{
		{"constant", slices.Concat(queries("DE", 1, 50), queries("FR", 51, 100)), true},
		// Query 80's last row has another user, far from the sample.
		{"varies-late", slices.Concat(queries("DE", 1, 50), queries("FR", 51, 100), []r{{"FR", 80, 1, 9}}), false},
		// Query 50 is DE's last and FR's first: neighbours in the sorted
		// order with one key, and country differs between them.
		{"across-slices", slices.Concat(queries("DE", 1, 50), queries("FR", 50, 100)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Two batches, in an order the sort must undo (FR first).
			rows := slices.Clone(tc.rows)
			slices.Reverse(rows)
			half := len(rows) / 2
			recs := []arrow.RecordBatch{build(rows[:half]), build(rows[half:])}
			defer recs[0].Release()
			defer recs[1].Release()
			sample := build(tc.rows[:40]) // the head of the input, as a plan's
			defer sample.Release()
			probe := probeDetection(sample, keys)
			if probe == nil || !probe.Varying[2] || probe.Varying[3] {
				t.Fatalf("probe %+v: want item seen to vary, user not", probe)
			}
			dig := rowDigest(probe, digestSchema, keys.Query)
			var hashes [2][]uint64
			for _, rec := range recs {
				extra := [][]uint64{make([]uint64, rec.NumRows()), make([]uint64, rec.NumRows())}
				if _, err := fingerprint.RecordWith(rec, dig.Group, extra, dig.Exact); err != nil {
					t.Fatal(err)
				}
				hashes[0], hashes[1] = append(hashes[0], extra[0]...), append(hashes[1], extra[1]...)
			}
			dig.Hashes = hashes[:]
			// Sorted by country, then query key, stably (the run's order).
			all := slices.Concat(rows[:half], rows[half:])
			ord := make([]int64, len(all))
			for i := range ord {
				ord[i] = int64(i)
			}
			slices.SortStableFunc(ord, func(a, b int64) int {
				if c := strings.Compare(all[a].country, all[b].country); c != 0 {
					return c
				}
				return cmp.Compare(all[a].q, all[b].q)
			})
			got, ok := detectSorted(ord, dig, probe)
			if ok != tc.wantOK {
				t.Fatalf("decided from digests: %v, want %v", ok, tc.wantOK)
			}
			d := dedupe.NewDetector(digestSchema, keys.Query)
			if err := d.AddBatches(recs, ord); err != nil {
				t.Fatal(err)
			}
			want := withProbe(dedupe.DetectionOf(d), probe)
			if !ok {
				if slices.Equal(want.Varying, probe.Varying) {
					t.Fatalf("the detector found only what the probe did (%v): the case tests nothing", want.Varying)
				}
				return
			}
			if !slices.Equal(got.Varying, want.Varying) || !maps.Equal(got.Conflicts, want.Conflicts) {
				t.Fatalf("from digests %+v, the detector %+v", got, want)
			}
		})
	}
	// No column in doubt (the probe saw every one but the key vary): the
	// read hashed no group 1, and the probe decides.
	probe := &plan.Probe{Varying: []bool{true, false, true, true, true}, Conflicts: map[string]string{"2": "x"}}
	got, ok := detectSorted([]int64{1, 0, 2}, &partition.RowDigest{Hashes: [][]uint64{{5, 5, 7}}}, probe)
	if !ok || !slices.Equal(got.Varying, probe.Varying) || got.Conflicts["2"] != "x" {
		t.Fatalf("with no candidates: %+v, %v; want the probe's", got, ok)
	}
}
