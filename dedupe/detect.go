package dedupe

import (
	"bytes"
	"context"
	"fmt"
	"runtime"

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

// probeRows is how many rows, in key order, AddBatches hashes one by one
// before hashing a whole column (a variable for the tests).
var probeRows = 256

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
//
// The query key is compared once per row, serially; then each column is
// hashed and checked on its own, columns in parallel, so that only one
// column's hashes per worker are held at a time (all of them at once was
// 8 bytes per value of the whole table).
func (d *Detector) AddBatches(recs []arrow.RecordBatch, ord []int64) error {
	starts := partition.BatchStarts(recs)
	n := int(starts[len(recs)])
	if ord != nil {
		n = len(ord)
	}
	if n == 0 {
		return nil
	}
	row := func(j int) int64 {
		if ord != nil {
			return ord[j]
		}
		return int64(j)
	}
	// at returns the batch holding row i, and i's row in it.
	at := func(i int64, k *int) (arrow.RecordBatch, int) {
		b, r := partition.LocateRow(starts, i, k)
		return recs[b], int(r)
	}
	// same[j]: row j has the query key of the row before it (for j == 0,
	// of the previous call's last row).
	same := make([]bool, n)
	var key, prevKey []byte
	k := 0
	for j := 0; j < n; j++ {
		rec, ri := at(row(j), &k)
		key = key[:0]
		for _, c := range d.keyCols {
			key = partition.AppendKey(key, rec.Column(c), ri)
		}
		if j == 0 {
			same[0] = d.have && bytes.Equal(key, d.lastKey)
		} else {
			same[j] = bytes.Equal(key, prevKey)
		}
		key, prevKey = prevKey, key
	}
	lastKey := append([]byte(nil), prevKey...)
	ncols := d.schema.NumFields()
	type found struct {
		j   int // first row that differs from the row before it, or -1
		err error
	}
	first := make([]found, ncols)
	lastHash := make([]uint64, ncols)
	err := par.ForEach(context.Background(), ncols, runtime.GOMAXPROCS(0), func(c int) error {
		first[c].j = -1
		if d.varying[c] {
			return nil // known; its last values are not kept either
		}
		// An item-level column usually differs inside one of the first
		// queries: look at the first rows alone before hashing the whole
		// column. The probe decides exactly what the full scan would
		// (the same first row, the same last hash). When ord names a few
		// of the batches' rows (a partition of a unit that holds others),
		// all are looked at alone: whole columns would hash the others'.
		m := min(n, probeRows)
		if ord != nil && int64(n) < starts[len(recs)]/4 {
			m = n
		}
		prev := d.lastHash[c]
		var kp int
		for j := 0; j < m; j++ {
			rec, ri := at(row(j), &kp)
			v, err := fingerprint.ExactValueHash(rec.Column(c), ri)
			if err != nil {
				return err
			}
			if same[j] && v != prev {
				first[c].j = j
				return nil
			}
			prev = v
		}
		if m == n {
			lastHash[c] = prev
			return nil
		}
		h := make([]uint64, starts[len(recs)])
		for i, r := range recs {
			if err := fingerprint.ExactValueHashesTo(r.Column(c), h[starts[i]:starts[i+1]]); err != nil {
				return err
			}
		}
		for j := m; j < n; j++ { // the probe saw rows [0, m)
			var v uint64 // not through row(): this loop is the hot one
			if ord != nil {
				v = h[ord[j]]
			} else {
				v = h[j]
			}
			if same[j] && v != prev {
				first[c].j = j
				break
			}
			prev = v
		}
		lastHash[c] = h[row(n-1)]
		return nil
	})
	if err != nil {
		return err
	}
	kq, ka, kb := 0, 0, 0
	for c := 0; c < ncols; c++ {
		j := first[c].j
		if d.varying[c] || j < 0 {
			continue
		}
		d.varying[c] = true
		rec, ri := at(row(j), &kq)
		q := make([]any, len(d.keyCols))
		for i, kc := range d.keyCols {
			q[i] = partition.Value(rec.Column(kc), ri)
		}
		var a any
		if j > 0 {
			pr, pi := at(row(j-1), &ka)
			a = partition.Value(pr.Column(c), pi)
		} else {
			a = d.lastVals[c]
		}
		br, bi := at(row(j), &kb)
		d.conflicts[c] = Conflict{Column: d.schema.Field(c).Name, Query: q, A: a, B: partition.Value(br.Column(c), bi)}
	}
	// Keep the last row's key, hashes and values (not the batches) for a
	// report that spans calls.
	if d.lastVals == nil {
		d.lastVals = make([]any, ncols)
	}
	lr, li := at(row(n-1), &k)
	for c := range d.lastVals {
		if !d.varying[c] {
			d.lastHash[c] = lastHash[c]
			d.lastVals[c] = partition.Value(lr.Column(c), li)
		}
	}
	d.lastKey = lastKey
	d.have = true
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
