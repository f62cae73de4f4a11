package plan

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/partition"
	"github.com/relayout/relayout/source"
)

// Memory is how a run splits its memory budget.
type Memory struct {
	// Fixed is what writing needs whatever the unit size; UnitRows the
	// rows gathered in memory at once; ChunkRows the writer's batch.
	Fixed, UnitRows, ChunkRows int64
	// MemRowBytes is decoded bytes per row.
	MemRowBytes float64
	// Units are the layout's units for UnitRows.
	Units []partition.Unit
	// MapWorkers is how many in-process map tasks may run at once: each
	// holds one decoded input row group and what it routes from it.
	MapWorkers int
}

// SizeMemory sizes the units. Fixed costs: the Go runtime and binary; every
// leaf column's pending page (uncompressed, up to --page-bytes); the largest
// row group's compressed pages, buffered until it is closed; gathered chunks
// in flight; with tensors, one shard. What is left holds one unit of decoded
// rows, for the column types gathered through arrow the same rows
// concatenated per column (one column at a time), and GC headroom.
// memRowBytes is decoded bytes per row, measured on a sample. (Most
// schemas are now gathered without concatenating, so the fifth below is
// conservative for them; it is kept: the ceiling tests were tuned with it.)
func SizeMemory(tbl *source.Table, in Sizes, layout partition.Layout, memRowBytes float64, o Options, r Resources) (Memory, error) {
	tensors := o.Tensors != nil
	memRowBytes = max(in.RowBytes, memRowBytes)
	compRatio := 1.0
	if in.Uncompressed > 0 {
		compRatio = min(max(float64(in.Bytes)/float64(in.Uncompressed), 0.05), 1)
	}
	// The writer's batch: 4 MiB of rows as the footers count them, 16
	// MiB decoded at most, 16 rows at least (it was 1,024, a GiB of 1 MB
	// images, gathered three at a time). Strings held as a dictionary
	// decode to many times the footers' bytes: 110 columns of a billing
	// export, 40 bytes a row in the footer and 1,064 decoded, made
	// batches of 64 MiB. A batch holds no more rows than the table: that
	// 224 KiB file of 6,347 rows was refused below 256 MiB ("writing
	// alone needs about 255 MiB"), counting three batches of 65,536 rows.
	chunkRows := min(max(min(int64((4<<20)/max(in.RowBytes, 1)), int64((16<<20)/max(memRowBytes, 1))), 16), 64<<10)
	chunkBytes := int64(float64(min(chunkRows, max(tbl.Rows, 1))) * memRowBytes)
	rowGroupBytes := int64(float64(min(layout.TargetRows, max(tbl.Rows, 1))) * in.RowBytes)
	pending := min(in.Leaves*o.PageBytes, rowGroupBytes) // pages not yet cut
	fixed := int64(RuntimeReserve) + pending + int64(float64(rowGroupBytes)*compRatio) + int64(max(r.Parallel, 2)+1)*chunkBytes
	// A file's footer metadata, held until the file closes, beyond the
	// FooterInReserve the runtime reserve already holds; a file the plan
	// may still make smaller (FitMemory) counts as the most row groups it
	// will hold.
	footerRGs := mostRowGroups(layout)
	if r.FitFileBytes {
		footerRGs = min(footerRGs, maxFooterRowGroups(r.MemoryLimit, in.Leaves))
	}
	fixed += max(footerRGs*max(in.Leaves, 1)*FooterChunkBytes-FooterInReserve, 0)
	if tensors { // one shard's tensors are buffered until it is written
		shard := o.Tensors.ShardBytes
		if o.Tensors.ShardBlocks > 0 { // whole blocks of samples (queries when packed), whatever their bytes
			shard = int64(float64(o.Tensors.ShardBlocks*o.Tensors.BlockSamples) * max(in.RowsPerSample, 1) * memRowBytes)
		}
		fixed += min(shard, int64(float64(tbl.Rows)*memRowBytes)) + chunkBytes
	}
	avail := r.MemoryLimit - fixed
	if r.Sample {
		avail = max(avail, 8<<20)
	}
	if avail < 8<<20 {
		return Memory{}, errs.Usagef("--memory-limit %d MiB is too small for this table: writing alone needs about %d MiB (%d columns x %d KiB pages, a %d-row row group, the footer of a %d-row-group file, chunks in flight, a tensor shard); raise --memory-limit or lower --row-group-bytes, --file-bytes, --page-bytes or --shard-bytes",
			r.MemoryLimit>>20, (fixed+8<<20)>>20, in.Leaves, o.PageBytes>>10, layout.TargetRows, footerRGs)
	}
	// A unit's rows are held once, plus its gathered chunks (and, for
	// the types partition.UnitRows.Take leaves to arrow, twice while such
	// a column is concatenated), plus GC headroom that must hold up when the
	// CPU is contended: a fifth of what is left after a further 16 MiB,
	// which the run also keeps out of Go's soft memory limit (measured:
	// under a 128 MiB limit the peak RSS went from 148-159 MiB to 140-142
	// MiB).
	unitRows := int64(float64(max(avail-UnitHeadroom, 8<<20)/5) / max(memRowBytes, 1))
	if r.UnitRows > 0 {
		unitRows = r.UnitRows
	}
	// The map phase runs before the units are gathered: its budget is the
	// limit less the runtime, the kept encoding sample and headroom.
	_, decode := InputNeed(tbl, memRowBytes)
	perMap := max(MapWorkerBytes(tbl.LargestRowGroup(), memRowBytes), decode)
	sampleBytes := int64(float64(min(tbl.Rows, 32<<10)) * memRowBytes)
	mapWorkers := int(min(max((r.MemoryLimit-RuntimeReserve-UnitHeadroom-sampleBytes)/max(perMap, 1), 1), int64(max(r.Parallel, 1))))
	return Memory{Fixed: fixed, UnitRows: unitRows, ChunkRows: chunkRows, MemRowBytes: memRowBytes, MapWorkers: mapWorkers,
		Units: partition.GroupUnits(partition.Chunks(layout, chunkRows), unitRows)}, nil
}

