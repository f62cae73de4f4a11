package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
	"unsafe"

	"github.com/relayout/relayout/loader"
)

// epochTimes produces one epoch of batches of n samples through one reader
// (one worker) and returns the seconds and the tensor bytes produced.
// copyOut copies every tensor into a staging buffer (what a pinned-memory
// loader does); v1 views are not copied.
func epochTimes(out string, order string, n int64, copyOut bool) (float64, int64, error) {
	return epochTimesOf(out, order, n, copyOut, false, false)
}

// epochTimesOf times one epoch of a fresh Dataset; with reuse, the second
// epoch of one Dataset whose readers set ReadOptions.Reuse: a training
// job's steady state, the window buffers warm (and with mapped, which sets
// Options.ReadMapped, the shards' maps).
func epochTimesOf(out string, order string, n int64, copyOut, reuse, mapped bool) (float64, int64, error) {
	d, err := loader.Open(out, loader.Options{ReadMapped: mapped})
	if err != nil {
		return 0, 0, err
	}
	defer d.Close()
	o := loader.ReadOptions{Assignment: loader.Assignment{Seed: 1, Shuffle: order != loader.OrderNone}, Order: order, Batch: n, Reuse: reuse}
	if reuse {
		r, err := d.NewReader(o)
		if err != nil {
			return 0, 0, err
		}
		for b, err := r.Next(); b != nil || err != nil; b, err = r.Next() {
			if err != nil {
				return 0, 0, err
			}
		}
		o.Epoch = 1
	}
	r, err := d.NewReader(o)
	if err != nil {
		return 0, 0, err
	}
	stage := make([]byte, 64<<20)
	var bytes int64
	t0 := time.Now()
	for {
		b, err := r.Next()
		if err != nil {
			return 0, 0, err
		}
		if b == nil {
			break
		}
		off := 0
		for _, t := range b.Tensors {
			bytes += int64(len(t.Data))
			if copyOut {
				if off+len(t.Data) > len(stage) {
					off = 0
				}
				off += copy(stage[off:], t.Data)
			}
		}
	}
	return time.Since(t0).Seconds(), bytes, nil
}

// plainCopy is the rate of copying `bytes` bytes in 4 MiB pieces from one
// buffer to another: the ceiling a loader that copies its batches out is
// measured against. The median of 5 passes after a first that faults the
// buffers in (one pass takes a few milliseconds, so one alone is noise).
func plainCopy(bytes int64) float64 {
	src, dst := make([]byte, 256<<20), make([]byte, 4<<20)
	for i := range src {
		src[i] = byte(i)
	}
	var rates []float64
	for rep := 0; rep < 6; rep++ {
		t0 := time.Now()
		for done, off := int64(0), 0; done < bytes; done += int64(len(dst)) {
			if off+len(dst) > len(src) {
				off = 0
			}
			copy(dst, src[off:off+len(dst)])
			off += len(dst)
		}
		if rep > 0 {
			rates = append(rates, float64(bytes)/time.Since(t0).Seconds())
		}
	}
	return medianF(rates)
}

// mixingOf measures batch composition of an order: distinct countries per
// 512-sample batch and the standard deviation of per-batch click rate.
func mixingOf(country []int64, click []float64, order []int64) (float64, float64) {
	var distinct, sum, sum2 float64
	nb := len(order) / 512
	for b := 0; b < nb; b++ {
		set := map[int64]bool{}
		var c float64
		for _, s := range order[b*512 : (b+1)*512] {
			set[country[s]] = true
			c += click[s]
		}
		distinct += float64(len(set))
		sum += c / 512
		sum2 += (c / 512) * (c / 512)
	}
	mean := sum / float64(nb)
	return distinct / float64(nb), math.Sqrt(max(sum2/float64(nb)-mean*mean, 0))
}

// orderOf returns an epoch's global sample order under order (one reader).
func orderOf(out, order string) ([]int64, error) {
	d, err := loader.Open(out, loader.Options{})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	r, err := d.NewReader(loader.ReadOptions{Assignment: loader.Assignment{Seed: 1, Shuffle: order != loader.OrderNone}, Order: order, Batch: 512, Index: true})
	if err != nil {
		return nil, err
	}
	var idx []int64
	for {
		b, err := r.Next()
		if err != nil || b == nil {
			return idx, err
		}
		t, _ := b.Get(loader.IndexTensor)
		idx = append(idx, unsafe.Slice((*int64)(unsafe.Pointer(unsafe.SliceData(t.Data))), len(t.Data)/8)...)
	}
}

