// Package hive reads and writes Hive-style partition paths
// (`date=2026-11-30/country=US/part-0.parquet`): the partition columns a
// table keeps only in its folder names, as Spark, Hive, Flink, DuckDB and
// Polars write them.
//
// Input: Discover finds the `key=value` folder segments of each input
// object's path under its input root, decodes them (URL escapes;
// __HIVE_DEFAULT_PARTITION__ and NULL are null) and types them as DuckDB's
// hive_types_autocast does: a key whose every value is a canonical integer
// is BIGINT (int64), else one whose every value is a canonical date is DATE,
// else VARCHAR; declared types (--hive-types) override. The source package
// turns the result into ordinary columns, appended after the files' own
// columns in folder order.
//
// Output: Path names the folder of a partition (Escape escapes each value
// as Hive and DuckDB do), and can never name a path outside the output.
//
// It is a package of its own because both ends of the data path use it
// (source reads partition values, writer names partition folders) and
// neither may import the other.
package hive

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/relayout/relayout/internal/errs"
)

// Mode says whether input paths are read for partitions.
type Mode string

// The modes of --hive-partitioning.
const (
	// Auto reads partitions when every input path has key=value folders,
	// and none when no path has any.
	Auto Mode = "auto"
	// On requires key=value folders on every input path.
	On Mode = "on"
	// Off reads paths as plain names.
	Off Mode = "off"
)

// ParseMode parses --hive-partitioning ("" is Auto).
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToLower(strings.TrimSpace(s))); m {
	case "":
		return Auto, nil
	case Auto, On, Off:
		return m, nil
	case "true":
		return On, nil
	case "false":
		return Off, nil
	}
	return "", errs.Usagef("--hive-partitioning %q: want auto, on or off", s)
}

// DefaultPartition is the folder value Hive writes for a null (and that
// readers read as null).
const DefaultPartition = "__HIVE_DEFAULT_PARTITION__"

// Null reports whether a folder value as written (before its escapes are
// decoded) stands for null, as DuckDB reads it: Hive's null, or "NULL" in
// any case. A value escaped to spell one of these (Path writes "%4EULL"
// for the string "NULL") is the string, to DuckDB and Spark alike.
func Null(raw string) bool { return raw == DefaultPartition || strings.EqualFold(raw, "NULL") }

// readsAsNull reports whether some reader would take a folder value as
// written for null (Null, or Hive's null in another case): Path escapes
// such a string.
func readsAsNull(raw string) bool { return Null(raw) || strings.EqualFold(raw, DefaultPartition) }

// typeNames are the types --hive-types accepts, with DuckDB's names as
// aliases.
var typeNames = map[string]arrow.DataType{
	"string": arrow.BinaryTypes.String, "varchar": arrow.BinaryTypes.String, "utf8": arrow.BinaryTypes.String,
	"int8": arrow.PrimitiveTypes.Int8, "tinyint": arrow.PrimitiveTypes.Int8,
	"int16": arrow.PrimitiveTypes.Int16, "smallint": arrow.PrimitiveTypes.Int16,
	"int32": arrow.PrimitiveTypes.Int32, "integer": arrow.PrimitiveTypes.Int32, "int": arrow.PrimitiveTypes.Int32,
	"int64": arrow.PrimitiveTypes.Int64, "bigint": arrow.PrimitiveTypes.Int64,
	"uint8": arrow.PrimitiveTypes.Uint8, "uint16": arrow.PrimitiveTypes.Uint16,
	"uint32": arrow.PrimitiveTypes.Uint32, "uint64": arrow.PrimitiveTypes.Uint64,
	"float32": arrow.PrimitiveTypes.Float32, "float": arrow.PrimitiveTypes.Float32,
	"float64": arrow.PrimitiveTypes.Float64, "double": arrow.PrimitiveTypes.Float64,
	"bool": arrow.FixedWidthTypes.Boolean, "boolean": arrow.FixedWidthTypes.Boolean,
	"date":      arrow.FixedWidthTypes.Date32,
	"timestamp": &arrow.TimestampType{Unit: arrow.Microsecond},
}

// TypeName is the --hive-types name of a type TypeOf accepts.
func TypeName(t arrow.DataType) string {
	switch t.ID() {
	case arrow.STRING:
		return "string"
	case arrow.DATE32:
		return "date"
	case arrow.TIMESTAMP:
		return "timestamp"
	case arrow.BOOL:
		return "bool"
	}
	return t.Name()
}

// TypeOf returns the Arrow type a --hive-types name stands for.
func TypeOf(name string) (arrow.DataType, bool) {
	t, ok := typeNames[strings.ToLower(strings.TrimSpace(name))]
	return t, ok
}