// MinFitRowGroupBytes is the smallest row-group target FitMemory lowers
// --row-group-bytes to.
const MinFitRowGroupBytes = 1 << 20

// FitMemory sizes memory for the layout of o over hist; when writing does
// not fit r.MemoryLimit and r.FitRowGroups allows it, it halves the
// row-group target (and the minimum, with r.FitMinRowGroups) and lays out
// again until it fits and a row group is at most an eighth of the memory
// left after the runtime, down to MinFitRowGroupBytes. It returns the options the layout
// was made with: the run records them, so the output is what a run with
// those explicit settings writes.
func FitMemory(tbl *source.Table, hist *partition.Histogram, in Sizes, memRowBytes float64, o Options, r Resources) (Options, partition.Layout, Memory, error) {
	if !r.Sample {
		if err := InputRowGroupsFit(tbl, max(memRowBytes, in.RowBytes), r.MemoryLimit); err != nil {
			return o, partition.Layout{}, Memory{}, err
		}
	}
	o, layout, mp, err := fitRowGroups(tbl, hist, in, memRowBytes, o, r)
	if err != nil || !r.FitFileBytes {
		return o, layout, mp, err
	}
	// Files: no more row groups than the footer budget (a sixteenth of
	// the memory after the runtime) holds. The first target is the rows of
	// that many average row groups; row groups vary with the slices they
	// hold, so a file that still holds too many lowers it by a quarter, down
	// to MinFitFileBytes. The memory plan then counts the footer of the
	// largest file as laid out.
	most := maxFooterRowGroups(r.MemoryLimit, in.Leaves)
	if mostRowGroups(layout) <= most {
		return o, layout, mp, nil // sized with this layout's footer already
	}
	for i := 0; i < 32 && mostRowGroups(layout) > most && o.FileBytes > MinFitFileBytes; i++ {
		var rgs int
		for _, f := range layout.Files {
			rgs += len(f.RowGroups)
		}
		fb := int64(float64(most) * float64(tbl.Rows) / float64(max(rgs, 1)) * max(in.FileRowBytes, 1))
		if i > 0 || fb >= o.FileBytes {
			fb = min(fb, o.FileBytes*3/4)
		}
		o.FileBytes = max(fb&^(1<<20-1), MinFitFileBytes)
		layout = Layout(hist, in, o)
	}
	r.FitFileBytes = false
	mp, err = SizeMemory(tbl, in, layout, memRowBytes, o, r)
	return o, layout, mp, err
}

