package plan_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/relayout/relayout/internal/sourcetest"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/plan"
	"github.com/relayout/relayout/source"
)

// TestRowGroupsDecodeWithin: what the plan counts for decoding a row
// group (plan.DecodeBytes and source.File.DecodeExtra for one decoded
// whole) covers what decoding it allocates, with the collector off so that
// nothing allocated is freed: arrow-go's string builders grow by doubling
// and the values are then copied to their size, so a row group of strings
// allocates several times its decoded bytes. Row groups of strings under
// the size above which every row group is sliced (plan.SliceAbove) are
// decoded in slices where that holds less; numbers are not.
func TestRowGroupsDecodeWithin(t *testing.T) {
	for _, tc := range []struct {
		name, sql string
		rows      int
		sliced    bool
	}{
		// 31 MiB decoded, in one page: 183 MiB to decode whole.
		{"strings", "SELECT (range%20)::INT AS k, md5(range::VARCHAR) || md5((range*7)::VARCHAR)[1:20] AS s FROM range(524288)", 524288, true},
		{"short strings", "SELECT (range%20)::INT AS k, md5(range::VARCHAR) AS s FROM range(65536)", 65536, false},
		{"numbers", "SELECT (range%20)::INT AS k, range/3.0 AS a, range/7.0 AS b, range*2 AS c, range::DOUBLE AS d FROM range(524288)", 524288, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "t.parquet")
			testutil.DuckDB(t, fmt.Sprintf("COPY (%s) TO '%s' (FORMAT parquet, ROW_GROUP_SIZE %d)", tc.sql, p, tc.rows))
			ctx := context.Background()
			tbl := sourcetest.Open(t, p)
			f := tbl.Files[0]
			ref := source.RowGroupRef{File: f, RowGroup: 0}
			if ref.Rows() != int64(tc.rows) {
				t.Fatalf("%d rows in the row group, want %d", ref.Rows(), tc.rows)
			}
			if got := plan.SliceRowsOf(ref) > 0; got != tc.sliced {
				t.Fatalf("decoded in slices: %v, want %v", got, tc.sliced)
			}
			extra := f.DecodeExtra(0)
			// Decoded whole, as a row group not sliced is. The collector
			// runs at every 1% of growth, so the heap's objects are about
			// what is live; the most of them, sampled every millisecond
			// while the row group is decoded, is what decoding it held,
			// with what was allocated since the last collection (a
			// column's values are one allocation of several MiB): it
			// varied from 51 to 61 MiB for the numbers, against 53
			// counted, so a tenth and 4 MiB more are allowed.
			counted := plan.DecodeBytes(ref.Rows(), f.DecodedRowBytes(), 0, source.Page{}) + extra
			defer debug.SetGCPercent(debug.SetGCPercent(1))
			runtime.GC()
			sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
			heap := func() int64 {
				metrics.Read(sample)
				return int64(sample[0].Value.Uint64())
			}
			base := heap()
			stop, done := make(chan struct{}), make(chan int64)
			go func() {
				var most int64
				tick := time.NewTicker(time.Millisecond)
				defer tick.Stop()
				for {
					most = max(most, heap())
					select {
					case <-stop:
						done <- most
						return
					case <-tick.C:
					}
				}
			}()
			rec, err := tbl.Read(ctx, ref, nil, runtime.GOMAXPROCS(0))
			close(stop)
			held := <-done - base
			if err != nil {
				t.Fatal(err)
			}
			rec.Release()
			t.Logf("decoded %.1f MiB; held up to %.1f MiB decoding it whole; counted %.1f MiB (%.1f of it beyond the values)",
				float64(ref.Rows())*f.DecodedRowBytes()/(1<<20), float64(held)/(1<<20), float64(counted)/(1<<20), float64(extra)/(1<<20))
			if float64(held) > 1.1*float64(counted)+4<<20 {
				t.Fatalf("decoding the row group whole held %d MiB, the plan counts %d", held>>20, counted>>20)
			}
		})
	}
}
