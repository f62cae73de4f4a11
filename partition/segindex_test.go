package partition

import (
	"strings"
	"testing"
)

// TestSegmentIndex: a map attempt's index reads back by range as the
// segments it was made of; a record damaged, read at another unit's
// place, or read with another map task's or kind's seed is refused, naming the unit.
func TestSegmentIndex(t *testing.T) {
	segs := []Segment{
		{Unit: 1, Offset: 0, Length: 100, Rows: 7, Bytes: 100, XXHash64: "00000000000000ff"},
		{Unit: 4, Offset: 100, Length: 50, Rows: 3, Bytes: 50, XXHash64: "8000000000000001"},
		{Unit: 5, Offset: 150, Length: 9, Rows: 1, Bytes: 9}, // plain: no hash
	}
	seed, other, kind := IndexSeed("segments", 1), IndexSeed("segments", 2), IndexSeed("digests", 1)
	idx, err := EncodeIndex(segs, 7, seed)
	if err != nil {
		t.Fatal(err)
	}
	if len(idx) != 7*IndexRecord {
		t.Fatalf("index of %d bytes, want %d", len(idx), 7*IndexRecord)
	}
	for lo := 0; lo <= 7; lo++ {
		for hi := lo; hi <= 7; hi++ {
			got, err := DecodeIndex(idx[lo*IndexRecord:hi*IndexRecord], lo, seed)
			if err != nil {
				t.Fatalf("units [%d, %d): %v", lo, hi, err)
			}
			var want []Segment
			for _, s := range segs {
				if lo <= s.Unit && s.Unit < hi {
					want = append(want, s)
				}
			}
			if len(got) != len(want) {
				t.Fatalf("units [%d, %d): %+v, want %+v", lo, hi, got, want)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("units [%d, %d): %+v, want %+v", lo, hi, got, want)
				}
			}
		}
	}
	refused := func(what string, data []byte, lo int, seed uint64, unit string) {
		t.Helper()
		if _, err := DecodeIndex(data, lo, seed); err == nil || !strings.Contains(err.Error(), unit) {
			t.Fatalf("%s: %v, want an error naming %s", what, err, unit)
		}
	}
	for _, at := range []int{4*IndexRecord + 3, 2 * IndexRecord, 4*IndexRecord + 45} { // a segment's, an empty unit's, a check's byte
		bad := append([]byte(nil), idx...)
		bad[at] ^= 0x10
		refused("a damaged byte", bad[2*IndexRecord:], 2, seed, "unit "+string(rune('0'+at/IndexRecord)))
	}
	refused("records read one unit off", idx[IndexRecord:3*IndexRecord], 2, seed, "unit 2")
	refused("another map task's index", idx, 0, other, "unit 0")
	refused("an index of another kind", idx, 0, kind, "unit 0")
	refused("a partial record", idx[:IndexRecord+5], 0, seed, "not whole records")
	if _, err := EncodeIndex(append(segs, segs[0]), 7, seed); err == nil {
		t.Fatal("two segments of one unit encoded")
	}
	if _, err := EncodeIndex(segs, 5, seed); err == nil {
		t.Fatal("a segment of unit 5 encoded in an index of 5 units")
	}
}