// Fitted are the size targets FitMemory may lower: what a run records in
// place of the ones it was given.
type Fitted struct {
	RowGroupBytes, MinRowGroupBytes, FileBytes int64
}

// FittedOf returns the size targets of o.
func FittedOf(o Options) Fitted {
	return Fitted{RowGroupBytes: o.RowGroupBytes, MinRowGroupBytes: o.MinRowGroupBytes, FileBytes: o.FileBytes}
}

// MinFitFileBytes is the smallest file target FitMemory lowers --file-bytes
// to.
const MinFitFileBytes = 1 << 20

// MapWorkerBytes is what a map worker holds routing input row groups of
// at most rows rows of memRowBytes decoded bytes each: one row group
// decoded, the pieces routed from it, and 4 MiB more.
func MapWorkerBytes(rows int64, memRowBytes float64) int64 {
	return int64(2*float64(rows)*memRowBytes) + 4<<20
}

// Row groups of more than SliceAbove bytes are decoded in slices of about
// SliceBytes, and of at least SliceColumnBytes a leaf column (SliceRowsOf).
const (
	SliceAbove       = 32 << 20
	SliceBytes       = 2 << 20
	SliceColumnBytes = 256 << 10
)

// SliceRowsOf is the rows of the slices a row group is decoded in
// (source.Table.ReadSliced), 0 for all at once, from its file's footer, so
// that the plan, its sample and every map task decide alike: a row group
// of more than SliceAbove bytes is decoded in slices of about SliceBytes,
// a row at least, and not finer than SliceColumnBytes a leaf column, and
// so is a smaller one that would hold more decoded whole. A
// large row group of heavy rows (documents, images: 2,048 binaries of 98
// KB, 200 MB) is sliced; a wide one is not (2,001 float columns in slices
// of 1,024 rows, 4 KB a column, took twice the heap of one read).
func SliceRowsOf(ref source.RowGroupRef) int64 {
	slice, _ := decodeOf(ref)
	return slice
}

// WholeDecodeExtra is what decoding row group ref whole holds beyond its
// values (source.File.DecodeExtra), 0 for one decoded in slices
// (SliceRowsOf).
func WholeDecodeExtra(ref source.RowGroupRef) int64 {
	_, extra := decodeOf(ref)
	return extra
}

// decodeOf is SliceRowsOf and WholeDecodeExtra of ref.
func decodeOf(ref source.RowGroupRef) (slice, extra int64) {
	f := ref.File
	rows, rowBytes := ref.Rows(), f.DecodedRowBytes()
	extra = f.DecodeExtra(ref.RowGroup)
	n := max(int64(SliceBytes/max(rowBytes, 1)), int64(float64(SliceColumnBytes*max(f.Leaves, 1))/max(rowBytes, 1)), 1)
	if n >= rows {
		return 0, extra
	}
	// A smaller row group is sliced only where decoding it whole would
	// hold more: 31 MiB of 52-byte strings in one page held 159 MiB
	// decoded whole.
	if float64(rows)*rowBytes <= SliceAbove && DecodeBytes(rows, rowBytes, 0, source.Page{})+extra <= DecodeBytes(rows, rowBytes, n, source.Page{}) {
		return 0, extra
	}
	return n, 0
}

