package loader

import (
	"os"
	"strconv"
	"sync"
	"testing"
)

// BenchmarkEpoch produces every 4096-sample batch of an existing output
// (RELAYOUT_BENCH_OUTPUT) with the maps already open: a warm epoch.
func BenchmarkEpoch(b *testing.B) {
	d, bs := openBench(b)
	defer d.Close()
	stage := make([]byte, 64<<20)
	var n int64
	for i := 0; i < b.N; i++ {
		n = 0
		for _, rs := range bs {
			bt, err := d.Batch(rs)
			if err != nil {
				b.Fatal(err)
			}
			off := 0
			for _, t := range bt.Tensors {
				off += copy(stage[off:], t.Data)
				n += int64(len(t.Data))
			}
		}
	}
	b.SetBytes(n)
}

// BenchmarkEpochViews is BenchmarkEpoch without the copy: views only.
func BenchmarkEpochViews(b *testing.B) {
	d, bs := openBench(b)
	defer d.Close()
	for i := 0; i < b.N; i++ {
		for _, rs := range bs {
			if _, err := d.Batch(rs); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// openBench opens RELAYOUT_BENCH_OUTPUT and plans one shuffled epoch of
// 4096-sample batches.
func openBench(b *testing.B) (*Dataset, [][]Range) {
	out := os.Getenv("RELAYOUT_BENCH_OUTPUT")
	if out == "" {
		b.Skip("set RELAYOUT_BENCH_OUTPUT to an output with tensor shards")
	}
	d, err := Open(out, benchOptions())
	if err != nil {
		b.Fatal(err)
	}
	bs, err := d.Batches(Assignment{Seed: 1, Shuffle: true}, 4096)
	if err != nil {
		d.Close()
		b.Fatal(err)
	}
	return d, bs
}

// benchOptions: RELAYOUT_BENCH_MAPPED=1 sets Options.ReadMapped, to
// compare reading the window order's rows through the maps with pread;
// RELAYOUT_BENCH_HUGE_PAGES=1 calls AdviseHugePages first (once).
func benchOptions() Options {
	if os.Getenv("RELAYOUT_BENCH_HUGE_PAGES") != "" {
		benchHugePages.Do(func() { AdviseHugePages(DefaultWindowBytes) })
	}
	return Options{ReadMapped: os.Getenv("RELAYOUT_BENCH_MAPPED") != ""}
}

var benchHugePages sync.Once

// BenchmarkWindowEpochFresh is BenchmarkWindowEpoch with a Dataset opened
// for each epoch (fresh maps), as a DataLoader worker does when it is not
// persistent.
func BenchmarkWindowEpochFresh(b *testing.B) {
	out := os.Getenv("RELAYOUT_BENCH_OUTPUT")
	if out == "" {
		b.Skip("set RELAYOUT_BENCH_OUTPUT to an output with tensor shards")
	}
	var n int64
	for i := 0; i < b.N; i++ {
		d, err := Open(out, benchOptions())
		if err != nil {
			b.Fatal(err)
		}
		n = epochOf(b, d, false)
		d.Close()
	}
	b.SetBytes(n)
}

// BenchmarkWindowEpoch produces one reader's epoch of 4096-sample batches in
// the window order (relayout-order-v2): the gathered copies issue 14
// measures against a plain copy.
func BenchmarkWindowEpoch(b *testing.B) { windowEpoch(b, false) }

// BenchmarkWindowEpochReuse is BenchmarkWindowEpoch with ReadOptions.Reuse:
// each epoch scatters into the last one's buffers.
func BenchmarkWindowEpochReuse(b *testing.B) { windowEpoch(b, true) }

func windowEpoch(b *testing.B, reuse bool) {
	d, _ := openBench(b)
	defer d.Close()
	var n int64
	for i := 0; i < b.N; i++ {
		n = epochOf(b, d, reuse)
	}
	b.SetBytes(n)
}

// epochOf reads one window-order epoch of 4096-sample batches from d and
// returns its tensor bytes.
func epochOf(b *testing.B, d *Dataset, reuse bool) int64 {
	r, err := d.NewReader(ReadOptions{Assignment: Assignment{Seed: 1, Shuffle: true}, Batch: benchBatch(), Reuse: reuse})
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for {
		bt, err := r.Next()
		if err != nil {
			b.Fatal(err)
		}
		if bt == nil {
			return n
		}
		for _, t := range bt.Tensors {
			n += int64(len(t.Data))
		}
	}
}

// benchBatch is the window benchmarks' batch size: 4096, or
// RELAYOUT_BENCH_BATCH.
func benchBatch() int64 {
	if v, err := strconv.ParseInt(os.Getenv("RELAYOUT_BENCH_BATCH"), 10, 64); err == nil && v > 0 {
		return v
	}
	return 4096
}
