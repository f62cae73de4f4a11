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

// NewDetector returns a detector for the schema and query key columns.
func NewDetector(schema *arrow.Schema, keyCols []int) *Detector {
	return &Detector{schema: schema, keyCols: keyCols, varying: make([]bool, schema.NumFields()),
		conflicts: map[int]Conflict{}, lastHash: make([]uint64, schema.NumFields())}
}

// Add checks rows of rec, in the order given by ord (nil: every row, as
// stored; else only the rows ord names).
func (d *Detector) Add(rec arrow.RecordBatch, ord []int64) error {
	n := int(rec.NumRows())
	if ord != nil {
		n = len(ord)
	}
	if n == 0 {
		return nil
	}
	hashes := make([][]uint64, rec.NumCols())
	err := par.ForEach(context.Background(), len(hashes), runtime.GOMAXPROCS(0), func(c int) error {
		h, err := fingerprint.ValueHashes(rec.Column(c))
		hashes[c] = h
		return err
	})
	if err != nil {
		return err
	}
	row := func(j int) int {
		if ord != nil {
			return int(ord[j])
		}
		return j
	}
	var key []byte
	prev := -1 // previous row of this batch, or -1: the last row of the previous batch
	for j := 0; j < n; j++ {
		i := row(j)
		key = key[:0]
		for _, c := range d.keyCols {
			key = partition.AppendKey(key, rec.Column(c), i)
		}
		same := d.have && bytes.Equal(key, d.lastKey)
		for c := range hashes {
			h := hashes[c][i]
			if same && !d.varying[c] && h != d.lastHash[c] {
				d.varying[c] = true
				q := make([]any, len(d.keyCols))
				for k, kc := range d.keyCols {
					q[k] = partition.Value(rec.Column(kc), i)
				}
				var a any
				if prev >= 0 {
					a = partition.Value(rec.Column(c), prev)
				} else {
					a = d.lastVals[c]
				}
				d.conflicts[c] = Conflict{Column: d.schema.Field(c).Name, Query: q, A: a, B: partition.Value(rec.Column(c), i)}
			}
			d.lastHash[c] = h
		}
		d.lastKey = append(d.lastKey[:0], key...)
		d.have = true
		prev = i
	}
	// Keep the last row's values (not the batch) for a report that spans
	// batches.
	if d.lastVals == nil {
		d.lastVals = make([]any, rec.NumCols())
	}
	for c := range d.lastVals {
		if !d.varying[c] {
			d.lastVals[c] = partition.Value(rec.Column(c), prev)
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
