package loader

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"unsafe"

	"github.com/cespare/xxhash/v2"

	"github.com/relayout/relayout/internal/par"
	"github.com/relayout/relayout/manifests"
)

// Options configures Open.
type Options struct {
	// Slices restricts reading to these manifest slices (indices into
	// Manifest.Slices); nil reads everything.
	Slices []int
	// VerifyChecksums hashes every shard when it is first mapped and fails
	// on a mismatch with the manifest's xxhash64.
	VerifyChecksums bool
	// Weights are sampling weights per slice index, and KeyWeights per
	// slice-key value (key name -> value as the manifest prints it ->
	// weight); a slice's weight is the product of its own and its key
	// values' (1 where none is given; 0 leaves it out). Weighted epochs
	// (window order only) give each slice round(M*w/sum(w)) samples, M the
	// selected samples: repeated when up-weighted, a random subset of its
	// blocks when down-weighted.
	Weights    map[int]float64
	KeyWeights map[string]map[string]float64
	// Generation picks a dataset root's generation (0: the newest).
	Generation int
	// CacheDir, CacheBytes and PrefetchWindows configure a remote output
	// (s3://, gs://, azblob://, mem:// with the CLI's query parameters): its
	// shards are downloaded into CacheDir (default: the user cache folder,
	// one per output), never more than CacheBytes (default
	// DefaultCacheBytes) on disk, PrefetchWindows windows ahead (default
	// DefaultPrefetchWindows). Several readers may share one CacheDir.
	CacheDir        string
	CacheBytes      int64
	PrefetchWindows int
	// MaxRequests bounds a remote dataset's ranged reads in flight
	// (default DefaultMaxRequests). Against a store with tens of
	// milliseconds of latency per request, throughput is about MaxRequests
	// requests per round trip.
	MaxRequests int
	// ReadMapped makes the window order read a shard's rows through its
	// memory map, as the block order's views do. By default it reads them
	// with pread into a small buffer: the first pass over a fresh mapping
	// costs a page-table entry per 4 KiB page (on the 2-core VM of
	// docs/benchmarks.md, 93 MB read through a fresh map took 40 ms, by
	// pread 9 ms), and the pages read stay out of the reader's resident
	// set. A Dataset kept open for many epochs over shards that stay in
	// the page cache reads a little faster mapped (its second pass on).
	ReadMapped bool
}

// Tensor is one tensor of a batch.
type Tensor struct {
	Name  string
	DType string
	Shape []int
	// Data is little-endian; it is a view into a shard's memory map when
	// the batch lies in one shard piece (offsets tensors are always copied,
	// rebased to start at 0).
	Data []byte
}

// Batch is a set of samples with every tensor cut to them.
type Batch struct {
	// Ranges are the batch's global sample ranges, in order.
	Ranges  []Range
	Samples int64
	Tensors []Tensor
}

// Get returns the named tensor.
func (b *Batch) Get(name string) (*Tensor, bool) {
	for i := range b.Tensors {
		if b.Tensors[i].Name == name {
			return &b.Tensors[i], true
		}
	}
	return nil, false
}

// Dataset is an output's tensor shards, opened for reading.
type Dataset struct {
	Manifest *manifests.Manifest
	root     string
	opts     Options
	sel      []Range
	weights  []SliceWeight
	mu       sync.Mutex
	shards   []*mapped
	pool     par.FreeList[*windowBuf] // recycled window buffers (ReadOptions.Reuse)
	// remote is a remote output's shard cache (nil: local files).
	remote *remote
	// blocked holds, per shard, the header of a remote output read by
	// block (nil until fetched); blockMaps the blocks read for the open
	// windows (in memory).
	blocked   []*blocked
	blockMaps map[unit]*mapped
	objs      map[unit]cacheObj // each unit's cache object, made once
	// files counts the shard files kept open (at most MaxOpenFiles).
	files int
}

// MaxOpenFiles is how many shard files a Dataset keeps open for pread at
// most; shards past it are read through their maps (the same bytes), so
// an output of thousands of shards needs no more file descriptors.
const MaxOpenFiles = 256

