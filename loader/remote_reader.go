package loader

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/relayout/relayout/manifests"
)

// remotePlan is a reader's epoch as the cache sees it: the windows in the
// order the reader opens them and the shards each needs.
type remotePlan struct {
	order  []winRef
	shards map[winRef][]int
	mu     sync.Mutex
	pos    int // windows opened so far
	// openCount counts, per shard, the reader's open windows that hold it.
	openCount map[int]int
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

// planRemote plans a remote reader's downloads: it refuses an epoch whose
// open windows need more shards at once than the cache holds, marks every
// window's shards as needed, and starts the prefetcher.
func (r *Reader) planRemote() error {
	rc := r.d.remote
	mt := r.d.Manifest.Tensors
	p := &remotePlan{shards: map[winRef][]int{}, done: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	seen := map[winRef]bool{}
	for _, wb := range r.batches {
		w := winRef{wb.Stream, wb.Window}
		if !seen[w] {
			seen[w] = true
			p.order = append(p.order, w)
			p.shards[w] = r.d.shardsOf(r.windows[wb.Stream][wb.Window].Pieces)
		}
	}
	// A window holds its shards only while it is scattered into batch
	// order, one window at a time: the most held at once is the largest
	// window's shards.
	var peak int64
	for _, w := range p.order {
		var bytes int64
		for _, i := range p.shards[w] {
			bytes += mt.Shards[i].Bytes
		}
		peak = max(peak, bytes)
	}
	if peak > rc.limit {
		return fmt.Errorf("cache %s: %d bytes (CacheBytes) cannot hold the %d bytes of shards this reader's open windows need at once; raise CacheBytes or lower WindowBytes", rc.dir, rc.limit, peak)
	}
	for k, w := range p.order {
		for _, i := range p.shards[w] {
			rc.planUse(mt.Shards[i], k)
		}
	}
	p.openCount = map[int]int{}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	r.remote = p
	go r.prefetch(ctx)
	return nil
}

// prefetch downloads the shards of the next windows, in the order the
// reader opens them, at most PrefetchWindows windows ahead.
func (r *Reader) prefetch(ctx context.Context) {
	p, rc, mt := r.remote, r.d.remote, r.d.Manifest.Tensors
	defer close(p.done)
	for k, w := range p.order {
		p.mu.Lock()
		for k > p.pos+rc.ahead && ctx.Err() == nil {
			p.cond.Wait()
		}
		p.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		for _, i := range p.shards[w] {
			for {
				err := rc.ensure(ctx, mt.Shards[i], k, false)
				if err == nil {
					break
				}
				if err != errNoRoom || ctx.Err() != nil {
					return // the reader will ask again and report it
				}
				time.Sleep(10 * time.Millisecond) // until the reader closes a window
			}
		}
	}
}

// opened tells the cache and the prefetcher the reader opens window w.
func (r *Reader) opened(w winRef) {
	p, mt := r.remote, r.d.Manifest.Tensors
	var shs []manifests.Shard
	for _, i := range p.shards[w] {
		shs = append(shs, mt.Shards[i])
		p.openCount[i]++
	}
	p.mu.Lock()
	k := p.pos
	p.pos++
	p.cond.Broadcast()
	p.mu.Unlock()
	r.d.remote.opening(k, shs)
}

// windowDone releases a window's shards: each no other window ahead needs
// is unmapped, and its file becomes evictable.
func (r *Reader) windowDone(w winRef) {
	p := r.remote
	for _, i := range p.shards[w] {
		if p.openCount[i]--; p.openCount[i] <= 0 {
			delete(p.openCount, i)
			r.d.unmap(i)
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