// DecodeBytes is what decoding a row group of rows rows of memRowBytes
// decoded bytes each holds, slice its slice rows (SliceRowsOf): arrow-go's
// column readers reserve every column's values for the next power of two
// of the rows they read (above them while a column is decoded, compact
// then copies it to its size: source.File.DecodeExtra). A row group
// decoded in slices is held whole while it is routed, with what its strings' doubling and the slices in flight
// leave, and the encoding sample of up to SliceAbove bytes the run keeps:
// 2.25 times its bytes and those. Measured at the limit this asks for, one
// spinning process beside each run: 78 MiB of 40 KB binaries peaked at
// 253-255 MiB of 273, 192 MiB of 98 KB binaries at 500-515 of 531, 242 MiB
// of 2 KB strings at 608-610 of 645 (at twice the bytes, 98 KB binaries
// went 20 MiB over, at 1.75 times 40 KB ones 6). A page is decoded whole
// however few of its rows a slice asks for, so a row group in few large
// pages (page: its largest, source.File.LargestPage) holds its bytes and
// what decoding that page holds (pageHeld), when that is more: 120 rows of
// 1 MB binaries in one zstd page of 116 MiB (63 MiB stored) went to
// 497-502 MiB at the 426 MiB that 2.25 times the bytes asked for; at the
// 533 MiB this asks for, 518 MiB, one spinning process beside it.
func DecodeBytes(rows int64, memRowBytes float64, slice int64, page source.Page) int64 {
	if slice > 0 {
		b := float64(rows) * memRowBytes
		return int64(max(2.25*b, b+pageHeld(page))) + 4*int64(float64(slice)*memRowBytes) + SliceAbove
	}
	return int64(float64(source.PowerOfTwoAtLeast(rows)) * memRowBytes)
}

// pageHeld is what decoding from a page holds beside the values decoded:
// the page decompressed and half as much again (the decoder's builders
// grow by doubling), its stored copy and the column chunk it is cut from
// (arrow-go reads a chunk whole). Measured, with one spinning process
// beside each run at the limit it gives: 40 KB binaries in one 77 MiB
// snappy page of 8 MiB stored, 290 MiB of 320; 1 MB binaries in one zstd
// page of 116 MiB, 63 MiB stored, 518 of 533.
func pageHeld(p source.Page) float64 {
	return 1.5*float64(p.Bytes) + 2*float64(p.Stored)
}

// InputNeed is the most memory decoding one of the table's row groups
// takes (DecodeBytes, with the largest page of one decoded in slices:
// source.File.LargestPage, and what one decoded whole holds besides its
// values: source.File.DecodeExtra), and that row group. Pages are sized for the
// pagedRowGroups row groups of most rows decoded in slices (a request each
// where the input is in an object store: a table of 80,000 row groups of
// images would otherwise cost the plan 80,000 of them); the others, no
// larger, are taken to hold the largest page found. A page that cannot be
// sized counts as none: reading it reports why.
func InputNeed(tbl *source.Table, memRowBytes float64) (big source.RowGroupRef, most int64) {
	type slicedRef struct {
		ref   source.RowGroupRef
		slice int64
	}
	var sliced []slicedRef
	for _, f := range tbl.Files {
		for i, n := range f.RowGroupRows {
			ref := source.RowGroupRef{File: f, RowGroup: i}
			slice, extra := decodeOf(ref)
			if slice > 0 {
				sliced = append(sliced, slicedRef{ref, slice})
				continue
			}
			if need := DecodeBytes(n, memRowBytes, 0, source.Page{}) + extra; need > most {
				big, most = ref, need
			}
		}
	}
	// Most rows first; ties in input order, so the row group named is the
	// same every time.
	slices.SortStableFunc(sliced, func(a, b slicedRef) int { return cmp.Compare(b.ref.Rows(), a.ref.Rows()) })
	var largest source.Page
	for k, s := range sliced {
		page := largest
		if k < pagedRowGroups {
			page, _ = s.ref.File.LargestPage(s.ref.RowGroup)
			if page.Bytes > largest.Bytes {
				largest = page
			}
		}
		if need := DecodeBytes(s.ref.Rows(), memRowBytes, s.slice, page); need > most || (need == most && big.File != nil && s.ref.Offset() < big.Offset()) {
			big, most = s.ref, need
		}
	}
	return big, most
}

// pagedRowGroups is how many row groups InputNeed sizes the pages of.
const pagedRowGroups = 8

