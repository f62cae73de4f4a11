package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/cespare/xxhash/v2"

	"github.com/relayout/relayout/loader"
)

const batchRows = 4096

// denseBatch is what a training step consumes: the float features as one
// float32 [n, 16] matrix, int64 ids and the int32 label.
type denseBatch struct {
	dense               []float32
	user, item, country []int64
	label               []int32
}

func (b *denseBatch) reset(n int) {
	if cap(b.dense) < 16*n {
		b.dense = make([]float32, 16*n)
		b.user, b.item, b.country, b.label = make([]int64, n), make([]int64, n), make([]int64, n), make([]int32, n)
	}
	b.dense, b.user, b.item, b.country, b.label = b.dense[:16*n], b.user[:n], b.item[:n], b.country[:n], b.label[:n]
}

// shardTimes are the parts of producing an epoch's batches from shards.
type shardTimes struct {
	open, views, staged time.Duration
	rows                int64
}

// fromShards opens the shards through the Go loader, then produces every
// batch twice: as zero-copy views (dense arrays ready for the host-to-device
// copy, as the Parquet path's converted arrays are) and again copied into
// staging buffers (the pinned-memory copy a loader may add).
func fromShards(out string) (shardTimes, error) {
	var st shardTimes
	t0 := time.Now()
	d, err := loader.Open(out, loader.Options{})
	if err != nil {
		return st, err
	}
	defer d.Close()
	bs, err := d.Batches(loader.Assignment{Seed: 1, Shuffle: true}, batchRows)
	if err != nil {
		return st, err
	}
	st.open = time.Since(t0)
	var b denseBatch
	for pass := 0; pass < 2; pass++ {
		t1 := time.Now()
		st.rows = 0
		for _, rs := range bs {
			bt, err := d.Batch(rs)
			if err != nil {
				return st, err
			}
			n := int(bt.Samples)
			st.rows += int64(n)
			if pass == 0 {
				continue
			}
			b.reset(n)
			get := func(name string) []byte { t, _ := bt.Get(name); return t.Data }
			copy(bytesOf(b.dense), get("dense"))
			copy(bytesOf(b.user), get("user_id"))
			copy(bytesOf(b.item), get("item_id"))
			copy(bytesOf(b.country), get("country"))
			copy(bytesOf(b.label), get("click"))
		}
		if pass == 0 {
			st.views = time.Since(t1)
		} else {
			st.staged = time.Since(t1)
		}
	}
	return st, nil
}

// fromParquet decodes the source Parquet with arrow-go in 4096-row record
// batches (only the needed columns) and converts each into the same arrays.
func fromParquet(files []string) (time.Duration, int64, error) {
	t0 := time.Now()
	var b denseBatch
	var rows int64
	names := []string{"user_f0", "user_f1", "user_f2", "user_f3", "user_f4", "user_f5", "user_f6", "user_f7",
		"item_f0", "item_f1", "item_f2", "item_f3", "item_f4", "item_f5", "item_f6", "item_f7", "user_id", "item_id", "country", "click"}
	for _, p := range files {
		pf, err := file.OpenParquetFile(p, true)
		if err != nil {
			return 0, 0, err
		}
		fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: batchRows, Parallel: true}, memory.DefaultAllocator)
		if err != nil {
			return 0, 0, err
		}
		sc, _ := fr.Schema()
		var cols []int
		for _, n := range names {
			idx := sc.FieldIndices(n)
			if len(idx) == 0 {
				return 0, 0, fmt.Errorf("%s: no column %s", p, n)
			}
			cols = append(cols, idx[0])
		}
		rr, err := fr.GetRecordReader(context.Background(), cols, nil)
		if err != nil {
			return 0, 0, err
		}
		for rr.Next() {
			rec := rr.RecordBatch()
			n := int(rec.NumRows())
			b.reset(n)
			for j := 0; j < 16; j++ {
				v := rec.Column(j).(*array.Float32).Float32Values()
				for i, x := range v {
					b.dense[i*16+j] = x
				}
			}
			copy(b.user, rec.Column(16).(*array.Int64).Int64Values())
			copy(b.item, rec.Column(17).(*array.Int64).Int64Values())
			cs := rec.Column(18).(*array.String)
			for i := 0; i < n; i++ {
				b.country[i] = int64(xxhash.Sum64String(cs.Value(i)) % 1000)
			}
			cl := rec.Column(19).(*array.Int32)
			for i := 0; i < n; i++ {
				if cl.IsNull(i) {
					b.label[i] = 0
				} else {
					b.label[i] = cl.Value(i)
				}
			}
			rows += int64(n)
		}
		if err := rr.Err(); err != nil {
			return 0, 0, err
		}
		rr.Release()
		pf.Close()
	}
	return time.Since(t0), rows, nil
}

