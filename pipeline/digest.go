package pipeline

// Query digests: how a detect task of a packed plan decides its
// partition's query-level columns without reading the partition's rows a
// second time.
//
//  1. The plan step probes the encoding sample: its rows grouped by slice
//     and query key, through the same Detector the detect tasks use. A
//     column seen to vary there varies in the table too (the sample's
//     groups are parts of the table's), so only the other columns, the
//     candidates, are in doubt (plan.Packing.Probe).
//  2. Each map task hashes, per row, the query key (q) and the candidate
//     columns (c), and keeps for each partition one record per query,
//     (q, c), sorted by q, in one object under its attempt prefix
//     (QueryDigest).
//  3. A detect task merges its partition's records from every map task. If
//     every query has one c, every candidate column is constant inside
//     every query of the partition (up to a 64-bit hash collision, the
//     same assumption as the fingerprint), and the partition's detection
//     is the probe's. The reading detection would find the same: it
//     compares the rows of a query within a partition, and none differ.
//
// Anything else sends the task back to reading its rows, which decides
// exactly as before: a query whose rows differ within one map task, two
// map tasks that disagree on a query (or two queries whose keys' hashes
// collide), a map task over its digest budget, a plan of an earlier
// version without a probe. The packed fingerprint check of every reduce
// task stands behind both ways: a value packing dropped would change it.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/cespare/xxhash/v2"

	"github.com/relayout/relayout/dedupe"
	"github.com/relayout/relayout/fingerprint"
	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/par"
	"github.com/relayout/relayout/partition"
	"github.com/relayout/relayout/plan"
	"github.com/relayout/relayout/storage"
)

// QueryDigest names a map task's query digests (TaskManifest.Digest): per
// partition, one 16-byte record per query of the task's rows there (the
// query key's hash, then the candidate columns' hash, little-endian),
// sorted by the first, in Path; and their index, digests.idx beside it
// under the map attempt's prefix (digestIndexName), a record per
// partition (partition.EncodeIndex: the partition's byte range of Path,
// its count of records as rows, their xxhash64), which a detect task reads
// by range for its partition. The manifest itself held a count and a hash
// per partition until 2026-12-06, and every detect task read every map
// task's: partitions x map tasks x partitions.
type QueryDigest struct {
	Path       string `json:"path,omitempty"`       // under the work location
	Partitions int    `json:"partitions,omitempty"` // records in the index
	// Unusable, when set, says why the digests cannot decide (none were
	// written): the detect tasks read their rows.
	Unusable string `json:"unusable,omitempty"`
}

// digestIndexName is the digest index's name under a map attempt's
// prefix; digestIndexKind seeds its records' checks (partition.IndexSeed).
const (
	digestFileName  = "digests.bin"
	digestIndexName = "digests.idx"
	digestIndexKind = "digests"
)

const digestRecord = 16 // bytes per record

// probeDetection detects over the sample's rows grouped by slice and query
// key: what plan.Packing.Probe holds.
func probeDetection(sample arrow.RecordBatch, keys plan.Keys) *plan.Probe {
	n := int(sample.NumRows())
	cols := slices.Concat(keys.Slice, keys.Query)
	key := make([][]byte, n)
	var buf []byte
	for i := range key {
		start := len(buf)
		buf = partition.SortKeyOf(buf, sample, cols, i)
		key[i] = buf[start:len(buf):len(buf)]
	}
	ord := make([]int64, n)
	for i := range ord {
		ord[i] = int64(i)
	}
	sort.SliceStable(ord, func(a, b int) bool { return bytes.Compare(key[ord[a]], key[ord[b]]) < 0 })
	d := dedupe.NewDetector(sample.Schema(), cols)
	if err := d.Add(sample, ord); err != nil {
		return nil // a value the hash cannot read: no probe, the tasks read rows
	}
	// A conflict names the query by its key alone, as the reading
	// detection does.
	det := plan.Probe{Varying: make([]bool, sample.NumCols()), Conflicts: map[string]string{}}
	for c, k := range d.Constant() {
		det.Varying[c] = !k
		if cf, ok := d.Conflict(c); ok {
			cf.Query = cf.Query[len(keys.Slice):]
			det.Conflicts[strconv.Itoa(c)] = cf.String()
		}
	}
	return &det
}