// mixingBench: batches in relayout-order-v2 (window) against v1 (block)
// views and copies and a plain copy of the same bytes, flat and packed, one
// worker; then batch composition of block, window and a uniform shuffle.
func mixingBench(flat, packed string, reps int, res map[string]any) {
	fmt.Printf("\n== loader orders, one worker, batches of %d (median of %d)\n", batchRows, reps)
	out := map[string]any{}
	cases := []struct{ name, dir string }{{"flat", flat}, {"packed", packed}}
	for _, c := range cases {
		var v1v, v1c, v2, v2c, v2r, v2m, v2rm []float64
		var bytes int64
		for i := 0; i < reps; i++ {
			s, _, err := epochTimes(c.dir, loader.OrderBlock, batchRows, false)
			if err != nil {
				fmt.Printf("  %s: %v\n", c.name, err)
				return
			}
			v1v = append(v1v, s)
			s, bytes, _ = epochTimes(c.dir, loader.OrderBlock, batchRows, true)
			v1c = append(v1c, s)
			// v2's batches are already copies (the window scattered into
			// batch order): that is its staging copy; v2c copies them once
			// more, as a loader that stages into pinned memory would.
			s, _, _ = epochTimes(c.dir, loader.OrderWindow, batchRows, false)
			v2 = append(v2, s)
			s, _, _ = epochTimes(c.dir, loader.OrderWindow, batchRows, true)
			v2c = append(v2c, s)
			s, _, _ = epochTimesOf(c.dir, loader.OrderWindow, batchRows, false, true, false)
			v2r = append(v2r, s)
			s, _, _ = epochTimesOf(c.dir, loader.OrderWindow, batchRows, false, false, true)
			v2m = append(v2m, s)
			s, _, _ = epochTimesOf(c.dir, loader.OrderWindow, batchRows, false, true, true)
			v2rm = append(v2rm, s)
		}
		cp := plainCopy(bytes)
		mv, mc, mw, mwc, mwr, mwm, mwrm := medianF(v1v), medianF(v1c), medianF(v2), medianF(v2c), medianF(v2r), medianF(v2m), medianF(v2rm)
		gb := func(s float64) float64 { return float64(bytes) / s / 1e9 }
		fmt.Printf("  %-6s %.0f MB/epoch: v1 views %.2f GB/s, v1 copied %.2f GB/s, v2 window (scattered copies) %.2f GB/s (rows read through the maps: %.2f), v2 copied again %.2f GB/s, v2 steady state (Reuse, 2nd epoch) %.2f GB/s (through the maps: %.2f); plain copy %.2f GB/s; v2/copy %.2fx, steady %.2fx (target >= 0.5x)\n",
			c.name, float64(bytes)/1e6, gb(mv), gb(mc), gb(mw), gb(mwm), gb(mwc), gb(mwr), gb(mwrm), cp/1e9, gb(mw)*1e9/cp, max(gb(mwr), gb(mwrm))*1e9/cp)
		out[c.name] = map[string]any{"bytes": bytes, "v1_views_gbps": gb(mv), "v1_copied_gbps": gb(mc), "v2_window_gbps": gb(mw), "v2_window_mapped_gbps": gb(mwm), "v2_copied_again_gbps": gb(mwc),
			"v2_reuse_gbps": gb(mwr), "v2_reuse_mapped_gbps": gb(mwrm), "plain_copy_gbps": cp / 1e9, "v2_over_copy": gb(mw) * 1e9 / cp, "v2_reuse_over_copy": max(gb(mwr), gb(mwrm)) * 1e9 / cp}
		// v2 at the batch size of the mixing figures below (and of much
		// training): a window holds 8x the batches, each a line being
		// filled per tensor.
		var w512, r512 []float64
		for i := 0; i < reps; i++ {
			s, _, _ := epochTimes(c.dir, loader.OrderWindow, 512, false)
			w512 = append(w512, s)
			s, _, _ = epochTimesOf(c.dir, loader.OrderWindow, 512, false, true, false)
			r512 = append(r512, s)
		}
		fmt.Printf("  %-6s batches of 512: v2 window %.2f GB/s, steady state %.2f GB/s; v2/copy %.2fx, steady %.2fx\n",
			c.name, gb(medianF(w512)), gb(medianF(r512)), gb(medianF(w512))*1e9/cp, gb(medianF(r512))*1e9/cp)
		out[c.name].(map[string]any)["v2_window_512_gbps"], out[c.name].(map[string]any)["v2_reuse_512_gbps"] = gb(medianF(w512)), gb(medianF(r512))
	}
	// The same v2 epochs with the Go heap in huge pages (opt-in:
	// loader.AdviseHugePages), last, since the advice is for the whole
	// process.
	if stop, asked, why := loader.AdviseHugePages(loader.DefaultWindowBytes); !asked {
		fmt.Printf("  loader.AdviseHugePages did not ask here: %s\n", why)
	} else {
		for _, c := range cases {
			var v2, v2r []float64
			var bytes int64
			for i := 0; i < reps; i++ {
				s, n, err := epochTimes(c.dir, loader.OrderWindow, batchRows, false)
				if err != nil {
					fmt.Printf("  %s: %v\n", c.name, err)
					break
				}
				v2, bytes = append(v2, s), n
				s, _, _ = epochTimesOf(c.dir, loader.OrderWindow, batchRows, false, true, false)
				v2r = append(v2r, s)
			}
			if len(v2) == 0 {
				continue
			}
			cp := plainCopy(bytes)
			gb := func(s float64) float64 { return float64(bytes) / s / 1e9 }
			mw, mwr := medianF(v2), medianF(v2r)
			fmt.Printf("  %-6s with loader.AdviseHugePages: v2 window %.2f GB/s, v2 steady state %.2f GB/s; plain copy %.2f GB/s; v2/copy %.2fx, steady %.2fx\n",
				c.name, gb(mw), gb(mwr), cp/1e9, gb(mw)*1e9/cp, gb(mwr)*1e9/cp)
			if m, ok := out[c.name].(map[string]any); ok {
				m["huge_pages_v2_window_gbps"], m["huge_pages_v2_reuse_gbps"] = gb(mw), gb(mwr)
			}
		}
		stop()
	}
	// Composition, on the flat output's country and click tensors.
	all, err := orderOf(flat, loader.OrderNone)
	if err == nil {
		d, _ := loader.Open(flat, loader.Options{})
		r, _ := d.NewReader(loader.ReadOptions{Order: loader.OrderNone, Batch: 1 << 20, Index: true})
		country, click := make([]int64, len(all)), make([]float64, len(all))
		for {
			b, err := r.Next()
			if err != nil || b == nil {
				break
			}
			ix, _ := b.Get(loader.IndexTensor)
			ct, _ := b.Get("country")
			kt, _ := b.Get("click")
			is := unsafe.Slice((*int64)(unsafe.Pointer(unsafe.SliceData(ix.Data))), len(ix.Data)/8)
			cs := unsafe.Slice((*int64)(unsafe.Pointer(unsafe.SliceData(ct.Data))), len(ct.Data)/8)
			ks := unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(kt.Data))), len(kt.Data)/4)
			for i, s := range is {
				country[s], click[s] = cs[i], float64(ks[i])
			}
		}
		d.Close()
		uniform := make([]int64, len(all))
		for i := range uniform {
			uniform[i] = int64(i)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		rng.Shuffle(len(uniform), func(i, j int) { uniform[i], uniform[j] = uniform[j], uniform[i] })
		mix := map[string]any{}
		for _, o := range []string{loader.OrderBlock, loader.OrderWindow, "uniform"} {
			ord := uniform
			if o != "uniform" {
				ord, _ = orderOf(flat, o)
			}
			dc, sd := mixingOf(country, click, ord)
			fmt.Printf("  mixing (flat, seed 1, batches of 512): %-7s %.2f distinct countries per batch, click-rate std %.4f\n", o, dc, sd)
			mix[o] = map[string]float64{"distinct_countries": dc, "click_rate_std": sd}
		}
		out["mixing"] = mix
	}
	res["loader_orders"] = out
}

func medianF(v []float64) float64 {
	s := append([]float64{}, v...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}