type mapped struct {
	data []byte
	// file is the shard's file, kept open while it is mapped for the
	// window order to read its rows with pread (unless Options.ReadMapped,
	// or MaxOpenFiles are open): nil for a block read into memory.
	file   *os.File
	header *Header
	index  map[string]TensorInfo
	// views are the schema's tensors in this shard, in schema order.
	views []tensorView
	items []int64 // query.item_offsets (packed), else nil
}

// tensorView is one tensor of a mapped shard, ready for row lookups.
type tensorView struct {
	data []byte // the tensor's bytes
	per  int64  // bytes per row (elements for values)
	item bool   // rows are items (query.item_offsets)
	// offs is the offsets tensor of a values tensor (or the tensor itself
	// for an offsets tensor), as int64s; offsItem says its rows are items.
	offs     []int64
	offsItem bool
	kind     string
}

// Open reads a manifest (a local path to manifest.json or its folder),
// or a dataset root's generation (opts.Generation; 0: the newest), whose
// parts read as one dataset.
func Open(path string, opts Options) (*Dataset, error) {
	var m *manifests.Manifest
	var rc *remote
	if IsRemote(path) {
		var err error
		if m, rc, err = openRemote(context.Background(), path, opts); err != nil {
			return nil, err
		}
	} else if isDatasetRoot(path) {
		var err error
		if m, err = openGeneration(path, opts.Generation); err != nil {
			return nil, err
		}
		path = filepath.Join(path, manifests.FileName) // shard paths are relative to the root
	} else {
		if st, err := os.Stat(path); err == nil && st.IsDir() {
			path = filepath.Join(path, manifests.FileName)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		if m, err = manifests.Decode(data); err != nil {
			return nil, err
		}
	}
	if m.Tensors == nil {
		return nil, fmt.Errorf("%s: this output has no tensor shards (run relayout with --tensors)", path)
	}
	if err := m.Tensors.Check(m.Slices); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	d := &Dataset{Manifest: m, root: filepath.Dir(path), opts: opts, shards: make([]*mapped, len(m.Tensors.Shards)), remote: rc,
		blocked: make([]*blocked, len(m.Tensors.Shards)), blockMaps: map[unit]*mapped{}, objs: map[unit]cacheObj{}}
	if rc != nil {
		rc.byBlock = len(m.Tensors.Shards) > 0
		for _, sh := range m.Tensors.Shards {
			rc.byBlock = rc.byBlock && sh.HeaderBytes > 0 && sh.HeaderXXHash64 != ""
		}
	}
	if opts.Slices != nil {
		for _, i := range opts.Slices {
			if i < 0 || i >= len(m.Slices) {
				return nil, fmt.Errorf("slice %d: the manifest has %d slices", i, len(m.Slices))
			}
			s := m.Slices[i]
			d.sel = append(d.sel, Range{s.FirstRow, s.FirstRow + s.Rows})
		}
		sort.Slice(d.sel, func(i, j int) bool { return d.sel[i].Start < d.sel[j].Start })
		d.sel = merge(d.sel)
		if d.sel == nil {
			d.sel = []Range{}
		}
	}
	if opts.Weights != nil || opts.KeyWeights != nil {
		if err := d.weigh(); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// weigh fixes each selected slice's weight.
func (d *Dataset) weigh() error {
	m := d.Manifest
	for i := range d.opts.Weights {
		if i < 0 || i >= len(m.Slices) {
			return fmt.Errorf("weights: slice %d: the manifest has %d slices", i, len(m.Slices))
		}
	}
	for k := range d.opts.KeyWeights {
		found := false
		for _, sk := range m.SliceKeys {
			found = found || sk == k
		}
		if !found {
			return fmt.Errorf("weights: %q is not a slice key (the slice keys are %v)", k, m.SliceKeys)
		}
	}
	// A value no slice has (a typo) would weigh nothing, silently.
	seen := map[[2]string]bool{}
	for _, s := range m.Slices {
		for _, kv := range s.Key {
			seen[[2]string{kv.Name, fmt.Sprint(kv.Value)}] = true
		}
	}
	for k, vs := range d.opts.KeyWeights {
		for v := range vs {
			if !seen[[2]string{k, v}] {
				return fmt.Errorf("weights: %s=%q matches no slice of the manifest", k, v)
			}
		}
	}
	for i, s := range m.Slices {
		r := Range{s.FirstRow, s.FirstRow + s.Rows}
		if d.sel != nil && len(cut([]Piece{r}, d.sel)) == 0 {
			continue
		}
		w := 1.0
		if x, ok := d.opts.Weights[i]; ok {
			w *= x
		}
		for _, kv := range s.Key {
			if x, ok := d.opts.KeyWeights[kv.Name][fmt.Sprint(kv.Value)]; ok {
				w *= x
			}
		}
		if w < 0 || math.IsNaN(w) || math.IsInf(w, 0) {
			return fmt.Errorf("weights: slice %d has weight %v; want a finite weight >= 0", i, w)
		}
		d.weights = append(d.weights, SliceWeight{Range: r, Weight: w})
	}
	return nil
}

func merge(rs []Range) []Range {
	var out []Range
	for _, r := range rs {
		if r.Len() <= 0 {
			continue
		}
		if n := len(out); n > 0 && r.Start <= out[n-1].End {
			out[n-1].End = max(out[n-1].End, r.End)
			continue
		}
		out = append(out, r)
	}
	return out
}

// Close unmaps the shards.
func (d *Dataset) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, s := range d.shards {
		if s != nil {
			d.unmapLocked(s)
			d.shards[i] = nil
		}
	}
	clear(d.blockMaps) // in memory, not mapped
	d.pool.Clear()
	if rc := d.remote; rc != nil {
		rc.mu.Lock()
		rc.uses, rc.mapped, rc.closed = map[string][]int{}, map[string]bool{}, true
		rc.mu.Unlock()
	}
	return nil
}

// unmap drops shard i's mapping (a remote reader done with it).
func (d *Dataset) unmap(i int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.shards[i]; s != nil {
		d.unmapLocked(s)
		d.shards[i] = nil
		if d.remote != nil {
			d.remote.setMapped(shardObj(d.Manifest.Tensors.Shards[i]), false)
		}
	}
}

// RemoteStats returns what a remote output's cache downloaded and waited
// for (zero for a local output).
func (d *Dataset) RemoteStats() RemoteStats {
	if d.remote == nil {
		return RemoteStats{}
	}
	return d.remote.stats()
}

// Samples is the number of selected samples.
func (d *Dataset) Samples() int64 {
	if d.sel == nil {
		return d.Manifest.Tensors.Totals.Rows
	}
	var n int64
	for _, r := range d.sel {
		n += r.Len()
	}
	return n
}

// Sequence is the epoch's global sample order.
func (d *Dataset) Sequence(seed uint64, epoch int, shuffle bool) []Range {
	t := d.Manifest.Tensors
	return Sequence(t.Totals.Rows, t.Order.BlockSamples, d.sel, seed, epoch, shuffle)
}

// Batches returns reader a's batches of size samples, as ranges.
func (d *Dataset) Batches(a Assignment, size int64) ([][]Range, error) {
	return Batches(d.Sequence(a.Seed, a.Epoch, a.Shuffle), size, a)
}

func (d *Dataset) shard(i int) (*mapped, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.shards[i]; s != nil {
		return s, nil
	}
	ms := d.Manifest.Tensors.Shards[i]
	p := filepath.Join(d.root, filepath.FromSlash(ms.Path))
	var f *os.File
	var err error
	if rc := d.remote; rc != nil {
		// Another reader sharing the cache may evict the file between the
		// check and the open (once mapped, it stays readable): fetch again.
		for attempt := 0; ; attempt++ {
			if err := rc.ensureAll(context.Background(), []cacheObj{shardObj(ms)}, rc.current(), true); err != nil {
				return nil, err
			}
			p = rc.path(shardObj(ms))
			if f, err = os.Open(p); err == nil || !os.IsNotExist(err) || attempt == 5 {
				break
			}
		}
	} else {
		f, err = os.Open(p)
	}
	if err != nil {
		return nil, err
	}
	keep := false // the file stays open with the mapping
	defer func() {
		if !keep {
			f.Close()
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() != ms.Bytes {
		return nil, fmt.Errorf("%s: %d bytes, the manifest says %d", p, st.Size(), ms.Bytes)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", p, err)
	}
	if d.opts.VerifyChecksums {
		if got := fmt.Sprintf("%016x", xxhash.Sum64(data)); got != ms.XXHash64 {
			syscall.Munmap(data)
			return nil, fmt.Errorf("%s: xxhash64 %s, the manifest says %s", p, got, ms.XXHash64)
		}
	}
	h, err := parseMapped(data)
	if err != nil {
		syscall.Munmap(data)
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	s := &mapped{data: data, header: h, index: map[string]TensorInfo{}}
	for _, t := range h.Tensors {
		s.index[t.Name] = t
	}
	for _, t := range d.Manifest.Tensors.Schema {
		ti, ok := s.index[t.Name]
		if !ok || ti.DType != t.DType {
			syscall.Munmap(data)
			return nil, fmt.Errorf("%s: tensor %s (%s) is missing or has another dtype", p, t.Name, t.DType)
		}
	}
	level := map[string]string{}
	for _, t := range d.Manifest.Tensors.Schema {
		level[t.Name] = t.Level
	}
	if _, ok := s.index["query.item_offsets"]; ok {
		s.items = int64s(s.bytes(s.index["query.item_offsets"]))
	}
	for _, t := range d.Manifest.Tensors.Schema {
		v := tensorView{data: s.bytes(s.index[t.Name]), per: rowSizeOf(t), item: t.Level == "item", kind: t.Kind}
		switch t.Kind {
		case "offsets":
			v.offs, v.offsItem = int64s(v.data), t.Level == "item"
		case "values":
			v.per = dtypeSize[t.DType]
			v.offs, v.offsItem = int64s(s.bytes(s.index[t.Offsets])), level[t.Offsets] == "item"
		}
		s.views = append(s.views, v)
	}
	if !d.opts.ReadMapped && d.files < MaxOpenFiles {
		s.file, keep = f, true
		d.files++
	}
	d.shards[i] = s
	if d.remote != nil {
		d.remote.setMapped(shardObj(ms), true)
	}
	return s, nil
}

// unmapLocked drops shard s's mapping and closes the file kept with it;
// d.mu is held.
func (d *Dataset) unmapLocked(s *mapped) {
	syscall.Munmap(s.data)
	if s.file != nil {
		s.file.Close()
		s.file = nil
		d.files--
	}
}

func parseMapped(data []byte) (*Header, error) {
	return ReadHeader(bytesReaderAt(data), int64(len(data)))
}

type bytesReaderAt []byte

func (b bytesReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(b)) {
		return 0, fmt.Errorf("read past the end")
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, fmt.Errorf("short read")
	}
	return n, nil
}

func (s *mapped) bytes(t TensorInfo) []byte {
	return s.data[s.header.DataStart+t.Begin : s.header.DataStart+t.End]
}

func int64s(b []byte) []int64 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*int64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
}

// Batch materializes the samples in ranges: views into the shard maps when
// they lie in one shard, else concatenated copies.
func (d *Dataset) Batch(ranges []Range) (*Batch, error) {
	mt := d.Manifest.Tensors
	b := &Batch{Ranges: ranges}
	pieces, err := d.segments(ranges)
	if err != nil {
		return nil, err
	}
	for _, r := range ranges {
		b.Samples += r.Len()
	}
	byName := map[string]manifests.Tensor{}
	for _, t := range mt.Schema {
		byName[t.Name] = t
	}
	// levelRange returns the rows of level lvl that samples [lo, hi) of a
	// piece cover.
	levelRange := func(p segment, lvl string) (int64, int64) {
		if lvl != "item" {
			return p.lo, p.hi
		}
		io := int64s(p.sh.bytes(p.sh.index["query.item_offsets"]))
		return io[p.lo], io[p.hi]
	}
	for _, t := range mt.Schema {
		es := int64(dtypeSize[t.DType])
		per := es
		for _, x := range t.Shape {
			per *= int64(x)
		}
		out := Tensor{Name: t.Name, DType: t.DType}
		var n int64
		switch t.Kind {
		case "offsets":
			offs := []int64{0}
			for _, p := range pieces {
				l0, l1 := levelRange(p, t.Level)
				o := int64s(p.sh.bytes(p.sh.index[t.Name]))
				base := offs[len(offs)-1] - o[l0]
				for _, v := range o[l0+1 : l1+1] {
					offs = append(offs, v+base)
				}
			}
			out.Data = unsafe.Slice((*byte)(unsafe.Pointer(&offs[0])), len(offs)*8)
			out.Shape = []int{len(offs)}
			b.Tensors = append(b.Tensors, out)
			continue
		case "values":
			ot := byName[t.Offsets]
			views := make([][]byte, len(pieces))
			for i, p := range pieces {
				l0, l1 := levelRange(p, ot.Level)
				o := int64s(p.sh.bytes(p.sh.index[t.Offsets]))
				views[i] = p.sh.bytes(p.sh.index[t.Name])[o[l0]*es : o[l1]*es]
				n += o[l1] - o[l0]
			}
			out.Data = concat(views)
		default:
			views := make([][]byte, len(pieces))
			for i, p := range pieces {
				l0, l1 := levelRange(p, t.Level)
				if per > 0 {
					views[i] = p.sh.bytes(p.sh.index[t.Name])[l0*per : l1*per]
				}
				n += l1 - l0
			}
			out.Data = concat(views)
		}
		out.Shape = append([]int{int(n)}, t.Shape...)
		b.Tensors = append(b.Tensors, out)
	}
	return b, nil
}

// segments cuts sample ranges at shard boundaries, mapping the shards.
func (d *Dataset) segments(ranges []Range) ([]segment, error) { return d.segmentsOf(ranges, false) }

// segmentsOf cuts sample ranges at shard boundaries, mapping the shards,
// or, byBlock, at block boundaries, mapping the blocks (rows then count
// from the block's first).
func (d *Dataset) segmentsOf(ranges []Range, byBlock bool) ([]segment, error) {
	mt := d.Manifest.Tensors
	var out []segment
	for _, r := range ranges {
		for s := r.Start; s < r.End; {
			i := sort.Search(len(mt.Shards), func(i int) bool { return mt.Shards[i].FirstRow+mt.Shards[i].Rows > s })
			if i == len(mt.Shards) {
				return nil, fmt.Errorf("sample %d is past the last shard", s)
			}
			if byBlock && !d.whole(i) {
				if err := d.loadHeaders(context.Background(), []int{i}); err != nil {
					return nil, err
				}
				k, first, end := d.blockAt(i, s)
				sh, err := d.block(i, k)
				if err != nil {
					return nil, err
				}
				e := min(r.End, end)
				out = append(out, segment{sh: sh, lo: s - first, hi: e - first, first: s})
				s = e
				continue
			}
			sh, err := d.shard(i)
			if err != nil {
				return nil, err
			}
			e := min(r.End, mt.Shards[i].FirstRow+mt.Shards[i].Rows)
			out = append(out, segment{sh: sh, lo: s - mt.Shards[i].FirstRow, hi: e - mt.Shards[i].FirstRow, first: s})
			s = e
		}
	}
	return out, nil
}

// concat returns the one view itself (zero copy), else the views copied
// into one buffer allocated once.
func concat(views [][]byte) []byte {
	if len(views) == 1 {
		return views[0]
	}
	var n int
	for _, v := range views {
		n += len(v)
	}
	out := make([]byte, 0, n)
	for _, v := range views {
		out = append(out, v...)
	}
	return out
}
