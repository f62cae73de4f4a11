package plan

import (
	"slices"
	"strings"
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

// TestReduceTaskGroups: consecutive partitions share a reduce task up to
// the target rows; a partition as large is a task of its own; the task of
// every partition and the partitions of every task agree; a plan whose
// task starts do not cut its partitions in order is refused.
func TestReduceTaskGroups(t *testing.T) {
	parts := func(rows ...int64) []Partition {
		var out []Partition
		var start int64
		for j, r := range rows {
			out = append(out, Partition{Index: j, Start: start, Rows: r})
			start += r
		}
		return out
	}
	for _, c := range []struct {
		rows   []int64
		target int64
		want   []int
	}{
		{[]int64{10, 10, 10, 10}, 25, []int{0, 2}},
		{[]int64{10, 10, 10, 10}, 40, []int{0}},
		{[]int64{10, 50, 10, 10}, 25, []int{0, 1, 2}}, // the large one alone
		{[]int64{50, 50}, 25, []int{0, 1}},
		{[]int64{0, 0, 30, 0}, 25, []int{0, 2, 3}}, // empty packed partitions join
		{[]int64{7}, 1, []int{0}},
	} {
		p := &Plan{Partitions: parts(c.rows...)}
		p.TaskStarts = groupTasks(p.Partitions, c.target)
		if !slices.Equal(p.TaskStarts, c.want) {
			t.Fatalf("rows %v, target %d: tasks start at %v, want %v", c.rows, c.target, p.TaskStarts, c.want)
		}
		if p.ReduceTaskCount() != len(c.want) {
			t.Fatalf("rows %v: %d tasks, want %d", c.rows, p.ReduceTaskCount(), len(c.want))
		}
		next := 0
		for task := range p.ReduceTaskCount() {
			first, end := p.TaskPartitions(task)
			if first != next || end <= first {
				t.Fatalf("rows %v: task %d holds partitions [%d, %d), after %d", c.rows, task, first, end, next)
			}
			for j := first; j < end; j++ {
				if p.PartitionTask(j) != task {
					t.Fatalf("rows %v: partition %d in task %d, PartitionTask says %d", c.rows, j, task, p.PartitionTask(j))
				}
			}
			next = end
		}
		if next != len(c.rows) {
			t.Fatalf("rows %v: the tasks end at partition %d", c.rows, next)
		}
	}
	// A task per partition when the plan names none.
	p := &Plan{Partitions: parts(5, 5, 5)}
	if f, e := p.TaskPartitions(1); p.ReduceTaskCount() != 3 || f != 1 || e != 2 || p.PartitionTask(2) != 2 {
		t.Fatalf("no task starts: %d tasks, task 1 [%d, %d)", p.ReduceTaskCount(), f, e)
	}
	for _, starts := range [][]int{nil, {0, 1}, {1}, {0, 0}, {0, 2, 1}, {0, 3}} {
		p := &Plan{Rows: 15, UnitRows: 5, Partitions: parts(5, 5, 5), TaskStarts: starts,
			Slices: []Slice{{Parts: [][]byte{{1}}, Values: []any{"a"}, Rows: 15}}}
		for j := range p.Partitions {
			p.Partitions[j].Files = []int{j}
			p.Layout.Files = append(p.Layout.Files, partition.File{Start: int64(5 * j), Rows: 5, RowGroups: []partition.RowGroup{{Start: int64(5 * j), Rows: 5}}})
		}
		err := p.Check()
		if ok := len(starts) == 0 || slices.Equal(starts, []int{0, 1}); ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "reduce task")) {
			t.Fatalf("task starts %v: %v", starts, err)
		}
	}
}
