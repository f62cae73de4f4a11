package dedupe

import (
	"bytes"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/relayout/relayout/fingerprint"
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
	lastVals  []any // values of the previous row, only kept for reports
	have      bool
}

// NewDetector returns a detector for the schema and query key columns.
func NewDetector(schema *arrow.Schema, keyCols []int) *Detector {
	return &Detector{schema: schema, keyCols: keyCols, varying: make([]bool, schema.NumFields()),
		conflicts: map[int]Conflict{}, lastHash: make([]uint64, schema.NumFields())}
}

// Add checks rows of rec, in the order given by ord (nil: as stored).
func (d *Detector) Add(rec arrow.RecordBatch, ord []int64) error {
	n := int(rec.NumRows())
	hashes := make([][]uint64, rec.NumCols())
	for c := range hashes {
		h, err := fingerprint.ValueHashes(rec.Column(c))
		if err != nil {
			return err
		}
		hashes[c] = h
	}
	var key []byte
	for j := 0; j < n; j++ {
		i := j
		if ord != nil {
			i = int(ord[j])
		}
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
				d.conflicts[c] = Conflict{Column: d.schema.Field(c).Name, Query: q, A: d.lastValue(c), B: partition.Value(rec.Column(c), i)}
			}
			d.lastHash[c] = h
		}
		// Remember the row's values lazily: only columns still constant
		// can produce a conflict report later.
		d.keep(rec, i)
		d.lastKey = append(d.lastKey[:0], key...)
		d.have = true
	}
	d.Finish() // keep values, not the batch
	return nil
}

func (d *Detector) keep(rec arrow.RecordBatch, i int) {
	if d.lastVals == nil {
		d.lastVals = make([]any, rec.NumCols())
	}
	for c := range d.lastVals {
		if !d.varying[c] {
			d.lastVals[c] = cellRef{rec, c, i}
		}
	}
}

// cellRef defers formatting a value until a conflict is reported.
type cellRef struct {
	rec arrow.RecordBatch
	c   int
	i   int
}

func (d *Detector) lastValue(c int) any {
	if r, ok := d.lastVals[c].(cellRef); ok {
		return partition.Value(r.rec.Column(r.c), r.i)
	}
	return d.lastVals[c]
}

// Finish turns the references to the last row into values.
func (d *Detector) Finish() {
	for c, v := range d.lastVals {
		if r, ok := v.(cellRef); ok {
			d.lastVals[c] = partition.Value(r.rec.Column(r.c), r.i)
		}
	}
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
