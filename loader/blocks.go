package loader

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/par"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/storage"
)

// A remote output whose manifest gives every shard's header size and hash
// is read by block: the reader fetches the headers of the shards it reads
// (each checked against the manifest), then only the canonical blocks its
// windows draw from, each as the block's byte ranges of every tensor
// (ranged reads), checked against the header's block table
// (manifests.BlockTable) and kept in the cache as one file. A reader's
// downloads then add up to its share of the tensor bytes, whatever the
// cache size, instead of whole shards fetched again whenever a small cache
// evicted them.

// unit is what a window maps: block k of shard i, or the whole shard
// (block -1).
type unit struct{ shard, block int }

// blocked is a shard's header, read by block.
type blocked struct {
	table     *manifests.BlockTable
	dataStart int64
}

// fetchParallel is how many objects (blocks, headers) a reader downloads
// at once and rangeParallel how many ranges of one block; Options.MaxRequests
// bounds the ranged reads a dataset has in flight.
const (
	fetchParallel = 8
	rangeParallel = 16
)

// byBlock reports whether the dataset reads its shards by block.
func (d *Dataset) byBlock() bool { return d.remote != nil && d.remote.byBlock }

// whole reports whether a dataset read by block reads shard i whole: a
// shard within one canonical block (every shard of --shard-blocks 1) is
// its header and that block, one request instead of two, and its header
// need not be fetched first.
func (d *Dataset) whole(i int) bool {
	mt := d.Manifest.Tensors
	b, ms := mt.Order.BlockSamples, mt.Shards[i]
	return b > 0 && ms.Rows > 0 && ms.FirstRow/b == (ms.FirstRow+ms.Rows-1)/b
}

// loadHeaders fetches, checks and parses the headers of shards idx not
// loaded yet, fetchParallel at a time (each is read and released as soon
// as it arrives, so a small cache need hold only a few).
func (d *Dataset) loadHeaders(ctx context.Context, idx []int) error {
	mt := d.Manifest.Tensors
	var todo []int
	d.mu.Lock()
	for _, i := range idx {
		if d.blocked[i] == nil {
			todo = append(todo, i)
		}
	}
	d.mu.Unlock()
	return par.ForEach(ctx, len(todo), fetchParallel, func(k int) error {
		i := todo[k]
		o := headerObj(mt.Shards[i])
		err := d.remote.ensureAll(ctx, []cacheObj{o}, 0, true)
		var hb []byte
		if err == nil {
			hb, err = os.ReadFile(d.remote.path(o))
		}
		d.remote.setMapped(o, false)
		if err != nil {
			return err
		}
		b, err := d.parseBlocked(mt.Shards[i], hb)
		if err != nil {
			return fmt.Errorf("%s: %w", d.remote.loc.URL(mt.Shards[i].Path), err)
		}
		d.mu.Lock()
		d.blocked[i] = b
		d.mu.Unlock()
		return nil
	})
}

// parseBlocked checks a shard's header (its safetensors prefix, hb) and
// block table against the manifest's schema.
func (d *Dataset) parseBlocked(ms manifests.Shard, hb []byte) (*blocked, error) {
	if int64(len(hb)) != ms.HeaderBytes || len(hb) < 8 || 8+binary.LittleEndian.Uint64(hb) != uint64(len(hb)) {
		return nil, fmt.Errorf("header: %d bytes, the manifest says %d", len(hb), ms.HeaderBytes)
	}
	dataLen := ms.Bytes - ms.HeaderBytes
	h, err := parseHeader(hb[8:], dataLen)
	if err != nil {
		return nil, err
	}
	schema := d.Manifest.Tensors.Schema
	infos := make([]TensorInfo, len(schema))
	for j, t := range schema {
		ti, ok := h.Find(t.Name)
		if !ok || ti.DType != t.DType {
			return nil, fmt.Errorf("tensor %s (%s) is missing or has another dtype", t.Name, t.DType)
		}
		infos[j] = ti
	}
	raw, ok := h.Metadata[manifests.BlockTableKey]
	if !ok {
		return nil, fmt.Errorf("the header has no block table (%q), though the manifest gives its hash", manifests.BlockTableKey)
	}
	var bt manifests.BlockTable
	if err := json.Unmarshal([]byte(raw), &bt); err != nil {
		return nil, fmt.Errorf("block table: %w", err)
	}
	if err := bt.Validate(ms.Rows, dataLen, len(schema)); err != nil {
		return nil, err
	}
	for k, r := range bt.Ranges {
		for j, ti := range infos {
			if a, e := r[2*j], r[2*j+1]; e > a && (a < ti.Begin || e > ti.End) {
				return nil, fmt.Errorf("block table: block %d's range [%d, %d) of %s is outside the tensor [%d, %d)", k, a, e, ti.Name, ti.Begin, ti.End)
			}
		}
	}
	return &blocked{table: &bt, dataStart: h.DataStart}, nil
}

