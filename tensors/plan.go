package tensors

import (
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/relayout/relayout/manifests"
)

// Levels: what a tensor's first dimension counts.
const (
	LevelRow   = "row"
	LevelQuery = "query"
	LevelItem  = "item"
)

// Kinds of tensors.
const (
	KindData    = "data"
	KindValid   = "valid"
	KindOffsets = "offsets"
	KindValues  = "values"
)

// ItemOffsets is the CSR tensor of packed outputs: the items of query q are
// item rows ItemOffsets[q]:ItemOffsets[q+1] of the shard.
const ItemOffsets = "query.item_offsets"

// ConfigError is a tensor spec that cannot be applied to the table.
type ConfigError struct{ Msg string }

func (e *ConfigError) Error() string { return e.Msg }

func configErr(format string, a ...any) error { return &ConfigError{fmt.Sprintf(format, a...)} }

// source is one input column.
type source struct {
	name     string
	level    string
	col      int // top-level column
	child    int // struct field within the packed items, or -1
	typ      arrow.DataType
	nullable bool
}

type kind int

const (
	kScalar kind = iota // numeric or id per sample
	kFixed              // list of one length: [n, shape...]
	kRagged             // values + offsets
	kGroup              // scalars stacked: [n, F]
)

// entry is one tensor (with its companions) made from sources.
type entry struct {
	name  string
	level string
	kind  kind
	srcs  []source
	conv  conv
	shape []int // per-sample shape of data (fixed: list shape; group: [F])
	width int   // elements per sample (product of shape; 1 for scalars)
	valid bool
	out   []int // output tensors: data or values, [offsets], [valid]
}

// Plan maps a table's columns to tensors.
type Plan struct {
	packed   bool
	itemsCol int
	entries  []*entry
	tensors  []manifests.Tensor
	// itemOffsets is the output index of ItemOffsets (packed), else -1.
	itemOffsets int
	// Fixed bytes per sample and per item; ragged values add their elements.
	sampleBytes, itemBytes int64
	// Parallel converts entries on this many goroutines.
	Parallel int
}

