package pipeline

import (
	"context"
	"math/rand"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/plan"
	"github.com/relayout/relayout/storage"
)

// TestSampleOver256MiB: the encoding sample is the input's first row
// group, LZ4-compressed; arrow-go's IPC reader refuses a message body
// over 256 MiB by default, so a reduce refused the sample of a table
// whose first row group stores more than that. Its hash checked, it is
// now read without the limit.
func TestSampleOver256MiB(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: writes and reads a 272 MiB sample; make test runs it")
	}
	ctx := context.Background()
	n := 34 << 20 // random int64s, which LZ4 cannot shrink: 272 MiB
	vals := make([]byte, n*8)
	rand.New(rand.NewSource(5)).Read(vals)
	rec := testutil.Int64Batch(vals)
	sc := rec.Schema()
	defer rec.Release()
	work, err := storage.OpenDir(ctx, t.TempDir(), true)
	if err != nil {
		t.Fatal(err)
	}
	hash, err := putSample(ctx, work, plan.SampleFileName, rec)
	if err != nil {
		t.Fatal(err)
	}
	lp := &loadedPlan{Plan: &plan.Plan{Header: plan.Header{WorkFiles: map[string]string{workFileKey(plan.SampleFileName): hash}}, Rows: int64(n)}, work: work}
	got, err := lp.sample(ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	defer func() { // the process's cache of samples holds it too: not for the other tests
		key := sampleCacheKey{lp.sampleKey, sc.String()}
		if v, ok := samples.LoadAndDelete(key); ok {
			v.(arrow.RecordBatch).Release()
		}
	}()
	if got.NumRows() != int64(n) || !array.Equal(got.Column(0), rec.Column(0)) {
		t.Fatalf("read back %d rows, other values than written", got.NumRows())
	}
}
