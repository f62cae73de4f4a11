package tensors

import (
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
)

// Profile collects what a plan needs from the data before shards are cut:
// every list column's shortest and longest list. Safe for concurrent use.
type Profile struct {
	mu    sync.Mutex
	lists map[string]*[2]int64 // column -> min, max length over non-null lists
}

// NewProfile returns an empty profile.
func NewProfile() *Profile { return &Profile{lists: map[string]*[2]int64{}} }

// Observe records the list lengths of a flat record.
func (p *Profile) Observe(rec arrow.RecordBatch) {
	for c, f := range rec.Schema().Fields() {
		if f.Type.ID() != arrow.LIST && f.Type.ID() != arrow.LARGE_LIST {
			continue
		}
		la, ok := listOf(rec.Column(c))
		if !ok {
			continue
		}
		a := rec.Column(c)
		lo, hi, seen := int64(1<<62), int64(-1), false
		for i := 0; i < a.Len(); i++ {
			if a.IsNull(i) {
				continue
			}
			s, e := la.bounds(i)
			lo, hi, seen = min(lo, e-s), max(hi, e-s), true
		}
		if !seen {
			continue
		}
		p.mu.Lock()
		r := p.lists[f.Name]
		if r == nil {
			p.lists[f.Name] = &[2]int64{lo, hi}
		} else {
			r[0], r[1] = min(r[0], lo), max(r[1], hi)
		}
		p.mu.Unlock()
	}
}

// Lengths returns the profile: per list column, the shortest and longest
// non-null list seen.
func (p *Profile) Lengths() map[string][2]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string][2]int64, len(p.lists))
	for k, r := range p.lists {
		out[k] = *r
	}
	return out
}

// Merge adds lengths observed elsewhere (another process's Lengths): a
// profile of the union of the rows.
func (p *Profile) Merge(m map[string][2]int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, v := range m {
		if r := p.lists[k]; r != nil {
			r[0], r[1] = min(r[0], v[0]), max(r[1], v[1])
		} else {
			p.lists[k] = &[2]int64{v[0], v[1]}
		}
	}
}

func (p *Profile) lengths(name string) (lo, hi int64, ok bool) {
	if p == nil {
		return 0, 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.lists[name]
	if r == nil {
		return 0, 0, false
	}
	return r[0], r[1], true
}
