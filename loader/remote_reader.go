package loader

import (
	"context"
	"fmt"
	"sort"
	"sync"
)

// remotePlan is a reader's epoch as the cache sees it: the windows in the
// order the reader opens them and the units (blocks, or whole shards) each
// needs.
type remotePlan struct {
	order []winRef
	units map[winRef][]unit
	mu    sync.Mutex
	pos   int // windows opened so far
	// openCount counts, per unit, the reader's open windows that hold it.
	openCount map[unit]int
	cond      *sync.Cond
	cancel    context.CancelFunc
	done      chan struct{}
}

type winRef struct{ stream, window int }

// shardsOf lists the shards (indices) holding any sample of the pieces.
func (d *Dataset) shardsOf(pieces []Piece) []int {
	mt := d.Manifest.Tensors
	seen := map[int]bool{}
	var out []int
	for _, p := range pieces {
		i := sort.Search(len(mt.Shards), func(i int) bool { return mt.Shards[i].FirstRow+mt.Shards[i].Rows > p.Start })
		for ; i < len(mt.Shards) && mt.Shards[i].FirstRow < p.End; i++ {
			if !seen[i] {
				seen[i] = true
				out = append(out, i)
			}
		}
	}
	sort.Ints(out)
	return out
}

// planRemote plans a remote reader's downloads: it fetches the headers of
// the shards it reads (by block), refuses an epoch whose windows need more
// at once than the cache holds, marks every window's units as needed, and
// starts the prefetcher.
func (r *Reader) planRemote() error {
	rc := r.d.remote
	p := &remotePlan{units: map[winRef][]unit{}, done: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	seen := map[winRef]bool{}
	for _, wb := range r.batches {
		w := winRef{wb.Stream, wb.Window}
		if !seen[w] {
			seen[w] = true
			p.order = append(p.order, w)
		}
	}
	if r.d.byBlock() {
		need := map[int]bool{}
		var shards []int
		for _, w := range p.order {
			for _, i := range r.d.shardsOf(r.windows[w.stream][w.window].Pieces) {
				if !need[i] && !r.d.whole(i) {
					need[i] = true
					shards = append(shards, i)
				}
			}
		}
		if err := r.d.loadHeaders(context.Background(), shards); err != nil {
			return err
		}
	}
	for _, w := range p.order {
		p.units[w] = r.d.unitsOf(r.windows[w.stream][w.window].Pieces)
	}
	// A window holds its units only while it is scattered into batch
	// order, one window at a time: the most held at once is the largest
	// window's units.
	var peak int64
	what := "blocks"
	if !r.d.byBlock() {
		what = "shards"
	}
	for _, w := range p.order {
		var bytes int64
		for _, u := range p.units[w] {
			bytes += r.d.obj(u).bytes
		}
		peak = max(peak, bytes)
	}
	if peak > rc.limit {
		return fmt.Errorf("cache %s: %d bytes (CacheBytes) cannot hold the %d bytes of %s this reader's open windows need at once; raise CacheBytes or lower WindowBytes", rc.dir, rc.limit, peak, what)
	}
	for k, w := range p.order {
		for _, u := range p.units[w] {
			rc.planUse(r.d.obj(u), k)
		}
	}
	p.openCount = map[unit]int{}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	r.remote = p
	go r.prefetch(ctx)
	return nil
}

// objs returns a window's cache objects.
func (r *Reader) objs(w winRef) []cacheObj {
	us := r.remote.units[w]
	out := make([]cacheObj, len(us))
	for k, u := range us {
		out[k] = r.d.obj(u)
	}
	return out
}

// prefetch downloads the units of the next windows, in the order the
// reader opens them, at most PrefetchWindows windows ahead: every window
// that may be fetched now goes in one batch, so consecutive blocks that
// neighbouring windows draw are fetched in runs.
func (r *Reader) prefetch(ctx context.Context) {
	p, rc := r.remote, r.d.remote
	defer close(p.done)
	for k := 0; k < len(p.order); {
		p.mu.Lock()
		for k > p.pos+rc.ahead && ctx.Err() == nil {
			p.cond.Wait()
		}
		upTo := min(p.pos+rc.ahead, len(p.order)-1)
		p.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		var objs []cacheObj
		seen := map[string]bool{}
		for ; k <= upTo; k++ {
			for _, o := range r.objs(p.order[k]) {
				if !seen[o.name] {
					seen[o.name] = true
					objs = append(objs, o)
				}
			}
		}
		if rc.ensureAll(ctx, objs, upTo, false) != nil {
			return // the reader will ask again and report it
		}
	}
}

// opened tells the cache and the prefetcher the reader opens window w,
// and fetches what of it is not in the cache yet.
func (r *Reader) opened(w winRef) error {
	p := r.remote
	objs := r.objs(w)
	for _, u := range p.units[w] {
		p.openCount[u]++
	}
	p.mu.Lock()
	k := p.pos
	p.pos++
	p.cond.Broadcast()
	p.mu.Unlock()
	r.d.remote.opening(k, objs)
	return r.d.remote.ensureAll(context.Background(), objs, k, true)
}

// windowDone releases a window's units: each no other window ahead needs
// is unmapped, and its file becomes evictable.
func (r *Reader) windowDone(w winRef) {
	p := r.remote
	for _, u := range p.units[w] {
		if p.openCount[u]--; p.openCount[u] <= 0 {
			delete(p.openCount, u)
			r.d.unmapUnit(u)
		}
	}
}

// stop ends the prefetcher.
func (r *Reader) stop() {
	if r.remote == nil {
		return
	}
	r.remote.cancel()
	r.remote.mu.Lock()
	r.remote.cond.Broadcast()
	r.remote.mu.Unlock()
	<-r.remote.done
}
