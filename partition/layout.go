package partition

// LayoutOptions sizes the output. Byte sizes are turned into row counts with
// the input's average bytes per row, so the layout depends only on the input
// and these options.
type LayoutOptions struct {
	// RowGroupBytes is the target uncompressed size of a row group.
	RowGroupBytes int64
	// MinRowGroupBytes: a slice at least this large owns whole row groups;
	// smaller neighbouring slices share one.
	MinRowGroupBytes int64
	// RowGroupRows caps the rows of a row group.
	RowGroupRows int64
	// FileBytes is the target size of a file on disk.
	FileBytes int64
	// BoundaryKeys: row groups always end where one of the first
	// BoundaryKeys slice keys changes, unless the groups on both sides of
	// the change are tiny (fewer rows than MinRows/32).
	BoundaryKeys int
	// FileKeys: files (and so row groups) always end where one of the
	// first FileKeys slice keys changes, whatever their sizes: each file
	// then lies in one Hive partition folder.
	FileKeys int
	// RowBytes is the average uncompressed bytes per row; FileRowBytes the
	// average stored (compressed) bytes per row. Both at least 1.
	RowBytes     float64
	FileRowBytes float64
}

// RowGroup is a run of consecutive output rows.
type RowGroup struct {
	Start, Rows int64
}

// File is a run of consecutive row groups.
type File struct {
	RowGroups []RowGroup
	Start     int64
	Rows      int64
}

// Layout is the planned output files.
type Layout struct {
	Files []File
	// TargetRows, MinRows and FileRows are the row counts the byte targets
	// translated to.
	TargetRows, MinRows, FileRows int64
}

func atLeast1(v int64) int64 {
	if v < 1 {
		return 1
	}
	return v
}

// PlanLayout cuts the ordered rows of slices into row groups and files.
//
// Rules: a row group holds at most TargetRows rows. A slice of at least
// MinRows rows owns whole row groups: it starts a new row group and is split
// into ceil(rows/TargetRows) row groups of near-equal size. Smaller slices
// are packed together in order until the next would overflow TargetRows; so
// row groups end at slice boundaries except inside a large slice. Files take
// whole row groups until the next would take them past FileRows rows.
func PlanLayout(slices []Slice, o LayoutOptions) Layout {
	rowBytes := o.RowBytes
	if rowBytes < 1 {
		rowBytes = 1
	}
	fileRowBytes := o.FileRowBytes
	if fileRowBytes < 1 {
		fileRowBytes = 1
	}
	target := atLeast1(int64(float64(o.RowGroupBytes) / rowBytes))
	if o.RowGroupRows > 0 && target > o.RowGroupRows {
		target = o.RowGroupRows
	}
	minRows := atLeast1(int64(float64(o.MinRowGroupBytes) / rowBytes))
	if minRows > target {
		minRows = target
	}
	fileRows := atLeast1(int64(float64(o.FileBytes) / fileRowBytes))
	l := Layout{TargetRows: target, MinRows: minRows, FileRows: fileRows}

	// Rows of each run of slices sharing their first BoundaryKeys values.
	prefixRows := make([]int64, len(slices))
	prefixNew := make([]bool, len(slices))
	if o.BoundaryKeys > 0 {
		start := 0
		for i := range slices {
			if i == 0 || !samePrefix(slices[i-1], slices[i], o.BoundaryKeys) {
				prefixNew[i] = true
				start = i
			}
			prefixRows[start] += slices[i].Rows
		}
		// Propagate each run's total to all of its slices.
		for i := 0; i < len(slices); {
			j := i + 1
			for j < len(slices) && !prefixNew[j] {
				j++
			}
			for k := i; k < j; k++ {
				prefixRows[k] = prefixRows[i]
			}
			i = j
		}
	}
	tiny := minRows / 32
	var groups []RowGroup
	var fileStart []bool // groups[i] must start a file
	var cur RowGroup
	curStarts, prev := false, -1
	flush := func() {
		if cur.Rows > 0 {
			groups = append(groups, cur)
			fileStart = append(fileStart, curStarts)
		}
		cur, curStarts = RowGroup{Start: cur.Start + cur.Rows}, false
	}
	for i, s := range slices {
		if s.Rows == 0 {
			continue
		}
		if o.FileKeys > 0 && prev >= 0 && !samePrefix(slices[prev], s, o.FileKeys) {
			flush()
			curStarts = true
		}
		prev = i
		if s.Rows >= minRows {
			starts := curStarts
			flush()
			k := (s.Rows + target - 1) / target
			base, extra := s.Rows/k, s.Rows%k
			start := s.Start
			for i := int64(0); i < k; i++ {
				n := base
				if i < extra {
					n++
				}
				groups = append(groups, RowGroup{Start: start, Rows: n})
				fileStart = append(fileStart, starts && i == 0)
				start += n
			}
			cur = RowGroup{Start: start}
			continue
		}
		if cur.Rows > 0 && cur.Rows+s.Rows > target {
			flush()
		}
		if cur.Rows > 0 && o.BoundaryKeys > 0 && prefixNew[i] && (prefixRows[i] >= tiny || prefixRows[i-1] >= tiny) {
			flush()
		}
		cur.Rows += s.Rows
	}
	flush()

	var f File
	for gi, g := range groups {
		if f.Rows > 0 && (f.Rows+g.Rows > fileRows || fileStart[gi]) {
			l.Files = append(l.Files, f)
			f = File{Start: g.Start}
		}
		if len(f.RowGroups) == 0 {
			f.Start = g.Start
		}
		f.RowGroups = append(f.RowGroups, g)
		f.Rows += g.Rows
	}
	if f.Rows > 0 || len(l.Files) == 0 {
		l.Files = append(l.Files, f)
	}
	return l
}

// Chunks cuts each planned row group, from its start, into pieces of at most
// maxRows rows: the batches handed to the writer. The grid depends only on
// the layout, so the writer sees the same batches however rows are gathered.
func Chunks(l Layout, maxRows int64) []RowGroup {
	maxRows = atLeast1(maxRows)
	var out []RowGroup
	for _, f := range l.Files {
		for _, g := range f.RowGroups {
			for s := g.Start; s < g.Start+g.Rows; s += maxRows {
				out = append(out, RowGroup{Start: s, Rows: min(maxRows, g.Start+g.Rows-s)})
			}
		}
	}
	return out
}

// Unit is a run of consecutive chunks gathered in memory at once.
type Unit struct {
	Start, Rows int64
	Chunks      []RowGroup
}

// GroupUnits groups consecutive chunks into units of at most maxRows rows
// (a single larger chunk is a unit by itself).
func GroupUnits(chunks []RowGroup, maxRows int64) []Unit {
	var out []Unit
	var cur Unit
	for _, c := range chunks {
		if cur.Rows > 0 && cur.Rows+c.Rows > maxRows {
			out = append(out, cur)
			cur = Unit{}
		}
		if cur.Rows == 0 {
			cur.Start = c.Start
		}
		cur.Rows += c.Rows
		cur.Chunks = append(cur.Chunks, c)
	}
	if cur.Rows > 0 || len(out) == 0 {
		out = append(out, cur)
	}
	return out
}

func samePrefix(a, b Slice, k int) bool {
	if len(a.Parts) < k || len(b.Parts) < k {
		return true
	}
	for i := 0; i < k; i++ {
		if string(a.Parts[i]) != string(b.Parts[i]) {
			return false
		}
	}
	return true
}
