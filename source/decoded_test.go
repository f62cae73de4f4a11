package source_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/relayout/relayout/internal/sourcetest"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/partition"
	"github.com/relayout/relayout/source"
)

// TestDecodedEstimate: the footer's floor (File.DecodedFloor) is at most
// what each file decodes to, and its estimate (DecodedEstimate, and
// DecodedEstimateOf with the dictionaries' headers) within a few percent
// of it, for files DuckDB writes with numbers and strings held as
// dictionaries, where the uncompressed bytes alone count a half to a
// sixth of the decoded bytes. The plan's memory checks refuse and slice
// row groups from these figures.
func TestDecodedEstimate(t *testing.T) {
	cases := []struct {
		name, sql string
		// least is the least the decoded bytes exceed the uncompressed
		// bytes by: the case is one the uncompressed bytes misjudge.
		least float64
	}{
		{"dictionary floats", "SELECT (range%4)::INT AS k, list_transform(range(64), x -> ((hash(range*1000+x) % 1000)::FLOAT)) AS emb FROM range(20000)", 1.5},
		{"dictionary strings", "SELECT (range%8)::INT AS k, 'https://example.com/catalog/category/' || (hash(range) % 100)::VARCHAR || '/items' AS url, CASE WHEN range%10=0 THEN NULL ELSE 'brand_' || (hash(range*3) % 2000)::VARCHAR END AS brand FROM range(200000)", 3},
		{"plain strings", "SELECT range AS id, md5(range::VARCHAR) AS s, range/3.0 AS x FROM range(50000)", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "t.parquet")
			testutil.DuckDB(t, fmt.Sprintf("COPY (%s) TO '%s' (FORMAT parquet, ROW_GROUP_SIZE 100000)", c.sql, p))
			ctx := context.Background()
			tbl := sourcetest.Open(t, p)
			f := tbl.Files[0]
			var decoded, withDict int64
			for rg := range f.RowGroupRows {
				rec, err := tbl.Read(ctx, source.RowGroupRef{File: f, RowGroup: rg}, nil, 2)
				if err != nil {
					t.Fatal(err)
				}
				decoded += partition.RecordBytes(rec) // its buffers' bytes
				rec.Release()
				est, err := f.DecodedEstimateOf(rg)
				if err != nil {
					t.Fatal(err)
				}
				withDict += est
			}
			t.Logf("uncompressed %d, floor %d, estimate %d (with dictionaries' headers %d), decoded %d", f.UncompressedBytes, f.DecodedFloor, f.DecodedEstimate, withDict, decoded)
			if got := float64(decoded) / float64(f.UncompressedBytes); got < c.least {
				t.Fatalf("decodes to %.2f times the uncompressed bytes, want at least %.1f: not the case meant", got, c.least)
			}
			if f.DecodedFloor > decoded {
				t.Errorf("floor %d is more than the %d bytes decoded", f.DecodedFloor, decoded)
			}
			for what, est := range map[string]int64{"estimate": f.DecodedEstimate, "estimate with the dictionaries' headers": withDict} {
				if r := float64(decoded) / float64(est); r < 0.95 || r > 1.05 {
					t.Errorf("%s %d is %.3f of the %d bytes decoded, want within 5%%", what, est, 1/r, decoded)
				}
			}
		})
	}
}
