package dedupe

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"sort"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/relayout/relayout/fingerprint"
	"github.com/relayout/relayout/internal/par"
	"github.com/relayout/relayout/partition"
)

// Conflict is the first place a column was seen to vary inside a query.
type Conflict struct {
	Column string
	Query  []any // the query key's values
	A, B   any   // two differing values
}

func (c Conflict) String() string {
	return fmt.Sprintf("column %q varies within query %v: %v then %v", c.Column, c.Query, c.A, c.B)
}

// Detector decides which columns are constant within every query. Feed it
// every row in key order; queries may span calls.
type Detector struct {
	schema    *arrow.Schema
	keyCols   []int
	varying   []bool
	conflicts map[int]Conflict
	lastKey   []byte
	lastHash  []uint64
	lastVals  []any // values of the previous batch's last row, for reports
	have      bool
}

// NewDetector returns a detector for the schema and query key columns.
func NewDetector(schema *arrow.Schema, keyCols []int) *Detector {
	return &Detector{schema: schema, keyCols: keyCols, varying: make([]bool, schema.NumFields()),
		conflicts: map[int]Conflict{}, lastHash: make([]uint64, schema.NumFields())}
}

// Add checks rows of rec, in the order given by ord (nil: every row, as
// stored; else only the rows ord names).
func (d *Detector) Add(rec arrow.RecordBatch, ord []int64) error {
	return d.AddBatches([]arrow.RecordBatch{rec}, ord)
}

// AddBatches checks rows held in recs (one schema), numbered across them in
// order, in the order given by ord (nil: every row, as stored).
func (d *Detector) AddBatches(recs []arrow.RecordBatch, ord []int64) error {
	starts := make([]int64, len(recs)+1)
	for k, r := range recs {
		starts[k+1] = starts[k] + r.NumRows()
	}
	n := int(starts[len(recs)])
	if ord != nil {
		n = len(ord)
	}
	if n == 0 {
		return nil
	}
	ncols := d.schema.NumFields()
	hashes := make([][]uint64, ncols)
	err := par.ForEach(context.Background(), ncols, runtime.GOMAXPROCS(0), func(c int) error {
		h := make([]uint64, 0, starts[len(recs)])
		for _, r := range recs {
			hc, err := fingerprint.ValueHashes(r.Column(c))
			if err != nil {
				return err
			}
			h = append(h, hc...)
		}
		hashes[c] = h
		return nil
	})
	if err != nil {
		return err
	}
	// at returns the batch holding row i, and i's row in it.
	k := 0
	at := func(i int64) (arrow.RecordBatch, int) {
		if i < starts[k] || i >= starts[k+1] {
			k = sort.Search(len(recs), func(j int) bool { return starts[j+1] > i })
		}
		return recs[k], int(i - starts[k])
	}
	var key []byte
	var prevRec arrow.RecordBatch // previous row of this call, or nil: the last row of the previous call
	prev := 0
	for j := 0; j < n; j++ {
		i := int64(j)
		if ord != nil {
			i = ord[j]
		}
		rec, ri := at(i)
		key = key[:0]
		for _, c := range d.keyCols {
			key = partition.AppendKey(key, rec.Column(c), ri)
		}
		same := d.have && bytes.Equal(key, d.lastKey)
		for c := range hashes {
			h := hashes[c][i]
			if same && !d.varying[c] && h != d.lastHash[c] {
				d.varying[c] = true
				q := make([]any, len(d.keyCols))
				for k, kc := range d.keyCols {
					q[k] = partition.Value(rec.Column(kc), ri)
				}
				var a any
				if prevRec != nil {
					a = partition.Value(prevRec.Column(c), prev)
				} else {
					a = d.lastVals[c]
				}
				d.conflicts[c] = Conflict{Column: d.schema.Field(c).Name, Query: q, A: a, B: partition.Value(rec.Column(c), ri)}
			}
			d.lastHash[c] = h
		}
		d.lastKey = append(d.lastKey[:0], key...)
		d.have = true
		prevRec, prev = rec, ri
	}
	// Keep the last row's values (not the batches) for a report that
	// spans calls.
	if d.lastVals == nil {
		d.lastVals = make([]any, ncols)
	}
	for c := range d.lastVals {
		if !d.varying[c] {
			d.lastVals[c] = partition.Value(prevRec.Column(c), prev)
		}
	}
	return nil
}

// Constant reports, per column, whether it never varied inside a query.
func (d *Detector) Constant() []bool {
	out := make([]bool, len(d.varying))
	for i, v := range d.varying {
		out[i] = !v
	}
	return out
}

// Conflict returns the first conflict seen for column c, if any.
func (d *Detector) Conflict(c int) (Conflict, bool) {
	x, ok := d.conflicts[c]
	return x, ok
}