// unitsOf lists the units (sorted) holding any sample of the pieces: the
// blocks they draw from when reading by block, else whole shards.
func (d *Dataset) unitsOf(pieces []Piece) []unit {
	shards := d.shardsOf(pieces)
	if !d.byBlock() {
		out := make([]unit, len(shards))
		for k, i := range shards {
			out[k] = unit{i, -1}
		}
		return out
	}
	mt := d.Manifest.Tensors
	seen := map[unit]bool{}
	var out []unit
	for _, p := range pieces {
		for s := p.Start; s < p.End; {
			i := sort.Search(len(mt.Shards), func(i int) bool { return mt.Shards[i].FirstRow+mt.Shards[i].Rows > s })
			if i == len(mt.Shards) {
				break
			}
			k, end := -1, mt.Shards[i].FirstRow+mt.Shards[i].Rows
			if !d.whole(i) {
				k, _, end = d.blockAt(i, s)
			}
			if u := (unit{i, k}); !seen[u] {
				seen[u] = true
				out = append(out, u)
			}
			s = min(end, p.End)
		}
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].shard != out[b].shard {
			return out[a].shard < out[b].shard
		}
		return out[a].block < out[b].block
	})
	return out
}

// blockAt returns the block of shard i (header loaded) holding global
// sample s and that block's global first sample and end.
func (d *Dataset) blockAt(i int, s int64) (int, int64, int64) {
	ms := d.Manifest.Tensors.Shards[i]
	d.mu.Lock()
	bt := d.blocked[i].table
	d.mu.Unlock()
	r := s - ms.FirstRow
	k := sort.Search(len(bt.Rows)-1, func(k int) bool { return bt.Rows[k+1] > r })
	return k, ms.FirstRow + bt.Rows[k], ms.FirstRow + bt.Rows[k+1]
}

// obj is the cache object of a unit, made once (its name, hash and
// ranges are asked for on every window that needs it).
func (d *Dataset) obj(u unit) cacheObj {
	d.mu.Lock()
	defer d.mu.Unlock()
	if o, ok := d.objs[u]; ok {
		return o
	}
	ms := d.Manifest.Tensors.Shards[u.shard]
	var o cacheObj
	if u.block < 0 {
		o = shardObj(ms)
	} else {
		b := d.blocked[u.shard]
		o = blockObj(ms, b.table, b.dataStart, u.block)
	}
	d.objs[u] = o
	return o
}

// block reads block k of shard i (fetching it if another reader sharing
// the cache evicted it) as a mapped whose views hold the block's rows alone:
// row, item and value indices count from the block's first, and offsets
// are rebased to start at 0.
func (d *Dataset) block(i, k int) (*mapped, error) {
	u := unit{i, k}
	d.mu.Lock()
	if s := d.blockMaps[u]; s != nil {
		d.mu.Unlock()
		return s, nil
	}
	d.mu.Unlock()
	o := d.obj(u)
	rc := d.remote
	// Read into memory, not mapped: a block is small, and a map costs a
	// mmap, page faults and a munmap per block. The window fetched it
	// already; a reader sharing the cache may have evicted it since.
	var data []byte
	var err error
	for attempt := 0; ; attempt++ {
		if data, err = os.ReadFile(rc.path(o)); err == nil || !os.IsNotExist(err) || attempt == 5 {
			break
		}
		if err := rc.ensureAll(context.Background(), []cacheObj{o}, rc.current(), true); err != nil {
			return nil, err
		}
	}
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != o.bytes {
		return nil, fmt.Errorf("%s: %d bytes, the block table says %d", rc.path(o), len(data), o.bytes)
	}
	if d.opts.VerifyChecksums {
		if got := fmt.Sprintf("%016x", xxhash.Sum64(data)); got != o.hash {
			return nil, fmt.Errorf("%s: xxhash64 %s, the block table says %s", rc.path(o), got, o.hash)
		}
	}
	s := d.blockViews(o, data)
	d.mu.Lock()
	d.blockMaps[u] = s
	d.mu.Unlock()
	return s, nil
}

