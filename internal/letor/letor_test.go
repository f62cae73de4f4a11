package letor

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/relayout/relayout/internal/arrowmem"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/pipeline"
)

// qidCounts counts rows per qid with a regular expression: a second,
// independent reading of the text.
func qidCounts(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	re := regexp.MustCompile(`\bqid:(\d+)`)
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			out[m[1]]++
		}
	}
	return out
}

func convert(t *testing.T, in, group string) string {
	t.Helper()
	f, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := Parse(f, in)
	if err != nil {
		t.Fatal(err)
	}
	if group != "" {
		g, _ := os.Open(group)
		defer g.Close()
		if err := ApplyGroups(rows, g, group); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "out.parquet")
	if err := WriteParquet(out, rows); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestLETORByQuery converts MQ2008 and checks, with DuckDB and with
// relayout's slice index, one slice per qid holding that qid's rows.
func TestLETORByQuery(t *testing.T) {
	in := filepath.Join(testutil.DataDir(t), "letor-mq2008-xgboost", "test.txt")
	want := qidCounts(t, in)
	pq := convert(t, in, "")
	rows, _ := testutil.DuckDB(t, fmt.Sprintf("select qid::VARCHAR q, count(*)::INT n, count(f46)::INT f, count(docid)::INT d from read_parquet('%s') group by all", pq))
	if len(rows) != len(want) {
		t.Fatalf("DuckDB sees %d qids, the text has %d", len(rows), len(want))
	}
	for _, r := range rows {
		q := fmt.Sprint(r["q"])
		if fmt.Sprint(r["n"]) != fmt.Sprint(want[q]) || fmt.Sprint(r["f"]) != fmt.Sprint(want[q]) || fmt.Sprint(r["d"]) != fmt.Sprint(want[q]) {
			t.Fatalf("qid %s: DuckDB %v, text %d rows (every row has 46 features and a docid)", q, r, want[q])
		}
	}
	res, err := pipeline.Run(context.Background(), pipeline.RunOptions{Inputs: []string{pq}, Output: filepath.Join(t.TempDir(), "o"), SliceKeys: []string{"qid"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Manifest.Slices) != len(want) {
		t.Fatalf("%d slices, %d qids", len(res.Manifest.Slices), len(want))
	}
	for _, s := range res.Manifest.Slices {
		if int(s.Rows) != want[fmt.Sprint(s.Key[0].Value)] {
			t.Fatalf("slice %v has %d rows, the text %d", s.Key, s.Rows, want[fmt.Sprint(s.Key[0].Value)])
		}
	}
}

func TestRepeatedAndUnsortedFeatures(t *testing.T) {
	rows, err := Parse(strings.NewReader("2 qid:7 17:-0.76 3:1 17:0.37 # docid = D1 inc = 1\n0 qid:7 5:2.5\n"), "x")
	if err != nil {
		t.Fatal(err)
	}
	if rows[0].Features[17] != 0.37 || rows[0].Features[3] != 1 || rows[0].DocID != "D1" || rows[0].Label != 2 || rows[0].QID != 7 {
		t.Fatalf("row 0: %+v", rows[0])
	}
	if len(rows[1].Features) != 1 || rows[1].DocID != "" {
		t.Fatalf("row 1: %+v", rows[1])
	}
	// TF-Ranking's LibSVM files have unsorted and repeated feature ids.
	tf := filepath.Join(testutil.DataDir(t), "tf-ranking-examples", "train.txt")
	want := qidCounts(t, tf)
	pq := convert(t, tf, "")
	got, _ := testutil.DuckDB(t, fmt.Sprintf("select count(*)::INT n, count(distinct qid)::INT q from read_parquet('%s')", pq))
	total := 0
	for _, n := range want {
		total += n
	}
	if fmt.Sprint(got[0]["n"]) != fmt.Sprint(total) || fmt.Sprint(got[0]["q"]) != fmt.Sprint(len(want)) {
		t.Fatalf("TF-Ranking train: DuckDB %v, text %d rows in %d qids", got, total, len(want))
	}
}

func TestGroupFileAndErrors(t *testing.T) {
	dir := filepath.Join(testutil.DataDir(t), "letor-mq2008-xgboost")
	pq := convert(t, filepath.Join(dir, "toy.train"), filepath.Join(dir, "toy.train.group"))
	got, _ := testutil.DuckDB(t, fmt.Sprintf("select string_agg(n::VARCHAR, ',' order by qid) s from (select qid, count(*) n from read_parquet('%s') group by qid)", pq))
	groups, _ := os.ReadFile(filepath.Join(dir, "toy.train.group"))
	if want := strings.Join(strings.Fields(string(groups)), ","); fmt.Sprint(got[0]["s"]) != want {
		t.Fatalf("groups %v, want %s", got[0]["s"], want)
	}
	for _, bad := range []string{"x qid:1 1:2\n", "1 qid:a\n", "1 qid:1 1=2\n", "1 qid:1 -3:2\n"} {
		_, err := Parse(strings.NewReader("1 qid:1 1:1\n"+bad), "in.txt")
		if err == nil || !strings.HasPrefix(err.Error(), "in.txt:2:") {
			t.Errorf("%q: error %v does not name in.txt:2", bad, err)
		}
	}
	rows, _ := Parse(strings.NewReader("1 1:1\n0 1:2\n"), "x")
	if err := ApplyGroups(rows, strings.NewReader("3\n"), "g"); err == nil {
		t.Error("groups larger than the data accepted")
	}
}

// TestPackLETOR: packing MQ2008 by qid gives exactly one row per distinct
// qid holding that qid's items.
func TestPackLETOR(t *testing.T) {
	in := filepath.Join(testutil.DataDir(t), "letor-mq2008-xgboost", "test.txt")
	want := qidCounts(t, in)
	pq := convert(t, in, "")
	out := filepath.Join(t.TempDir(), "packed")
	res, err := pipeline.Run(context.Background(), pipeline.RunOptions{Inputs: []string{pq}, Output: out, QueryKey: []string{"qid"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Manifest.Packing.Queries != int64(len(want)) {
		t.Fatalf("%d packed rows, %d qids", res.Manifest.Packing.Queries, len(want))
	}
	// Auto detection, checked column by column with DuckDB: a column is
	// query-level exactly when every qid has one distinct value (MQ2008 has
	// a few query-level features, e.g. f6-f10).
	isQuery := map[string]bool{}
	for _, c := range res.Manifest.Packing.QueryColumns {
		isQuery[c] = true
	}
	var exprs []string
	for _, c := range res.Manifest.Packing.FlatColumns {
		exprs = append(exprs, fmt.Sprintf("max(n_%s)::INT AS %s", c, c))
	}
	var inner []string
	for _, c := range res.Manifest.Packing.FlatColumns {
		inner = append(inner, fmt.Sprintf("count(distinct %s) + (count(*) > count(%s))::INT AS n_%s", c, c, c))
	}
	dist, _ := testutil.DuckDB(t, fmt.Sprintf("select %s from (select %s from read_parquet('%s') group by qid)", strings.Join(exprs, ", "), strings.Join(inner, ", "), pq))
	for _, c := range res.Manifest.Packing.FlatColumns {
		constant := fmt.Sprint(dist[0][c]) == "1"
		if constant != isQuery[c] {
			t.Errorf("column %s: DuckDB says constant per qid = %v, relayout's detection %v", c, constant, isQuery[c])
		}
	}
	if !isQuery["qid"] || isQuery["label"] || isQuery["docid"] {
		t.Errorf("query columns %v", res.Manifest.Packing.QueryColumns)
	}
	rows, _ := testutil.DuckDB(t, fmt.Sprintf("select qid::VARCHAR q, len(items)::INT n from read_parquet('%s/parquet/*.parquet')", out))
	if len(rows) != len(want) {
		t.Fatalf("DuckDB reads %d packed rows, want %d", len(rows), len(want))
	}
	for _, r := range rows {
		if fmt.Sprint(r["n"]) != fmt.Sprint(want[fmt.Sprint(r["q"])]) {
			t.Fatalf("qid %v holds %v items, the text %d", r["q"], r["n"], want[fmt.Sprint(r["q"])])
		}
	}
}

// TestMain poisons arrow buffers when freed (arrowmem.TestMain).
func TestMain(m *testing.M) { arrowmem.TestMain(m) }