// ParseTypes parses --hive-types ("date=date,hour=int32").
func ParseTypes(spec string) (map[string]arrow.DataType, error) {
	out := map[string]arrow.DataType{}
	for _, part := range strings.Split(spec, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			k, v, ok = strings.Cut(part, ":")
		}
		k = strings.TrimSpace(k)
		t, known := TypeOf(v)
		if !ok || k == "" || !known {
			return nil, errs.Usagef("--hive-types %q: want key=type pairs, e.g. date=date,hour=int32 (types: string, int8..int64, uint8..uint64, float32, float64, bool, date, timestamp)", part)
		}
		out[k] = t
	}
	return out, nil
}

// KV is one partition folder: its key and decoded value, and whether the
// value stands for null (Null, judged before decoding).
type KV struct {
	Key, Value string
	Null       bool
}

// Segments returns the key=value folders of a slash-separated path
// (its last element, the file name, is not a folder), decoded. Folders
// without "=" are not partitions and are passed over.
func Segments(rel string) []KV {
	parts := strings.Split(rel, "/")
	var out []KV
	for _, p := range parts[:len(parts)-1] {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			continue
		}
		out = append(out, KV{Key: unescape(k), Value: unescape(v), Null: Null(v)})
	}
	return out
}

func unescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	if u, err := url.PathUnescape(s); err == nil {
		return u
	}
	return s // a stray "%" is taken as written, as DuckDB does
}

// Partitioning is the partition columns of a set of inputs.
type Partitioning struct {
	// Keys are the partition columns in folder order; Types their types.
	Keys  []string
	Types []arrow.DataType
	// Values holds, per input, each key's decoded folder value (Nulls says
	// which are null).
	Values [][]string
	Nulls  [][]bool
}

// Spec is the resolved partitioning as --hive-types writes it, in folder
// order ("part=string,date=date"); "" when there is none. The plan records
// it, so that map and reduce tasks read the inputs as the plan did.
func (p *Partitioning) Spec() string {
	if p == nil || len(p.Keys) == 0 {
		return ""
	}
	parts := make([]string, len(p.Keys))
	for i, k := range p.Keys {
		parts[i] = k + "=" + TypeName(p.Types[i])
	}
	return strings.Join(parts, ",")
}

// Discover reads the partitions of the inputs from their paths (rels[i]
// is input i's path under its input root; urls[i] names it in errors).
// With Auto it returns nil when no path has key=value folders; a path
// whose keys differ from the first one's is an error in Auto and On. Each
// key's type is declared[key] if given, else inferred from all its values.
// The result's columns are ordered as the folders are.
func Discover(rels, urls []string, mode Mode, declared map[string]arrow.DataType) (*Partitioning, error) {
	if mode == Off || len(rels) == 0 {
		return nil, nil
	}
	segs := make([][]KV, len(rels))
	found := false
	for i, r := range rels {
		segs[i] = Segments(r)
		found = found || len(segs[i]) > 0
	}
	if !found {
		if mode == On {
			return nil, errs.WithHint(errs.BadInputf("input %s: --hive-partitioning on, but its path has no key=value folders", urls[0]), "use --hive-partitioning auto or off for a table that is not partitioned")
		}
		return nil, nil
	}
	p := &Partitioning{}
	for _, kv := range segs[0] {
		if slices.Contains(p.Keys, kv.Key) {
			return nil, errs.BadInputf("input %s: partition key %q appears twice in its path", urls[0], kv.Key)
		}
		p.Keys = append(p.Keys, kv.Key)
	}
	hint := "lay every input out with the same key=value folders, or pass --hive-partitioning off to read the paths as plain names"
	for i, s := range segs {
		keys := make([]string, len(s))
		for j, kv := range s {
			keys[j] = kv.Key
		}
		if !slices.Equal(keys, p.Keys) {
			return nil, errs.WithHint(errs.BadInputf("input %s: partition folders %s differ from %s's %s",
				urls[i], keyList(keys), urls[0], keyList(p.Keys)), hint)
		}
		vals, nulls := make([]string, len(s)), make([]bool, len(s))
		for j, kv := range s {
			vals[j], nulls[j] = kv.Value, kv.Null
		}
		p.Values = append(p.Values, vals)
		p.Nulls = append(p.Nulls, nulls)
	}
	for k, key := range p.Keys {
		t, ok := declared[key]
		if !ok {
			t = p.infer(k)
		}
		for i := range p.Values {
			if p.Nulls[i][k] {
				continue
			}
			if _, err := Parse(t, p.Values[i][k]); err != nil {
				return nil, errs.WithHint(errs.BadInputf("input %s: partition %s=%q is not a %s: %v", urls[i], key, p.Values[i][k], TypeName(t), err),
					"fix the folder name or declare another type with --hive-types")
			}
		}
		p.Types = append(p.Types, t)
	}
	for key := range declared {
		if !slices.Contains(p.Keys, key) {
			return nil, errs.Usagef("--hive-types names %q, which is not a partition folder of the input (partition keys: %s)", key, strings.Join(p.Keys, ", "))
		}
	}
	return p, nil
}

func keyList(keys []string) string {
	if len(keys) == 0 {
		return "(none)"
	}
	return strings.Join(keys, "/")
}