// candidates returns the columns a probe left in doubt: neither seen to
// vary nor part of the query key.
func candidates(probe *plan.Probe, schema *arrow.Schema, queryCols []int) ([]int, error) {
	if err := checkProbe(probe, schema); err != nil {
		return nil, err
	}
	var out []int
	for c, v := range probe.Varying {
		if !v && !slices.Contains(queryCols, c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// checkProbe refuses a plan's probe that does not describe schema.
func checkProbe(probe *plan.Probe, schema *arrow.Schema) error {
	if len(probe.Varying) != schema.NumFields() {
		return errs.BadInputf("plan: the packing probe has %d columns, the input schema %d", len(probe.Varying), schema.NumFields())
	}
	return nil
}

// qrec is one query's digest: its key's hash and its candidates' hash.
type qrec struct{ q, c uint64 }

// byQuery orders records by their query key's hash.
func byQuery(a, b prec) int { return cmp.Compare(a.q, b.q) }

// prec is a qrec of a partition, not yet merged.
type prec struct {
	p int
	qrec
}

// digester collects a map task's query digests as its rows are routed.
// add may be called concurrently.
type digester struct {
	queryCols, candCols []int
	part                []int // each unit's partition
	limit               int   // records held at most (the memory budget)

	mu       sync.Mutex
	pending  []prec
	parts    [][]qrec // per partition: sorted by q, one per query
	held     int
	unusable string
}

// pendingRecords is how many records a digester gathers before it sorts
// them into its partitions' lists.
const pendingRecords = 1 << 16

func newDigester(queryCols, candCols, unitPart []int, partitions int, memoryLimit int64) *digester {
	return &digester{queryCols: queryCols, candCols: candCols, part: unitPart,
		// 1/32 of the task's memory: 4 MiB, 262,144 queries, at 128 MiB.
		limit: max(int(memoryLimit/32/digestRecord), pendingRecords),
		parts: make([][]qrec, partitions)}
}

// add digests rec, rows of unit u.
func (g *digester) add(u int, rec arrow.RecordBatch) error {
	n := int(rec.NumRows())
	if n == 0 {
		return nil
	}
	g.mu.Lock()
	done := g.unusable != ""
	g.mu.Unlock()
	if done {
		return nil
	}
	cols := func(idx []int) []arrow.Array {
		out := make([]arrow.Array, len(idx))
		for i, c := range idx {
			out[i] = rec.Column(c)
		}
		return out
	}
	qh, err := fingerprint.RowHashes(cols(g.queryCols), n)
	if err != nil {
		return err
	}
	ch, err := fingerprint.ExactRowHashes(cols(g.candCols), n)
	if err != nil {
		return err
	}
	p := g.part[u]
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.unusable != "" {
		return nil
	}
	for i := range qh {
		// Rows of a query usually come together: keep one of a run.
		if i > 0 && qh[i] == qh[i-1] && ch[i] == ch[i-1] {
			continue
		}
		g.pending = append(g.pending, prec{p, qrec{qh[i], ch[i]}})
	}
	if len(g.pending) >= pendingRecords {
		g.flush()
	}
	return nil
}

// flush sorts the pending records into their partitions' lists. Called
// with mu held.
func (g *digester) flush() {
	pend := g.pending
	g.pending = g.pending[:0]
	slices.SortFunc(pend, func(a, b prec) int {
		if a.p != b.p {
			return a.p - b.p
		}
		return byQuery(a, b)
	})
	for i := 0; i < len(pend); {
		j := i
		for j < len(pend) && pend[j].p == pend[i].p {
			j++
		}
		p := pend[i].p
		merged, ok := mergeDigests(g.parts[p], pend[i:j])
		if !ok {
			g.giveUp(fmt.Sprintf("a query's rows differ in a column the plan's probe did not see vary (partition %d)", p))
			return
		}
		g.held += len(merged) - len(g.parts[p])
		g.parts[p] = merged
		i = j
	}
	if g.held > g.limit {
		g.giveUp(fmt.Sprintf("more than %d queries, the digests' share of --memory-limit", g.limit))
	}
}

func (g *digester) giveUp(why string) {
	g.unusable = why
	g.parts, g.pending, g.held = nil, nil, 0
}

// mergeDigests merges sorted records add (one partition's, duplicates
// allowed) into the sorted, duplicate-free list have; false when a query
// has two candidate hashes.
func mergeDigests(have []qrec, add []prec) ([]qrec, bool) {
	out := make([]qrec, 0, len(have)+len(add))
	i := 0
	push := func(r qrec) bool {
		if k := len(out) - 1; k >= 0 && out[k].q == r.q {
			return out[k].c == r.c
		}
		out = append(out, r)
		return true
	}
	for _, a := range add {
		for i < len(have) && have[i].q <= a.q {
			if !push(have[i]) {
				return nil, false
			}
			i++
		}
		if !push(a.qrec) {
			return nil, false
		}
	}
	for ; i < len(have); i++ {
		if !push(have[i]) {
			return nil, false
		}
	}
	return out, true
}

// finish writes the digests under prefix (the map attempt's) and returns
// what the map task's manifest records of them.
func (g *digester) finish(ctx context.Context, work storage.Location, prefix string, task int) (*QueryDigest, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.unusable == "" && len(g.pending) > 0 {
		g.flush()
	}
	if g.unusable != "" {
		return &QueryDigest{Unusable: g.unusable}, nil
	}
	d := &QueryDigest{Path: prefix + digestFileName, Partitions: len(g.parts)}
	data := make([]byte, 0, g.held*digestRecord)
	var ranges []partition.Segment // a partition's records, as an index holds them
	for p, recs := range g.parts {
		start := len(data)
		for _, r := range recs {
			data = binary.LittleEndian.AppendUint64(data, r.q)
			data = binary.LittleEndian.AppendUint64(data, r.c)
		}
		if n := int64(len(data) - start); n > 0 { // a hash of 0 reads as none: 1 for it
			ranges = append(ranges, partition.Segment{Unit: p, Offset: int64(start), Length: n, Rows: int64(len(recs)), Bytes: n,
				XXHash64: workFileHash(max(xxhash.Sum64(data[start:]), 1))})
		}
	}
	idx, err := partition.EncodeIndex(ranges, len(g.parts), partition.IndexSeed(digestIndexKind, task))
	if err != nil {
		return nil, err
	}
	if err := putObject(ctx, work, d.Path, data); err != nil {
		return nil, err
	}
	return d, putObject(ctx, work, prefix+digestIndexName, idx)
}

// detectByDigests decides partition task's detection from the map tasks'
// digests. It returns ok false, and why, when they cannot decide; an error
// only for digests that cannot be read or are damaged.
func (lp *loadedPlan) detectByDigests(ctx context.Context, task int, maps []*TaskManifest, schema *arrow.Schema) (det dedupe.Detection, ok bool, why string, err error) {
	probe := lp.Packing.Probe
	if probe == nil {
		return det, false, "the plan has no probe (an earlier version's)", nil
	}
	if err := checkProbe(probe, schema); err != nil {
		return det, false, "", err
	}
	for m, d := range maps {
		switch {
		case d.Digest == nil:
			return det, false, fmt.Sprintf("map task %d wrote no query digests", m), nil
		case d.Digest.Unusable != "":
			return det, false, fmt.Sprintf("map task %d: %s", m, d.Digest.Unusable), nil
		case d.Digest.Partitions != len(lp.Partitions):
			return det, false, "", errs.BadInputf("%s: its query digests list %d partitions, the plan has %d", lp.work.URL(mapDoneName(m)), d.Digest.Partitions, len(lp.Partitions))
		}
	}
	var all []prec
	for m, d := range maps {
		again := "run map task " + fmt.Sprint(m) + " again"
		if !validAttempt(d.Attempt) {
			return det, false, "", errs.WithHint(errs.BadInputf("%s: attempt %q", lp.work.URL(mapDoneName(m)), d.Attempt), again)
		}
		e, data, err := lp.partitionDigests(ctx, m, d, task)
		if err != nil {
			return det, false, "", err
		}
		if e == nil {
			continue // no query of this map task's rows in the partition
		}
		path := mapAttemptPrefix(m, d.Attempt) + digestFileName
		if workFileHash(max(xxhash.Sum64(data), 1)) != e.XXHash64 {
			return det, false, "", errs.WithHint(errs.BadInputf("%s: the query digests of partition %d are damaged (xxhash64 differs from map task %d's record)", lp.work.URL(path), task, m), again)
		}
		for i := 0; i < len(data); i += digestRecord {
			all = append(all, prec{0, qrec{binary.LittleEndian.Uint64(data[i:]), binary.LittleEndian.Uint64(data[i+8:])}})
		}
	}
	slices.SortFunc(all, byQuery)
	if _, ok := mergeDigests(nil, all); !ok {
		return det, false, "a query's rows differ between map tasks in a column the plan's probe did not see vary", nil
	}
	return probeDetectionOf(probe), true, "", nil
}

// partitionDigests returns map task m's digest record of partition task
// (nil: none of its rows there) and the digests it covers: from the
// task's records read once (preloadDigests), or by two ranged reads. A
// count beyond the partition's rows is refused before the digests are
// read (a damaged index, not an allocation).
func (lp *loadedPlan) partitionDigests(ctx context.Context, m int, d *TaskManifest, task int) (*partition.Segment, []byte, error) {
	again := "run map task " + fmt.Sprint(m) + " again"
	index := mapAttemptPrefix(m, d.Attempt) + digestIndexName
	var ents []partition.Segment
	td := lp.taskDigests
	cached := td != nil && td.first <= task && task < td.end && m < len(td.ents) && td.data[m] != nil
	if cached {
		ents = unitRange(td.ents[m], task, task+1)
	} else {
		rec, err := storage.GetRange(ctx, lp.work, index, int64(task)*partition.IndexRecord, partition.IndexRecord)
		if err != nil {
			return nil, nil, err
		}
		if ents, err = partition.DecodeIndex(rec, task, partition.IndexSeed(digestIndexKind, m)); err != nil {
			return nil, nil, errs.WithHint(errs.BadInputf("%s: %v", lp.work.URL(index), err), again)
		}
	}
	if len(ents) == 0 {
		return nil, nil, nil
	}
	e := ents[0]
	if !lp.digestRecordFits(e) {
		return nil, nil, errs.WithHint(errs.BadInputf("%s: %d query digests in %d bytes for partition %d, which has %d rows", lp.work.URL(index), e.Rows, e.Length, task, lp.Partitions[task].Rows), again)
	}
	if cached {
		off := e.Offset - td.base[m]
		if off < 0 || off+e.Length > int64(len(td.data[m])) {
			return nil, nil, fmt.Errorf("internal: partition %d's digests [%d, +%d) outside the %d bytes read from %d", task, e.Offset, e.Length, len(td.data[m]), td.base[m])
		}
		return &e, td.data[m][off : off+e.Length], nil
	}
	// Named by the attempt, as the index is: not by a path the manifest
	// holds (an empty one read the work folder itself, retried until the
	// deadline: found by FuzzPackedDetect).
	data, err := storage.GetRange(ctx, lp.work, mapAttemptPrefix(m, d.Attempt)+digestFileName, e.Offset, e.Length)
	return &e, data, err
}

// digestRecordFits reports whether a partition's digest record holds at
// most a digest per row of the partition (the plan's rows), 16 bytes
// each: a count beyond is a damaged index, not an allocation.
func (lp *loadedPlan) digestRecordFits(e partition.Segment) bool {
	return e.Rows <= lp.Partitions[e.Unit].Rows && e.Length == e.Rows*digestRecord
}

// taskDigests is a detect task's digest records of partitions [first,
// end), each map task's in partition order, and the digests they cover:
// data[m] is digests.bin's bytes from base[m] (empty: the map task has no
// digests there; nil: read per partition).
type taskDigests struct {
	first, end int
	ents       [][]partition.Segment
	data       [][]byte
	base       []int64
}

// preloadDigests reads the digest records of a detect task's partitions
// [first, end) and the digests they cover once, two ranged reads per map
// task (a map task writes the partitions' digests one after another),
// not two per partition and map task. A map task whose digests cannot
// decide, or whose records fail a check, is left to partitionDigests,
// which reads and refuses them per partition as before.
func (lp *loadedPlan) preloadDigests(ctx context.Context, maps []*TaskManifest, first, end int) error {
	if end-first < 2 || lp.Packing == nil || lp.Packing.Probe == nil {
		return nil
	}
	td := &taskDigests{first: first, end: end, ents: make([][]partition.Segment, len(maps)), data: make([][]byte, len(maps)), base: make([]int64, len(maps))}
	err := par.ForEach(ctx, len(maps), min(len(maps), 16), func(m int) error {
		d := maps[m]
		if d.Digest == nil || d.Digest.Unusable != "" || d.Digest.Partitions != len(lp.Partitions) || !validAttempt(d.Attempt) {
			return nil
		}
		prefix := mapAttemptPrefix(m, d.Attempt)
		rec, err := storage.GetRange(ctx, lp.work, prefix+digestIndexName, int64(first)*partition.IndexRecord, int64(end-first)*partition.IndexRecord)
		if err != nil {
			if errs.Is(err, errs.BadInput) {
				return nil // missing or short: partitionDigests names it
			}
			return err
		}
		ents, err := partition.DecodeIndex(rec, first, partition.IndexSeed(digestIndexKind, m))
		if err != nil {
			return nil
		}
		if len(ents) == 0 { // none of its rows in these partitions
			td.data[m] = []byte{}
			return nil
		}
		lo, hi, sum := ents[0].Offset, ents[0].Offset, int64(0)
		for _, e := range ents {
			if !lp.digestRecordFits(e) {
				return nil
			}
			lo, hi, sum = min(lo, e.Offset), max(hi, e.Offset+e.Length), sum+e.Length
		}
		if hi-lo != sum { // not one after another: read per partition
			return nil
		}
		data, err := storage.GetRange(ctx, lp.work, prefix+digestFileName, lo, hi-lo)
		if err != nil {
			if errs.Is(err, errs.BadInput) {
				return nil
			}
			return err
		}
		td.ents[m], td.data[m], td.base[m] = ents, data, lo
		return nil
	})
	if err != nil {
		return err
	}
	lp.taskDigests = td
	return nil
}

// probeDetectionOf is the detection a probe decides when the digests show
// no query whose rows differ in a column it left in doubt: its own.
func probeDetectionOf(probe *plan.Probe) dedupe.Detection {
	det := dedupe.Detection{Varying: slices.Clone(probe.Varying), Conflicts: maps.Clone(probe.Conflicts)}
	if det.Conflicts == nil {
		det.Conflicts = map[string]string{}
	}
	return det
}

// withProbe names, for each column the probe saw vary, the probe's
// conflict, so that an error about one says the same whether the digests
// or the rows decided (and in run). The reading detection finds every
// column the probe does vary (see the top of this file).
func withProbe(det dedupe.Detection, probe *plan.Probe) dedupe.Detection {
	if probe == nil || len(probe.Varying) != len(det.Varying) {
		return det
	}
	if det.Conflicts == nil {
		det.Conflicts = map[string]string{}
	}
	for c, v := range probe.Varying {
		k := strconv.Itoa(c)
		if cf, ok := probe.Conflicts[k]; v && det.Varying[c] && ok {
			det.Conflicts[k] = cf
		}
	}
	return det
}
