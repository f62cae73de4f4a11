package partition

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func slicesOf(rows ...int64) []Slice {
	var out []Slice
	var start int64
	for i, r := range rows {
		out = append(out, Slice{Key: []byte(fmt.Sprintf("%04d", i)), Parts: [][]byte{{byte(i / 3)}, {byte(i)}}, Rows: r, Start: start})
		start += r
	}
	return out
}

// checkCover: row groups and files tile the rows exactly, in order.
func checkCover(t *testing.T, l Layout, total int64) {
	t.Helper()
	var next int64
	for fi, f := range l.Files {
		if f.Start != next && f.Rows > 0 {
			t.Fatalf("file %d starts at %d, want %d", fi, f.Start, next)
		}
		var sum int64
		for _, g := range f.RowGroups {
			if g.Start != next || g.Rows <= 0 {
				t.Fatalf("file %d: row group %+v, want start %d", fi, g, next)
			}
			next += g.Rows
			sum += g.Rows
		}
		if sum != f.Rows {
			t.Fatalf("file %d: %d rows in row groups, %d in file", fi, sum, f.Rows)
		}
	}
	if next != total {
		t.Fatalf("layout covers %d rows, want %d", next, total)
	}
}

func TestPlanLayoutRules(t *testing.T) {
	o := LayoutOptions{RowGroupBytes: 1000, MinRowGroupBytes: 300, FileBytes: 2500, RowBytes: 1, FileRowBytes: 1}
	// target 1000 rows, min 300, file 2500.
	sl := slicesOf(2500, 100, 50, 120, 900, 10, 10, 400)
	l := PlanLayout(sl, o)
	checkCover(t, l, 4090)
	var groups []RowGroup
	for _, f := range l.Files {
		groups = append(groups, f.RowGroups...)
		if f.Rows > 2500 {
			t.Errorf("file of %d rows exceeds the 2500-row target", f.Rows)
		}
	}
	want := []RowGroup{
		{0, 834}, {834, 833}, {1667, 833}, // 2500 split into 3 near-equal owned groups
		{2500, 270}, // small slices 100+50+120 share
		{2770, 900}, // 900 >= min: owns its group
		{3670, 20},  // 10+10 share
		{3690, 400}, // 400 >= min: owns
	}
	if fmt.Sprint(groups) != fmt.Sprint(want) {
		t.Fatalf("row groups\n got  %v\n want %v", groups, want)
	}
}

func TestPlanLayoutBoundaryKeys(t *testing.T) {
	// Parts[0] changes every 3 slices; slices are small, so without the
	// boundary rule they would all share one row group.
	sl := slicesOf(40, 40, 40, 40, 40, 40, 1, 1, 1)
	base := LayoutOptions{RowGroupBytes: 10_000, MinRowGroupBytes: 3200, FileBytes: 1 << 20, RowBytes: 1, FileRowBytes: 1}
	l := PlanLayout(sl, base)
	if n := len(l.Files[0].RowGroups); n != 1 {
		t.Fatalf("without boundary keys: %d row groups, want 1", n)
	}
	base.BoundaryKeys = 1
	l = PlanLayout(sl, base)
	checkCover(t, l, 243)
	// tiny = 3200/32 = 100 rows: groups of 120 rows are cut apart, the last
	// group (3 rows) is tiny but its neighbour is not, so it is cut too.
	var got []int64
	for _, g := range l.Files[0].RowGroups {
		got = append(got, g.Rows)
	}
	if fmt.Sprint(got) != "[120 120 3]" {
		t.Fatalf("row groups %v, want [120 120 3]", got)
	}
}

