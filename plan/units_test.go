package plan

import (
	"testing"

	"github.com/relayout/relayout/partition"
)

// TestJoinedUnits: with join (run's Resources.JoinPartitions) consecutive
// partitions of at most UnitRows rows share units of at most UnitRows rows,
// whole partitions each; a larger partition has units of its own, as
// without join; every unit's rows are its chunks' and its partitions' rows,
// in order with no gap; UnitPartitions names them, and PartitionUnits each
// partition's units.
func TestJoinedUnits(t *testing.T) {
	sizes := []int64{300, 400, 250, 0, 500, 2600, 100, 100, 900, 50}
	var lay partition.Layout
	var start int64
	for _, n := range sizes {
		lay.Files = append(lay.Files, partition.File{Start: start, Rows: n, RowGroups: []partition.RowGroup{{Start: start, Rows: n}}})
		start += n
	}
	newPlan := func(join bool) *Plan {
		p := &Plan{Layout: lay, ChunkRows: 128, UnitRows: 1000, join: join}
		var s int64
		for j, n := range sizes {
			p.Partitions = append(p.Partitions, Partition{Index: j, Start: s, Rows: n})
			s += n
		}
		return p
	}
	check := func(p *Plan) [][2]int {
		units, part := p.Units()
		var spans [][2]int
		next := int64(0)
		for u, un := range units {
			first, end := p.UnitPartitions(u)
			if part[u] != first || end <= first {
				t.Fatalf("unit %d: partition %d, partitions [%d, %d)", u, part[u], first, end)
			}
			if un.Start != next {
				t.Fatalf("unit %d starts at row %d, want %d", u, un.Start, next)
			}
			var rows int64
			for _, c := range un.Chunks {
				if c.Start != un.Start+rows || c.Rows > p.ChunkRows {
					t.Fatalf("unit %d: chunk %+v at row %d", u, c, un.Start+rows)
				}
				rows += c.Rows
			}
			if rows != un.Rows || un.Rows > p.UnitRows {
				t.Fatalf("unit %d: %d rows, chunks %d, at most %d", u, un.Rows, rows, p.UnitRows)
			}
			if end-first > 1 {
				var want int64
				for _, pp := range p.Partitions[first:end] {
					want += pp.Rows
				}
				if want != un.Rows || p.Partitions[first].Start != un.Start {
					t.Fatalf("unit %d holds partitions [%d, %d) but %d rows from %d", u, first, end, un.Rows, un.Start)
				}
			}
			next += un.Rows
			spans = append(spans, [2]int{first, end})
		}
		if next != start {
			t.Fatalf("units hold %d rows of %d", next, start)
		}
		for j := range p.Partitions { // PartitionUnits: the units whose partitions include j
			lo, hi := p.PartitionUnits(j)
			for u := range units {
				first, end := p.UnitPartitions(u)
				if in := first <= j && j < end; in != (lo <= u && u < hi) {
					t.Fatalf("partition %d: units [%d, %d), but unit %d holds partitions [%d, %d)", j, lo, hi, u, first, end)
				}
			}
		}
		return spans
	}
	joined := check(newPlan(true))
	want := [][2]int{{0, 3}, {4, 5}, {5, 6}, {5, 6}, {5, 6}, {6, 8}, {8, 10}}
	if len(joined) != len(want) {
		t.Fatalf("joined units %v, want %v", joined, want)
	}
	for i := range want {
		if joined[i] != want[i] {
			t.Fatalf("joined units %v, want %v", joined, want)
		}
	}
	for u, sp := range check(newPlan(false)) {
		if sp[1]-sp[0] != 1 {
			t.Fatalf("without join, unit %d holds partitions %v", u, sp)
		}
	}
}