// InputRowGroupsFit refuses (a usage error, exit 2) a table one of whose
// input row groups cannot be decoded within limit (DecodeBytes, beside the
// runtime, the pieces routed from it, 2 MiB each taken and encoded two at
// a time, and a margin of 24 MiB: at 12, the 1,001-column test table
// peaked at 190 MiB of the 190 named in CI): a smaller output or unit does not help, and the
// run went over the limit (2,001 float columns in one row group of 20,000
// rows, 160 MB: a peak of 300 MiB at --memory-limit 288MiB; 305-308 MiB at
// 290 to 318MiB, two spinning processes beside it; this asks for 318). The
// refusal names the row group needing most and the limit it needs.
// limit <= 0: no limit.
func InputRowGroupsFit(tbl *source.Table, memRowBytes float64, limit int64) error {
	return inputRowGroupsFit(tbl, memRowBytes, func() float64 { return memRowBytes }, limit)
}

// inputRowGroupsFit is InputRowGroupsFit refusing at memRowBytes and
// naming the limit needed at what nameRowBytes returns, where that is
// more: the footers prove one figure and estimate another (InputFits).
func inputRowGroupsFit(tbl *source.Table, memRowBytes float64, nameRowBytes func() float64, limit int64) error {
	if limit <= 0 {
		return nil
	}
	big, most := InputNeed(tbl, memRowBytes)
	need := RuntimeReserve + most + 24<<20
	if big.File == nil || need <= limit {
		return nil
	}
	if nameRowBytes := nameRowBytes(); nameRowBytes > memRowBytes {
		big, most = InputNeed(tbl, nameRowBytes)
		need = RuntimeReserve + most + 24<<20
		memRowBytes = nameRowBytes
	}
	mib := func(n int64) int64 { return (n + 1<<20 - 1) >> 20 }
	pages := ""
	if page, _ := big.File.LargestPage(big.RowGroup); SliceRowsOf(big) > 0 && pageHeld(page) > 1.25*float64(big.Rows())*memRowBytes {
		pages = fmt.Sprintf(" in pages of up to %d MiB", mib(page.Bytes))
	}
	return errs.WithHint(errs.Usagef("--memory-limit %d MiB is too small for this input: row group %d of %s holds %d rows, about %d MiB decoded%s; reading it takes %d MiB with the runtime",
		limit>>20, big.RowGroup, big.File.Obj.URL, big.Rows(), mib(int64(float64(big.Rows())*memRowBytes)), pages, mib(need)),
		fmt.Sprintf("raise --memory-limit to at least %dMiB, or rewrite the input with smaller row groups", mib(need)))
}

// InputFits is InputRowGroupsFit from the footers alone, for the plan to
// refuse a limit too small for the input before it reads anything: reading
// the sample first took a 577 MiB row group of 1 MB binaries to 914 MiB of
// RSS, and a pod given the limit as its own would be killed instead of
// told. It refuses at the decoded bytes the footers prove
// (source.File.DecodedFloor: the uncompressed bytes, numbers held as
// dictionary indices at their decoded width) and a tenth more
// (FooterDecodeSlack), so as not to refuse a limit the run would take
// (the check after the sample counts the decoded bytes measured). The
// limit it names counts what the footers estimate (DecodedEstimate: a
// string's offset, validity bits, list offsets) and a twentieth more
// (FooterEstimateSlack), where that is more, so that
// the limit named also passes FitMemory's check after the sample: counting
// only the footers' bytes, it named 88 MiB for the generated log, which the
// check after the sample refused for 89, and 367 MiB for a table of
// dictionary-encoded float embeddings, refused after the sample for 434.
// Where it refuses, the estimate of the row group the sample reads counts
// strings held as a dictionary at its entries' average length
// (source.File.DecodedEstimateOf: one header read a such column): the
// footers' figure alone named 91 MiB for 2M rows of 100 distinct URLs,
// refused after the sample for 134. The dry run's run of its sample
// (r.Sample) refuses nothing.
func InputFits(tbl *source.Table, r Resources) error {
	if r.Sample || tbl.Rows == 0 {
		return nil
	}
	scaleFromDictionaries(tbl) // row groups judged for slicing as the run will judge them
	floor, est := FooterRowBytes(tbl)
	return inputRowGroupsFit(tbl, floor*FooterDecodeSlack, func() float64 {
		// The check after the sample counts the first non-empty row
		// group's bytes a row for every row group: so does this, with
		// its dictionaries' entries measured.
		if ref, ok := firstRowGroup(tbl); ok {
			if b, err := ref.File.DecodedEstimateOf(ref.RowGroup); err == nil { // kept from scaleFromDictionaries
				est = max(est, float64(b)/float64(ref.Rows()))
			}
		}
		return max(floor*FooterDecodeSlack, est*FooterEstimateSlack)
	}, r.MemoryLimit)
}