// blockViews cuts a block file (o's ranges, in data order) into the
// schema's tensors.
func (d *Dataset) blockViews(o cacheObj, data []byte) *mapped {
	schema := d.Manifest.Tensors.Schema
	local := make([][]byte, len(schema)) // nil where the block has no bytes
	var pos int64
	for i, r := range o.ranges {
		n := r[1] - r[0]
		local[o.tensors[i]] = data[pos : pos+n : pos+n]
		pos += n
	}
	rebased := func(b []byte) []int64 {
		out := make([]int64, len(b)/8)
		if len(out) == 0 {
			return out
		}
		base := int64(binary.LittleEndian.Uint64(b))
		for x := range out {
			out[x] = int64(binary.LittleEndian.Uint64(b[8*x:])) - base
		}
		return out
	}
	offs := map[string][]int64{}
	level := map[string]string{}
	for j, t := range schema {
		level[t.Name] = t.Level
		if t.Kind == "offsets" {
			offs[t.Name] = rebased(local[j])
		}
	}
	s := &mapped{data: data, items: offs["query.item_offsets"]}
	for j, t := range schema {
		v := tensorView{data: local[j], per: rowSizeOf(t), item: t.Level == "item", kind: t.Kind}
		switch t.Kind {
		case "offsets":
			v.offs, v.offsItem = offs[t.Name], t.Level == "item"
		case "values":
			v.per = dtypeSize[t.DType]
			v.offs, v.offsItem = offs[t.Offsets], level[t.Offsets] == "item"
		}
		s.views = append(s.views, v)
	}
	return s
}

// unmapUnit drops a unit's mapping (a remote reader done with it).
func (d *Dataset) unmapUnit(u unit) {
	if u.block < 0 {
		d.unmap(u.shard)
		return
	}
	d.mu.Lock()
	s := d.blockMaps[u]
	delete(d.blockMaps, u)
	d.mu.Unlock()
	if s != nil {
		d.remote.setMapped(d.obj(u), false)
	}
}

