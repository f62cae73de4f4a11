package partition

import (
	"slices"
	"sort"
)

// RowGroupSlices is what a key pass records of one row group's slices: for
// each slice with rows there, its id (a rank in the histogram, or a key
// task's own slice number), its rows and, when vectors were asked for, the
// bitset of the VectorRows-row vectors holding them. IDs ascend.
//
// It takes 12 bytes a slice plus the bitsets (22 bytes with one word of
// bits, measured by TestKeyPassRecordsPerRowGroup). The two maps per row
// group it replaces took about 100, held for every row group of the table
// at once: an unsorted table's row groups each hold most slices, and at
// 16x the generated log (256 row groups x 1,200 slices) the key pass
// lifted the heap past Go's soft limit; the arena it grew stayed, and the
// rest of the run paid for it in pages scavenged and faulted back
// (docs/benchmarks.md).
type RowGroupSlices struct {
	IDs  []int32
	Rows []int64 // by position in IDs; nil when not counted
	// Words is the length of each slice's bitset in Bits (0: no vectors).
	Words int
	Bits  []uint64
}

// newRowGroupSlices orders what readSlices found (ids in first-seen order,
// each with its rows and words of bits) by id.
func newRowGroupSlices(ids []int32, rows []int64, words int, bits []uint64) *RowGroupSlices {
	order := make([]int32, len(ids))
	for i := range order {
		order[i] = int32(i)
	}
	sort.Slice(order, func(a, b int) bool { return ids[order[a]] < ids[order[b]] })
	r := &RowGroupSlices{IDs: make([]int32, len(ids)), Words: words}
	if rows != nil {
		r.Rows = make([]int64, len(ids))
	}
	if words > 0 {
		r.Bits = make([]uint64, len(ids)*words)
	}
	for to, from := range order {
		r.IDs[to] = ids[from]
		if rows != nil {
			r.Rows[to] = rows[from]
		}
		if words > 0 {
			copy(r.Bits[to*words:], bits[int(from)*words:(int(from)+1)*words])
		}
	}
	return r
}

func (r *RowGroupSlices) find(id int32) (int, bool) {
	if r == nil {
		return 0, false
	}
	return slices.BinarySearch(r.IDs, id)
}

// Count returns slice id's rows in the row group: 0 when it has none.
func (r *RowGroupSlices) Count(id int32) int64 {
	if i, ok := r.find(id); ok && r.Rows != nil {
		return r.Rows[i]
	}
	return 0
}

// Vectors returns slice id's bitset; false when the slice has no rows
// here or no vectors were recorded.
func (r *RowGroupSlices) Vectors(id int32) ([]uint64, bool) {
	i, ok := r.find(id)
	if !ok || r.Words == 0 {
		return nil, false
	}
	return r.VectorsAt(i), true
}

// VectorsAt returns the bitset of the i-th slice (IDs[i]).
func (r *RowGroupSlices) VectorsAt(i int) []uint64 {
	return r.Bits[i*r.Words : (i+1)*r.Words : (i+1)*r.Words]
}

// AddVectors records bits for slice id, which must be at least every id
// recorded before; bits of the last id recorded are merged (OR) into it.
// All bitsets must have one length.
func (r *RowGroupSlices) AddVectors(id int32, bits []uint64) {
	if n := len(r.IDs); n > 0 && r.IDs[n-1] == id {
		v := r.VectorsAt(n - 1)
		for w := range v {
			v[w] |= bits[w]
		}
		return
	}
	r.Words = len(bits)
	r.IDs = append(r.IDs, id)
	r.Bits = append(r.Bits, bits...)
}

// HasVectors reports whether the bitsets were recorded (a key pass with
// slice keys records them; one without records counts only).
func (r *RowGroupSlices) HasVectors() bool { return r != nil && r.Words > 0 }

// DropVectors forgets the bitsets, keeping the counts.
func (r *RowGroupSlices) DropVectors() {
	if r != nil {
		r.Words, r.Bits = 0, nil
	}
}