// FooterEstimateSlack is what InputFits adds to the footers' estimate of
// the decoded bytes for the limit it names. The estimate came within 1% of
// the decoded bytes of the generated log, of wide float tables and of heavy
// binaries, and 5.5% under them on a table of repeated strings.
const FooterEstimateSlack = 1.05

// FooterRowBytes is the decoded bytes per row the footers prove at least
// (source.File.DecodedFloor), and what they estimate
// (source.File.DecodedEstimate).
func FooterRowBytes(tbl *source.Table) (floor, estimate float64) {
	var f0, e0 int64
	for _, f := range tbl.Files {
		f0 += f.DecodedFloor
		e0 += f.DecodedEstimate
	}
	rows := float64(max(tbl.Rows, 1))
	return float64(max(f0, 1)) / rows, float64(max(e0, 1)) / rows
}

// FooterDecodeSlack is what InputFits adds to the footers' bytes per row.
const FooterDecodeSlack = 1.1

// maxFooterRowGroups is the most row groups a file may hold at this memory
// limit when the plan sizes files: their footer metadata within a
// sixteenth of the memory left after the runtime.
func maxFooterRowGroups(limit, leaves int64) int64 {
	return max((limit-RuntimeReserve)/16/(max(leaves, 1)*FooterChunkBytes), 4)
}

// mostRowGroups is the row groups of the layout's largest file.
func mostRowGroups(l partition.Layout) int64 {
	var n int
	for _, f := range l.Files {
		n = max(n, len(f.RowGroups))
	}
	return int64(n)
}

// fitRowGroups is FitMemory's row-group part.
func fitRowGroups(tbl *source.Table, hist *partition.Histogram, in Sizes, memRowBytes float64, o Options, r Resources) (Options, partition.Layout, Memory, error) {
	layout := Layout(hist, in, o)
	mp, err := SizeMemory(tbl, in, layout, memRowBytes, o, r)
	// Row groups the user did not size go down to an eighth of the
	// memory left after the runtime, whether or not the fixed-cost model
	// says they fit: it underestimates what large buffered row groups take
	// (the column writers' encoders and pages; measured at a 128 MiB limit
	// on 2.5M rows: 64 MiB row groups peaked at 200 MiB RSS, 8 or 16 MiB
	// ones at 141; at 192 MiB on 4M rows the default's row groups, which
	// the model said fit, peaked at 207-211 MiB).
	small := func() bool {
		return float64(min(layout.TargetRows, max(tbl.Rows, 1)))*in.RowBytes <= float64(r.MemoryLimit-RuntimeReserve)/8
	}
	if !r.FitRowGroups || err == nil && small() || err != nil && !errs.Is(err, errs.Usage) {
		return o, layout, mp, err
	}
	first, o0, l0, mp0 := err, o, layout, mp
	for (err != nil && errs.Is(err, errs.Usage) || !small()) && o.RowGroupBytes/2 >= MinFitRowGroupBytes {
		o.RowGroupBytes /= 2
		if r.FitMinRowGroups {
			o.MinRowGroupBytes = o.RowGroupBytes / 8
		}
		o.MinRowGroupBytes = min(o.MinRowGroupBytes, o.RowGroupBytes)
		layout = Layout(hist, in, o)
		mp, err = SizeMemory(tbl, in, layout, memRowBytes, o, r)
	}
	if err != nil {
		// Smaller row groups did not help (a tensor shard, many columns'
		// pages): the refusal names the settings as they were.
		if first == nil { // the model's fit, as it was
			return o0, l0, mp0, nil
		}
		return o0, l0, Memory{}, first
	}
	return o, layout, mp, err
}