func TestPlanLayoutRandomInvariants(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for it := 0; it < 200; it++ {
		n := 1 + r.IntN(60)
		rows := make([]int64, n)
		var total int64
		for i := range rows {
			rows[i] = int64(r.ExpFloat64() * 300)
			total += rows[i]
		}
		o := LayoutOptions{RowGroupBytes: int64(50 + r.IntN(2000)), FileBytes: int64(100 + r.IntN(20000)), RowGroupRows: int64(r.IntN(3000)), RowBytes: 1, FileRowBytes: 1, BoundaryKeys: r.IntN(2)}
		o.MinRowGroupBytes = o.RowGroupBytes / 8
		sl := slicesOf(rows...)
		l := PlanLayout(sl, o)
		checkCover(t, l, total)
		// No row group exceeds the target; a slice >= MinRows owns whole
		// row groups (no other slice shares them).
		owner := map[int64]int{}
		for _, f := range l.Files {
			for _, g := range f.RowGroups {
				if g.Rows > l.TargetRows {
					t.Fatalf("row group of %d rows > target %d", g.Rows, l.TargetRows)
				}
				for i, s := range sl {
					if s.Rows > 0 && s.Start < g.Start+g.Rows && g.Start < s.Start+s.Rows {
						if s.Rows >= l.MinRows {
							owner[g.Start]++
							if s.Start > g.Start || s.Start+s.Rows < g.Start+g.Rows {
								t.Fatalf("slice %d (%d rows, owning) shares row group %+v", i, s.Rows, g)
							}
						}
					}
				}
			}
		}
		// Chunks tile row groups; units tile chunks.
		ch := Chunks(l, 37)
		units := GroupUnits(ch, 100)
		var next int64
		for _, u := range units {
			for _, c := range u.Chunks {
				if c.Start != next || c.Rows > 37 {
					t.Fatalf("chunk %+v, want start %d, <= 37 rows", c, next)
				}
				next += c.Rows
			}
			if u.Rows > 100 && len(u.Chunks) > 1 {
				t.Fatalf("unit of %d rows > 100", u.Rows)
			}
		}
		if next != total {
			t.Fatalf("chunks cover %d rows, want %d", next, total)
		}
	}
}

// TestPlanLayoutFileKeys: with FileKeys, no file (so no row group) holds
// rows of two prefixes (Hive partition folders), whatever the sizes; a
// large prefix may take several files. Without it small slices of several
// prefixes share a file.
func TestPlanLayoutFileKeys(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for it := 0; it < 300; it++ {
		n := 1 + r.IntN(60)
		rows := make([]int64, n)
		var total int64
		for i := range rows {
			rows[i] = int64(r.ExpFloat64() * 300)
			total += rows[i]
		}
		o := LayoutOptions{RowGroupBytes: int64(50 + r.IntN(2000)), FileBytes: int64(100 + r.IntN(20000)), RowGroupRows: int64(r.IntN(3000)),
			RowBytes: 1, FileRowBytes: 1, BoundaryKeys: r.IntN(2), FileKeys: 1 + r.IntN(2)}
		o.MinRowGroupBytes = o.RowGroupBytes / 8
		sl := slicesOf(rows...)
		l := PlanLayout(sl, o)
		checkCover(t, l, total)
		prefixOf := func(row int64) string {
			for _, s := range sl {
				if s.Rows > 0 && row >= s.Start && row < s.Start+s.Rows {
					return string(s.Parts[0]) + "/" + string(s.Parts[1])[:o.FileKeys-1]
				}
			}
			t.Fatalf("row %d in no slice", row)
			return ""
		}
		for fi, f := range l.Files {
			if f.Rows == 0 {
				continue
			}
			p := prefixOf(f.Start)
			for _, g := range f.RowGroups {
				if prefixOf(g.Start) != p || prefixOf(g.Start+g.Rows-1) != p {
					t.Fatalf("it %d: file %d (prefix %q) holds row group %+v of another prefix", it, fi, p, g)
				}
			}
		}
	}
	// Small slices of three prefixes fit one file without the rule.
	sl := slicesOf(10, 10, 10, 10, 10, 10, 10, 10, 10)
	o := LayoutOptions{RowGroupBytes: 1000, MinRowGroupBytes: 125, FileBytes: 1 << 20, RowBytes: 1, FileRowBytes: 1}
	if n := len(PlanLayout(sl, o).Files); n != 1 {
		t.Fatalf("without FileKeys: %d files", n)
	}
	o.FileKeys = 1
	if n := len(PlanLayout(sl, o).Files); n != 3 {
		t.Fatalf("FileKeys 1: %d files, want 3", n)
	}
}