// infer types key k as DuckDB does: integers, then dates, then strings;
// a value must read back as written ("01" stays a string).
func (p *Partitioning) infer(k int) arrow.DataType {
	isInt, isDate, seen := true, true, false
	for i := range p.Values {
		if p.Nulls[i][k] {
			continue
		}
		v := p.Values[i][k]
		seen = true
		if n, err := strconv.ParseInt(v, 10, 64); err != nil || strconv.FormatInt(n, 10) != v {
			isInt = false
		}
		if d, err := time.Parse("2006-01-02", v); err != nil || d.Format("2006-01-02") != v {
			isDate = false
		}
	}
	switch {
	case !seen:
		return arrow.BinaryTypes.String
	case isInt:
		return arrow.PrimitiveTypes.Int64
	case isDate:
		return arrow.FixedWidthTypes.Date32
	}
	return arrow.BinaryTypes.String
}

// Parse reads a folder value as type t: a one-value array, or an error.
func Parse(t arrow.DataType, v string) (arrow.Array, error) {
	b := array.NewBuilder(memory.DefaultAllocator, t)
	defer b.Release()
	if t.ID() == arrow.STRING {
		b.(*array.StringBuilder).Append(v)
	} else if err := b.AppendValueFromString(v); err != nil {
		return nil, err
	}
	return b.NewArray(), nil
}

// Constant returns an array of n copies of the value (nil: null) of type t.
func Constant(mem memory.Allocator, t arrow.DataType, value *string, n int) (arrow.Array, error) {
	if value == nil {
		return array.MakeArrayOfNull(mem, t, n), nil
	}
	one, err := Parse(t, *value)
	if err != nil {
		return nil, err
	}
	defer one.Release()
	if n == 1 {
		one.Retain()
		return one, nil
	}
	b := array.NewBuilder(mem, t)
	defer b.Release()
	b.Reserve(n)
	if s, ok := one.(*array.String); ok {
		sb := b.(*array.StringBuilder)
		sb.ReserveData(n * len(s.Value(0)))
		for i := 0; i < n; i++ {
			sb.Append(s.Value(0))
		}
		return b.NewArray(), nil
	}
	if fw, ok := t.(arrow.FixedWidthDataType); ok && fw.BitWidth()%8 == 0 && t.ID() != arrow.BOOL {
		w := fw.BitWidth() / 8
		src := one.Data().Buffers()[1].Bytes()[one.Data().Offset()*w:][:w]
		buf := memory.NewResizableBuffer(mem)
		buf.Resize(n * w)
		dst := buf.Bytes()
		copy(dst, src)
		for filled := w; filled < len(dst); filled *= 2 {
			copy(dst[filled:], dst[:filled])
		}
		data := array.NewData(t, n, []*memory.Buffer{nil, buf}, nil, 0, 0)
		buf.Release()
		defer data.Release()
		return array.MakeFromData(data), nil
	}
	for i := 0; i < n; i++ {
		if err := b.AppendValueFromString(one.ValueStr(0)); err != nil {
			return nil, err
		}
	}
	return b.NewArray(), nil
}

// Escape escapes a partition key or value for a folder name as Hive and
// DuckDB do: control characters, space and "#%'*/:=?\{}[]^ become %XX
// (upper-case hex); other bytes, UTF-8 included, are kept. A final "." after
// another "." becomes %2E too, so that no folder name ends in ".." (object
// store clients rewrite "../" in keys).
func Escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == 0x7f || strings.IndexByte(" \"#%'*/:=?\\{}[]^", c) >= 0 ||
			(c == '.' && i == len(s)-1 && i > 0 && s[i-1] == '.') {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// MaxSegment is the longest folder name Path writes: most file systems
// allow 255 bytes per name.
const MaxSegment = 255

// Path returns the folder of one partition: "k1=v1/k2=v2" with keys and
// values escaped; a null value (values[i] == nil) is DefaultPartition, and a
// string a reader would take for null ("NULL" in any case, Hive's null)
// has its first byte escaped, so DuckDB and Spark read the string. Every
// segment starts with its escaped key and "=" and holds no "/", so no
// value can name a folder outside the output. A segment longer than
// MaxSegment is an error.
func Path(keys []string, values []*string) (string, error) {
	segs := make([]string, len(keys))
	for i, k := range keys {
		v := DefaultPartition
		if values[i] != nil {
			v = Escape(*values[i])
			if readsAsNull(v) { // the string "NULL", "null" or Hive's null: its first byte escaped
				v = fmt.Sprintf("%%%02X", v[0]) + v[1:]
			}
		}
		segs[i] = Escape(k) + "=" + v
		if len(segs[i]) > MaxSegment {
			return "", errs.WithHint(errs.BadInputf("partition folder %.60s… is %d bytes, more than the %d a file system allows", segs[i], len(segs[i]), MaxSegment),
				"partition by a shorter column (--hive-keys) or write flat output")
		}
	}
	return strings.Join(segs, "/"), nil
}
