package partition

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// A segment index is a map task's segments as fixed-size records, one per
// unit of the plan (unit u at byte u*IndexRecord), so that a reduce task
// reads the records of its own units with one ranged read per map task.
// A task manifest listing every segment grows with the units, and every
// reduce task read every map task's: reduce tasks x map tasks x units.
//
// A record, little-endian: offset, length, rows, bytes (int64 each), the
// segment's xxhash64 (0: none), and a check: the xxhash64 of the record's
// first 40 bytes, the unit and the seed (IndexSeed: the index's kind and
// map task), so that a damaged record, or one read at another unit's place
// or from another map task's index, is refused.
const IndexRecord = 48

// IndexSeed is the seed the records of map task task's index of a kind
// (segments, digests) are checked with.
func IndexSeed(kind string, task int) uint64 {
	return xxhash.Sum64String(fmt.Sprintf("relayout %s index\x00%d", kind, task))
}

// EncodeIndex returns the index of segs (at most one per unit, units in
// [0, units)) with a seed (IndexSeed). A unit without a segment has a record
// of zeros but its check.
func EncodeIndex(segs []Segment, units int, seed uint64) ([]byte, error) {
	out := make([]byte, units*IndexRecord)
	seen := make([]bool, units)
	for _, s := range segs {
		if s.Unit < 0 || s.Unit >= units || seen[s.Unit] {
			return nil, fmt.Errorf("internal: a segment index of %d units given unit %d (twice: %v)", units, s.Unit, s.Unit >= 0 && s.Unit < units && seen[s.Unit])
		}
		seen[s.Unit] = true
		var sum uint64
		if s.XXHash64 != "" {
			var err error
			if sum, err = strconv.ParseUint(s.XXHash64, 16, 64); err != nil || sum == 0 {
				return nil, fmt.Errorf("internal: segment of unit %d: hash %q", s.Unit, s.XXHash64)
			}
		}
		r := out[s.Unit*IndexRecord:]
		binary.LittleEndian.PutUint64(r[0:], uint64(s.Offset))
		binary.LittleEndian.PutUint64(r[8:], uint64(s.Length))
		binary.LittleEndian.PutUint64(r[16:], uint64(s.Rows))
		binary.LittleEndian.PutUint64(r[24:], uint64(s.Bytes))
		binary.LittleEndian.PutUint64(r[32:], sum)
	}
	for u := range units {
		r := out[u*IndexRecord : (u+1)*IndexRecord]
		binary.LittleEndian.PutUint64(r[40:], recordCheck(r, u, seed))
	}
	return out, nil
}

func recordCheck(r []byte, u int, seed uint64) uint64 {
	var b [IndexRecord]byte
	copy(b[:40], r[:40])
	binary.LittleEndian.PutUint64(b[40:], uint64(u))
	d := xxhash.NewWithSeed(seed)
	d.Write(b[:])
	return d.Sum64()
}

// DecodeIndex checks and decodes the records of units [lo, lo+len/IndexRecord)
// read from an index at byte lo*IndexRecord. It returns the segments of
// the units that have one (bytes), Partition and Path left to the reader; a record that fails its check, or holds a negative or
// inconsistent range, is an error naming the unit.
func DecodeIndex(data []byte, lo int, seed uint64) ([]Segment, error) {
	if len(data)%IndexRecord != 0 {
		return nil, fmt.Errorf("%d bytes are not whole records of %d", len(data), IndexRecord)
	}
	var out []Segment
	for i := 0; i < len(data)/IndexRecord; i++ {
		u := lo + i
		r := data[i*IndexRecord : (i+1)*IndexRecord]
		if got, want := recordCheck(r, u, seed), binary.LittleEndian.Uint64(r[40:]); got != want {
			return nil, fmt.Errorf("unit %d: its record is damaged or not this attempt's (check %016x, want %016x)", u, want, got)
		}
		e := Segment{Unit: u,
			Offset: int64(binary.LittleEndian.Uint64(r[0:])), Length: int64(binary.LittleEndian.Uint64(r[8:])),
			Rows: int64(binary.LittleEndian.Uint64(r[16:])), Bytes: int64(binary.LittleEndian.Uint64(r[24:]))}
		if e.Offset < 0 || e.Length < 0 || e.Rows < 0 || e.Bytes < 0 || (e.Rows > 0 && e.Length == 0) {
			return nil, fmt.Errorf("unit %d: bytes [%d, +%d) holding %d rows", u, e.Offset, e.Length, e.Rows)
		}
		if e.Length == 0 {
			continue // no segment
		}
		if sum := binary.LittleEndian.Uint64(r[32:]); sum != 0 {
			e.XXHash64 = fmt.Sprintf("%016x", sum)
		}
		out = append(out, e)
	}
	return out, nil
}