func bytesOf[T any](v []T) []byte {
	if len(v) == 0 {
		return nil
	}
	var z T
	return unsafeBytes(v, int(sizeOfT(z)))
}

func medianDur(ds []time.Duration) time.Duration {
	s := append([]time.Duration{}, ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// tensorBench runs the tensor benchmarks of issue 4.
func tensorBench(dir, in string, reps int, res map[string]any) {
	flat := filepath.Join(dir, "tensors-dense")
	var withT, without []measure
	for i := 0; i < reps; i++ {
		m, _ := timed("bin/relayout", "run", "--quiet", "--overwrite", "--input", in, "--output", flat, "--slice-keys", "country,date", "--tensor-spec", "bench/tensors-dense.yaml")
		withT = append(withT, m)
		m, _ = timed("bin/relayout", "run", "--quiet", "--overwrite", "--input", in, "--output", filepath.Join(dir, "relaid"), "--slice-keys", "country,date")
		without = append(without, m)
	}
	wt, wo := median(withT), median(without)
	fmt.Printf("\n== tensor shards (--tensor-spec bench/tensors-dense.yaml), median of %d\n", reps)
	fmt.Printf("run with shards %.2f s, %.0f MB peak RSS; without %.2f s, %.0f MB (%.2fx time)\n", wt.Seconds, float64(wt.RSS)/1e6, wo.Seconds, float64(wo.RSS)/1e6, wt.Seconds/wo.Seconds)

	// Batches: shards through the Go loader vs the source Parquet.
	files, _ := filepath.Glob(filepath.Join(in, "*.parquet"))
	var sts []shardTimes
	var tp []time.Duration
	var rp int64
	for i := 0; i < reps; i++ {
		st, err := fromShards(flat)
		if err != nil {
			panic(err)
		}
		sts = append(sts, st)
		d, n, err := fromParquet(files)
		if err != nil {
			panic(err)
		}
		tp, rp = append(tp, d), n
	}
	pick := func(f func(shardTimes) time.Duration) time.Duration {
		var ds []time.Duration
		for _, st := range sts {
			ds = append(ds, f(st))
		}
		return medianDur(ds)
	}
	open, views, staged := pick(func(s shardTimes) time.Duration { return s.open }), pick(func(s shardTimes) time.Duration { return s.views }), pick(func(s shardTimes) time.Duration { return s.staged })
	p := medianDur(tp)
	rs := sts[0].rows
	fmt.Printf("every %d-row batch as dense arrays (16 float32 features, 3 ids, label), Go, median of %d:\n", batchRows, reps)
	fmt.Printf("  from Parquet          %8.4f s (%d rows; arrow-go decode of the 20 columns + conversion)\n", p.Seconds(), rp)
	fmt.Printf("  from shards, views    %8.4f s (%d rows; zero-copy views, after a %.4f s open)  ratio %.1fx (target >= 20x)\n", views.Seconds(), rs, open.Seconds(), p.Seconds()/views.Seconds())
	fmt.Printf("  from shards, open + views %.4f s  ratio %.1fx\n", (open + views).Seconds(), p.Seconds()/(open+views).Seconds())
	fmt.Printf("  from shards, copied   %8.4f s (views copied into staging buffers)  ratio %.1fx\n", staged.Seconds(), p.Seconds()/staged.Seconds())
	res["tensors"] = map[string]any{"run_with_shards": wt, "run_without": wo, "batches_parquet_seconds": p.Seconds(),
		"batches_shards_open_seconds": open.Seconds(), "batches_shards_views_seconds": views.Seconds(), "batches_shards_copied_seconds": staged.Seconds(),
		"ratio_views": p.Seconds() / views.Seconds(), "ratio_open_views": p.Seconds() / (open + views).Seconds(), "ratio_copied": p.Seconds() / staged.Seconds()}

	// Transfer: tensor bytes per epoch, packed vs flat, against the ratio
	// predicted from items per query.
	fl, pk := filepath.Join(dir, "tensors-flat"), filepath.Join(dir, "tensors-packed")
	timed("bin/relayout", "run", "--quiet", "--overwrite", "--input", in, "--output", fl, "--slice-keys", "country,date", "--sort-keys", "query_id", "--tensor-spec", "bench/tensors-levels.yaml")
	timed("bin/relayout", "run", "--quiet", "--overwrite", "--input", in, "--output", pk, "--slice-keys", "country,date", "--query-key", "query_id", "--tensor-spec", "bench/tensors-levels.yaml")
	flatLv, _, _ := levelBytes(fl)
	pkLv, q, items := levelBytes(pk)
	flatBytes := flatLv["row"]
	packedBytes := pkLv["query"] + pkLv["item"]
	// Prediction: flat repeats each query's features on each of its items;
	// packed stores them once plus one int64 offset per query (and one per
	// shard).
	qb := (pkLv["query"] - 8*float64(q+int64(shardsOf(pk)))) / float64(q)
	ib := pkLv["item"] / float64(items)
	ipq := float64(items) / float64(q)
	predicted := (ipq * (qb + ib)) / (qb + 8 + ipq*ib)
	measured := flatBytes / packedBytes
	fmt.Printf("transfer per epoch: flat %.1f MB, packed %.1f MB (%.3fx less); predicted from %.2f items/query (%.0f B query, %.0f B item): %.3fx; agreement %.2f%% (target within 1%%)\n",
		flatBytes/1e6, packedBytes/1e6, measured, ipq, qb, ib, predicted, 100*math.Abs(measured-predicted)/predicted)
	res["transfer"] = map[string]any{"flat_bytes": flatBytes, "packed_bytes": packedBytes, "ratio": measured, "predicted": predicted, "items_per_query": ipq}

	// NumPy loader vs a plain copy, flat and packed.
	for _, c := range []struct{ name, out, key string }{{"flat", flat, "numpy_loader"}, {"packed", pk, "numpy_loader_packed"}} {
		outp, err := pyBench("bench/numpy_loader.py", c.out, batchRows, reps)
		var np struct {
			Window      float64 `json:"window_gbps"`
			WindowReuse float64 `json:"window_reuse_gbps"`
			Block       float64 `json:"block_gbps"`
			CopyMap     float64 `json:"copy_map_gbps"`
			CopyPread   float64 `json:"copy_pread_gbps"`
			CopyMemory  float64 `json:"copy_memory_gbps"`
		}
		if err == nil && json.Unmarshal(outp, &np) == nil && np.CopyMemory > 0 {
			fmt.Printf("NumPy loader, %s (batches copied to a staging buffer, a fresh Dataset an epoch), GB/s: window order %.2f (window arrays in fresh memory), %.2f (kept from the last epoch); block order %.2f; plain copies of the same bytes: memcpy %.2f, pread %.2f, from fresh maps %.2f; window ÷ memcpy %.3fx, kept %.3fx (target >= 0.5x)\n",
				c.name, np.Window, np.WindowReuse, np.Block, np.CopyMemory, np.CopyPread, np.CopyMap, np.Window/np.CopyMemory, np.WindowReuse/np.CopyMemory)
			res[c.key] = json.RawMessage(outp)
			// The same in a process that called tune_malloc() first.
			if tp, err := pyBench("bench/numpy_loader.py", c.out, batchRows, reps, "RELAYOUT_TUNE_MALLOC=1"); err == nil && json.Unmarshal(tp, &np) == nil && np.CopyMemory > 0 {
				fmt.Printf("NumPy loader, %s, after tune_malloc(): window order %.2f GB/s (fresh arrays), %.2f (kept); memcpy %.2f; window ÷ memcpy %.3fx, kept %.3fx\n",
					c.name, np.Window, np.WindowReuse, np.CopyMemory, np.Window/np.CopyMemory, np.WindowReuse/np.CopyMemory)
				res[c.key+"_tuned"] = json.RawMessage(tp)
			}
		} else {
			fmt.Printf("NumPy loader, %s: not measured (%v; run make deps)\n", c.name, err)
		}
	}

	// PyTorch's DataLoader over TorchDataset, in the process and with two
	// workers (batches cross from the workers in shared memory).
	for _, c := range []struct{ name, out, key string }{{"flat", flat, "torch_loader"}, {"packed", pk, "torch_loader_packed"}} {
		outp, err := pyBench("bench/torch_loader.py", c.out, batchRows, reps)
		type epoch struct{ Seconds, GBps float64 }
		var tl struct {
			W0 epoch `json:"workers_0"`
			W2 epoch `json:"workers_2"`
		}
		if err == nil && json.Unmarshal(outp, &tl) == nil {
			fmt.Printf("PyTorch DataLoader, %s, window order: in the process %.3f s an epoch (%.2f GB/s), 2 workers %.3f s (%.2f GB/s)\n",
				c.name, tl.W0.Seconds, tl.W0.GBps, tl.W2.Seconds, tl.W2.GBps)
			res[c.key] = json.RawMessage(outp)
		} else {
			fmt.Printf("PyTorch DataLoader, %s: not measured (%v; run make deps)\n", c.name, err)
		}
	}

	mixingBench(flat, pk, reps, res)
}

// pyBench runs a Python bench script on an output (batches of batchRows,
// at least 3 repetitions) with the loader on its path, and returns what it
// prints.
func pyBench(script, out string, batchRows, reps int, env ...string) ([]byte, error) {
	cmd := exec.Command("/usr/bin/python3", script, out, fmt.Sprint(batchRows), fmt.Sprint(max(reps, 3)))
	cmd.Env = append(append(os.Environ(), "PYTHONPATH=python"), env...)
	return cmd.Output()
}

// levelBytes sums the tensor bytes of an output's shards by level, and
// returns its queries and items.
func levelBytes(out string) (map[string]float64, int64, int64) {
	d, err := loader.Open(out, loader.Options{})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	lv := map[string]string{}
	for _, t := range d.Manifest.Tensors.Schema {
		lv[t.Name] = t.Level
	}
	sums := map[string]float64{}
	for _, s := range d.Manifest.Tensors.Shards {
		f, err := os.Open(filepath.Join(out, s.Path))
		if err != nil {
			panic(err)
		}
		h, err := loader.ReadHeader(f, s.Bytes)
		f.Close()
		if err != nil {
			panic(err)
		}
		for _, t := range h.Tensors {
			sums[lv[t.Name]] += float64(t.End - t.Begin)
		}
	}
	mt := d.Manifest.Tensors
	return sums, mt.Totals.Rows, mt.Totals.Items
}

func shardsOf(out string) int {
	d, err := loader.Open(out, loader.Options{})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	return len(d.Manifest.Tensors.Shards)
}