// ensureAll makes objs present, at least fetchParallel downloads at a time, and
// returns the first error. The reader (wait) counts the time it waited;
// the prefetcher (!wait) retries what found no room until ctx ends.
func (rc *remote) ensureAll(ctx context.Context, objs []cacheObj, pos int, wait bool) error {
	t0 := time.Now()
	var missing []cacheObj
	for _, o := range objs {
		if wait {
			rc.setMapped(o, true) // mapped next: no eviction may take it
		}
		if !rc.present(o) {
			missing = append(missing, o)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if wait {
		defer func() { rc.waited.Add(int64(time.Since(t0))) }()
	}
	runs := runsOf(missing)
	// again retries what found no room until the reader closes a window.
	again := func(fetch func() error) error {
		for {
			err := fetch()
			if err != errNoRoom || ctx.Err() != nil {
				return err
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// As many objects at once as keep the requests allowed in flight busy:
	// a shard of one block is one request, a block one per tensor.
	per := 1
	for _, o := range missing {
		per = max(per, o.requests())
	}
	return par.ForEach(ctx, len(runs), max(fetchParallel, cap(rc.requests)/per), func(k int) error {
		run := runs[k]
		if len(run) > 1 {
			err := again(func() error { return rc.ensureRun(ctx, run, pos, wait) })
			if err != errRunSplit {
				return err
			}
		}
		for _, o := range run {
			if err := again(func() error { return rc.ensure(ctx, o, pos, wait) }); err != nil {
				return err
			}
		}
		return nil
	})
}

// Consecutive blocks of one shard that are all missing are fetched
// together: one ranged read per tensor spanning them (consecutive blocks'
// ranges of a tensor are adjacent, or share one offsets entry), split into
// the blocks' files, each checked against its own hash. A window, and the
// windows prefetched together, often draw neighbouring blocks; every
// request saved is a round trip on a real store.
const (
	maxRun      = 32
	maxRunBytes = 16 << 20
)

// runsOf groups missing objects into runs of consecutive blocks of one
// shard (at most maxRun blocks, maxRunBytes bytes); everything else is a
// run of one.
func runsOf(objs []cacheObj) [][]cacheObj {
	sorted := slices.Clone(objs)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].key != sorted[j].key {
			return sorted[i].key < sorted[j].key
		}
		return sorted[i].block < sorted[j].block
	})
	var out [][]cacheObj
	var bytes int64
	for _, o := range sorted {
		if n := len(out); n > 0 && o.tensors != nil {
			run := out[n-1]
			last := run[len(run)-1]
			if last.tensors != nil && last.key == o.key && last.block+1 == o.block && len(run) < maxRun &&
				bytes+o.bytes <= maxRunBytes && adjacent(last, o) {
				out[n-1] = append(run, o)
				bytes += o.bytes
				continue
			}
		}
		out = append(out, []cacheObj{o})
		bytes = o.bytes
	}
	return out
}

// adjacent reports whether block b's ranges continue block a's, tensor by
// tensor.
func adjacent(a, b cacheObj) bool {
	if !slices.Equal(a.tensors, b.tensors) {
		return false
	}
	for i := range a.ranges {
		if b.ranges[i][0] < a.ranges[i][0] || b.ranges[i][0] > a.ranges[i][1] || b.ranges[i][1] < a.ranges[i][1] {
			return false
		}
	}
	return true
}

// ensureRun downloads a run of consecutive blocks with one ranged read per
// tensor, under their locks (lockObjs: taken in one order, so readers
// taking several cannot deadlock), each block into its reserved temporary
// file, checked and renamed as ensure does. A block that appeared meanwhile
// (another reader's) sends the run back to one block at a time.
func (rc *remote) ensureRun(ctx context.Context, run []cacheObj, pos int, wait bool) error {
	var names []string
	for _, o := range run {
		names = append(names, o.name)
	}
	unlock, err := lockObjs(rc.dir, names)
	if err != nil {
		return err
	}
	defer unlock()
	for _, o := range run {
		if rc.present(o) {
			return errRunSplit // the deferred unlocks run first
		}
	}
	if !wait {
		var needed bool
		if pos, needed = rc.prefetchPos(pos, run...); !needed {
			return errRunSplit // one by one: ensure skips what is not needed
		}
	}
	tmps := make([]string, 0, len(run))
	defer func() {
		for k, tmp := range tmps {
			rc.release(tmp, run[k].bytes) // after the rename, a no-op
		}
	}()
	for _, o := range run {
		tmp, err := rc.reserve(ctx, o.bytes, pos, wait)
		if err != nil {
			return err
		}
		tmps = append(tmps, tmp)
	}
	last := rc.attempts(ctx, func() error { return rc.downloadRun(ctx, run, tmps) })
	if last == nil {
		return nil
	}
	return fmt.Errorf("blocks %d-%d of shard %s of %s: %w", run[0].block, run[len(run)-1].block, run[0].key, rc.url, last)
}

// errRunSplit asks ensureAll's loop to fetch a run's blocks one by one.
var errRunSplit = errors.New("a block of the run is present")

// downloadRun fetches a run's spans (one ranged read per tensor, in
// parallel, each retried on its own), then writes, checks and renames
// each block's file; blocks already renamed stay on a later attempt.
func (rc *remote) downloadRun(ctx context.Context, run []cacheObj, tmps []string) error {
	first, lastB := run[0], run[len(run)-1]
	url := rc.loc.URL(first.key)
	spans := make([][]byte, len(first.ranges))
	err := par.ForEach(ctx, len(spans), rangeParallel, func(i int) error {
		lo, hi := first.ranges[i][0], lastB.ranges[i][1]
		rc.requests <- struct{}{}
		defer func() { <-rc.requests }()
		return storage.Retry(ctx, func() error {
			rd, err := rc.loc.Bucket.NewRangeReader(ctx, rc.loc.Key(first.key), lo, hi-lo, nil)
			if err != nil {
				return storage.Classify(fmt.Errorf("read %s: %w", url, err))
			}
			defer rd.Close()
			b := make([]byte, hi-lo)
			if _, err := io.ReadFull(rd, b); err != nil {
				return errs.TransientErr(fmt.Errorf("read %s: %d bytes at %d: %w", url, hi-lo, lo, err))
			}
			spans[i] = b
			return nil
		})
	})
	if err != nil {
		return err
	}
	for k, o := range run {
		if rc.present(o) {
			continue // renamed on an earlier attempt
		}
		h := xxhash.New()
		f, err := os.OpenFile(tmps[k], os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		for i, r := range o.ranges {
			part := spans[i][r[0]-first.ranges[i][0] : r[1]-first.ranges[i][0]]
			h.Write(part)
			if _, err = f.Write(part); err != nil {
				break
			}
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if got := fmt.Sprintf("%016x", h.Sum64()); got != o.hash {
			return checkError{fmt.Errorf("%s (%s): xxhash64 %s, the shard's block table says %s (damaged on the store, or changed since the manifest)", url, o.what, got, o.hash)}
		}
		if err := rc.commit(tmps[k], o); err != nil {
			return err
		}
	}
	return nil
}