// NewPlan maps schema's columns to tensors. In packed mode (schema is the
// packed schema) the last column is the items list of structs. prof gives
// list lengths (nil: every list column without a declared shape is ragged).
func NewPlan(schema *arrow.Schema, packed bool, spec *Spec, prof *Profile) (*Plan, error) {
	if spec == nil {
		spec = &Spec{}
	}
	p := &Plan{packed: packed, itemsCol: -1, itemOffsets: -1, Parallel: 1}
	var srcs []source
	for c, f := range schema.Fields() {
		if packed && c == schema.NumFields()-1 {
			p.itemsCol = c
			st := f.Type.(*arrow.ListType).Elem().(*arrow.StructType)
			for j, cf := range st.Fields() {
				srcs = append(srcs, source{name: cf.Name, level: LevelItem, col: c, child: j, typ: cf.Type, nullable: cf.Nullable})
			}
			continue
		}
		lvl := LevelRow
		if packed {
			lvl = LevelQuery
		}
		srcs = append(srcs, source{name: f.Name, level: lvl, col: c, child: -1, typ: f.Type, nullable: f.Nullable})
	}
	byName := map[string]int{}
	for i, s := range srcs {
		byName[s.name] = i
	}
	used := make([]bool, len(srcs))
	first := map[*entry]int{}
	for _, se := range spec.Entries {
		var idx []int
		if len(se.Columns) > 0 {
			for i, s := range srcs {
				if matchAny(se.Columns, s.name) {
					idx = append(idx, i)
				}
			}
			if len(idx) == 0 {
				return nil, configErr("tensor %q: no column matches %v", se.Name, se.Columns)
			}
		} else {
			col := se.Column
			if col == "" {
				col = se.Name
			}
			i, ok := byName[col]
			if !ok {
				return nil, configErr("tensor %q: the input has no column %q", se.Name, col)
			}
			idx = []int{i}
		}
		var ss []source
		for _, i := range idx {
			used[i] = true
			ss = append(ss, srcs[i])
		}
		e, err := p.newEntry(se, ss, len(se.Columns) > 0, prof)
		if err != nil {
			return nil, err
		}
		first[e] = idx[0]
		p.entries = append(p.entries, e)
	}
	for i, s := range srcs {
		if used[i] || matchAny(spec.Drop, s.name) {
			continue
		}
		e, err := p.newEntry(Entry{Name: s.name}, []source{s}, false, prof)
		if err != nil {
			return nil, err
		}
		first[e] = i
		p.entries = append(p.entries, e)
	}
	slices.SortStableFunc(p.entries, func(a, b *entry) int { return first[a] - first[b] })
	if err := p.layoutTensors(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Plan) newEntry(se Entry, ss []source, group bool, prof *Profile) (*entry, error) {
	e := &entry{name: se.Name, level: ss[0].level, width: 1}
	for _, s := range ss[1:] {
		if s.level != e.level {
			return nil, configErr("tensor %q: columns %q (%s level) and %q (%s level) cannot share a tensor", se.Name, ss[0].name, ss[0].level, s.name, s.level)
		}
	}
	if p.packed {
		e.name = e.level + "." + e.name
	}
	e.srcs = ss
	var dt DType
	if se.DType != "" {
		var err error
		if dt, err = ParseDType(se.DType); err != nil {
			return nil, configErr("tensor %q: %v", se.Name, err)
		}
	}
	e.valid = false
	for _, s := range ss {
		e.valid = e.valid || s.nullable
	}
	if se.Valid != nil {
		e.valid = *se.Valid
	}
	fill := 0.0
	if se.Fill != nil {
		fill = *se.Fill
	}
	e.conv.buckets = se.Buckets
	elemType := func(s source) (arrow.DataType, bool) { // a list's element type
		switch t := s.typ.(type) {
		case *arrow.ListType:
			return t.Elem(), true
		case *arrow.LargeListType:
			return t.Elem(), true
		case *arrow.FixedSizeListType:
			return t.Elem(), true
		}
		return nil, false
	}
	if group {
		e.kind = kGroup
		e.width = len(ss)
		e.shape = []int{len(ss)}
		if dt == "" {
			dt = F32
		}
		for _, s := range ss {
			if _, ok := numericDefault(s.typ); !ok {
				return nil, configErr("tensor %q: column %q is %s; only numeric and bool columns can be grouped", se.Name, s.name, s.typ)
			}
		}
	} else if et, isList := elemType(ss[0]); isList {
		s := ss[0]
		def, err := scalarDefault(se.Name, s.name, et, "list element")
		if err != nil {
			return nil, err
		}
		if dt == "" {
			dt = def
		}
		fixedLen := int64(-1)
		if ft, ok := s.typ.(*arrow.FixedSizeListType); ok {
			fixedLen = int64(ft.Len())
		}
		lo, hi, seen := prof.lengths(s.name)
		switch {
		case len(se.Shape) > 0:
			n := int64(1)
			for _, d := range se.Shape {
				if d <= 0 {
					return nil, configErr("tensor %q: shape %v must be positive", se.Name, se.Shape)
				}
				n *= int64(d)
			}
			if fixedLen >= 0 && fixedLen != n {
				return nil, configErr("tensor %q: shape %v holds %d elements but column %q has lists of %d", se.Name, se.Shape, n, s.name, fixedLen)
			}
			if seen && (lo != n || hi != n) {
				return nil, configErr("tensor %q: shape %v holds %d elements but column %q has lists of %d to %d elements; drop shape to write values and offsets", se.Name, se.Shape, n, s.name, lo, hi)
			}
			e.kind, e.shape, e.width = kFixed, se.Shape, int(n)
		case fixedLen >= 0:
			e.kind, e.shape, e.width = kFixed, []int{int(fixedLen)}, int(fixedLen)
		case seen && lo == hi:
			e.kind, e.shape, e.width = kFixed, []int{int(lo)}, int(lo)
		default:
			e.kind = kRagged
		}
	} else {
		if len(se.Shape) > 0 {
			return nil, configErr("tensor %q: shape is only for list columns; %q is %s", se.Name, s0(ss).name, s0(ss).typ)
		}
		def, err := scalarDefault(se.Name, ss[0].name, ss[0].typ, "column")
		if err != nil {
			return nil, err
		}
		if dt == "" {
			dt = def
		}
		e.kind = kScalar
	}
	// ids: hashed strings take integer dtypes wide enough for the buckets.
	for _, s := range ss {
		t := s.typ
		if et, ok := elemType(s); ok {
			t = et
		}
		if isBytes(t) {
			switch {
			case dt == I64 || dt == U64:
			case dt == I32 && se.Buckets > 0 && se.Buckets <= 1<<31:
			default:
				return nil, configErr("tensor %q: ids of %s column %q need dtype int64 or uint64 (int32 with buckets <= 2^31)", se.Name, t, s.name)
			}
		} else if se.Buckets > 0 {
			return nil, configErr("tensor %q: buckets apply to string and binary columns; %q is %s", se.Name, s.name, t)
		}
	}
	e.conv.dt = dt
	e.conv.fill = fillBytes(fill, dt)
	return e, nil
}

func s0(ss []source) source { return ss[0] }

func isBytes(t arrow.DataType) bool {
	switch t.ID() {
	case arrow.STRING, arrow.LARGE_STRING, arrow.BINARY, arrow.LARGE_BINARY, arrow.FIXED_SIZE_BINARY, arrow.STRING_VIEW, arrow.BINARY_VIEW:
		return true
	case arrow.DICTIONARY:
		return isBytes(t.(*arrow.DictionaryType).ValueType)
	}
	return false
}

// numericDefault is the dtype a numeric (or bool, or temporal) type keeps.
func numericDefault(t arrow.DataType) (DType, bool) {
	switch t.ID() {
	case arrow.INT8:
		return I8, true
	case arrow.INT16:
		return I16, true
	case arrow.INT32, arrow.DATE32, arrow.TIME32:
		return I32, true
	case arrow.INT64, arrow.DATE64, arrow.TIME64, arrow.TIMESTAMP, arrow.DURATION:
		return I64, true
	case arrow.UINT8, arrow.BOOL:
		return U8, true
	case arrow.UINT16:
		return U16, true
	case arrow.UINT32:
		return U32, true
	case arrow.UINT64:
		return U64, true
	case arrow.FLOAT16:
		return F16, true
	case arrow.FLOAT32:
		return F32, true
	case arrow.FLOAT64, arrow.DECIMAL128, arrow.DECIMAL256:
		return F64, true
	case arrow.DICTIONARY:
		return numericDefault(t.(*arrow.DictionaryType).ValueType)
	}
	return "", false
}

func scalarDefault(tensor, col string, t arrow.DataType, what string) (DType, error) {
	if dt, ok := numericDefault(t); ok {
		return dt, nil
	}
	if isBytes(t) {
		return I64, nil
	}
	return "", configErr("tensor %q: %s %q is %s, which cannot become a tensor; drop it (drop: [%q]) or select other columns", tensor, what, col, t, col)
}

// transform describes how an entry's values are made.
func (e *entry) transform() string {
	var parts []string
	src := e.srcs[0].typ
	switch t := src.(type) {
	case *arrow.ListType:
		src = t.Elem()
	case *arrow.LargeListType:
		src = t.Elem()
	case *arrow.FixedSizeListType:
		src = t.Elem()
	}
	switch {
	case e.kind == kGroup:
		parts = append(parts, fmt.Sprintf("%d columns stacked along axis 1, each cast to %s", len(e.srcs), e.conv.dt))
	case isBytes(src):
		s := "xxhash64 of the bytes"
		if e.conv.buckets > 0 {
			s += fmt.Sprintf(" modulo %d", e.conv.buckets)
		}
		parts = append(parts, s+" as "+string(e.conv.dt))
	default:
		parts = append(parts, fmt.Sprintf("%s as %s%s", src, e.conv.dt, unitNote(src)))
	}
	switch e.kind {
	case kFixed:
		parts = append(parts, fmt.Sprintf("lists of %d elements as shape %v", e.width, e.shape))
	case kRagged:
		parts = append(parts, "lists as values and offsets")
	}
	fillDesc := fmt.Sprint(fillValue(e.conv.fill, e.conv.dt))
	if e.kind == kFixed || e.kind == kRagged {
		parts = append(parts, "null elements filled with "+fillDesc)
	}
	if e.valid {
		parts = append(parts, "nulls filled with "+fillDesc+" and marked in "+e.name+".valid")
	} else if e.srcs[0].nullable {
		parts = append(parts, "nulls filled with "+fillDesc)
	}
	return strings.Join(parts, "; ")
}

// unitNote says what the numbers of a temporal or bool source mean.
func unitNote(t arrow.DataType) string {
	switch t := t.(type) {
	case *arrow.BooleanType:
		return " (1 true, 0 false)"
	case *arrow.Date32Type:
		return " (days since 1970-01-01)"
	case *arrow.Date64Type:
		return " (milliseconds since 1970-01-01)"
	case *arrow.TimestampType:
		return fmt.Sprintf(" (%s since 1970-01-01 UTC)", t.Unit)
	case *arrow.Time32Type:
		return fmt.Sprintf(" (%s since midnight)", t.Unit)
	case *arrow.Time64Type:
		return fmt.Sprintf(" (%s since midnight)", t.Unit)
	case *arrow.DurationType:
		return fmt.Sprintf(" (%s)", t.Unit)
	case *arrow.Decimal128Type, *arrow.Decimal256Type:
		return " (nearest float64)"
	}
	return ""
}

func fillValue(b []byte, dt DType) any {
	switch dt {
	case F32:
		return view[float32](b, 1)[0]
	case F64:
		return view[float64](b, 1)[0]
	case I64:
		return view[int64](b, 1)[0]
	case U64:
		return view[uint64](b, 1)[0]
	case I32:
		return view[int32](b, 1)[0]
	}
	if dt.isFloat() {
		return "0x" + fmt.Sprintf("%x", b)
	}
	var v int64
	for i := len(b) - 1; i >= 0; i-- {
		v = v<<8 | int64(b[i])
	}
	return v
}

// layoutTensors lists the output tensors and sizes.
func (p *Plan) layoutTensors() error {
	add := func(t manifests.Tensor) int {
		if t.Shape == nil {
			t.Shape = []int{}
		}
		p.tensors = append(p.tensors, t)
		return len(p.tensors) - 1
	}
	if p.packed {
		p.itemOffsets = add(manifests.Tensor{Name: ItemOffsets, DType: string(I64), Level: LevelQuery, Kind: KindOffsets,
			Columns: []string{"items"}, Transform: "the items of query q are item rows offsets[q]:offsets[q+1] of the shard"})
		p.sampleBytes += 8
	}
	for _, e := range p.entries {
		var cols []string
		for _, s := range e.srcs {
			cols = append(cols, s.name)
		}
		tr := e.transform()
		per := &p.sampleBytes
		if e.level == LevelItem {
			per = &p.itemBytes
		}
		switch e.kind {
		case kRagged:
			e.out = append(e.out, add(manifests.Tensor{Name: e.name + ".values", DType: string(e.conv.dt), Level: e.level, Kind: KindValues, Offsets: e.name + ".offsets", Columns: cols, Transform: tr}))
			e.out = append(e.out, add(manifests.Tensor{Name: e.name + ".offsets", DType: string(I64), Level: e.level, Kind: KindOffsets, Columns: cols, Transform: "the list of sample r is values[offsets[r]:offsets[r+1]]"}))
			*per += 8
		default:
			e.out = append(e.out, add(manifests.Tensor{Name: e.name, DType: string(e.conv.dt), Shape: e.shape, Level: e.level, Kind: KindData, Columns: cols, Transform: tr}))
			*per += int64(e.width * e.conv.dt.Size())
		}
		if e.valid {
			// A group marks each of its columns; a list column marks the
			// list (one byte per sample, whatever its length).
			shape := e.shape
			if e.kind == kRagged || e.kind == kFixed {
				shape = nil
			}
			e.out = append(e.out, add(manifests.Tensor{Name: e.name + ".valid", DType: string(U8), Shape: shape, Level: e.level, Kind: KindValid, Columns: cols, Transform: "1 where the source value is not null"}))
			if e.kind == kRagged || e.kind == kFixed {
				*per++
			} else {
				*per += int64(e.width)
			}
		}
	}
	seen := map[string]bool{}
	for _, t := range p.tensors {
		if seen[t.Name] {
			return configErr("two tensors are named %q; rename one in --tensor-spec", t.Name)
		}
		seen[t.Name] = true
	}
	if len(p.entries) == 0 {
		return configErr("no column is left to become a tensor; check drop: in --tensor-spec")
	}
	return nil
}

// Tensors returns the output tensors in shard order.
func (p *Plan) Tensors() []manifests.Tensor { return p.tensors }

// Hash identifies the tensor schema (16 hex digits).
func (p *Plan) Hash() string { return manifests.SpecHash(p.tensors) }

// Sample is "row", or "query" when packed.
func (p *Plan) Sample() string {
	if p.packed {
		return LevelQuery
	}
	return LevelRow
}
