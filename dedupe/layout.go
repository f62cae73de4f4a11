package dedupe

import (
	"fmt"
	"path"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
)

// ItemsColumn is the name of the packed list column.
const ItemsColumn = "items"

// Layout describes how a flat table is packed.
type Layout struct {
	Flat   *arrow.Schema
	Packed *arrow.Schema
	// QueryKey, QueryColumns and ItemColumns are flat field indices in
	// flat-schema order; QueryKey columns are query columns too.
	QueryKey     []int
	QueryColumns []int
	ItemColumns  []int
}

// NewLayout builds the packed schema: the query columns in flat order, then
// items: list<struct<item columns in flat order>>. isQuery[i] says whether
// flat column i is query-level.
func NewLayout(flat *arrow.Schema, queryKey []int, isQuery []bool) (*Layout, error) {
	l := &Layout{Flat: flat, QueryKey: queryKey}
	var qf, itf []arrow.Field
	for i, f := range flat.Fields() {
		if isQuery[i] {
			l.QueryColumns = append(l.QueryColumns, i)
			qf = append(qf, f)
		} else {
			l.ItemColumns = append(l.ItemColumns, i)
			itf = append(itf, f)
		}
		if f.Name == ItemsColumn {
			return nil, fmt.Errorf("column %q would collide with the packed list column; rename it", ItemsColumn)
		}
	}
	for _, k := range queryKey {
		if !isQuery[k] {
			return nil, fmt.Errorf("query key %q varies within a query", flat.Field(k).Name)
		}
	}
	if len(itf) == 0 {
		return nil, fmt.Errorf("every column is query-level: nothing to pack into %q", ItemsColumn)
	}
	items := arrow.Field{Name: ItemsColumn, Type: arrow.ListOfField(arrow.Field{Name: "element", Type: arrow.StructOf(itf...), Nullable: false}), Nullable: false}
	md := flat.Metadata()
	l.Packed = arrow.NewSchema(append(qf, items), &md)
	return l, nil
}

// Names returns the names of flat columns.
func (l *Layout) Names(cols []int) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = l.Flat.Field(c).Name
	}
	return out
}

// MatchColumns resolves names or globs (path.Match syntax) to flat column
// indices; a pattern that matches nothing is an error.
func MatchColumns(flat *arrow.Schema, patterns []string) ([]bool, error) {
	out := make([]bool, flat.NumFields())
	for _, p := range patterns {
		n := 0
		for i, f := range flat.Fields() {
			ok, err := path.Match(p, f.Name)
			if err != nil {
				return nil, fmt.Errorf("bad pattern %q: %v", p, err)
			}
			if ok {
				out[i] = true
				n++
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("%q matches no column", p)
		}
	}
	return out, nil
}

// ItemStruct is the struct of a packed schema's last column, ItemsColumn,
// a list of the item-level columns.
func ItemStruct(packed *arrow.Schema) (*arrow.StructType, error) {
	n := packed.NumFields()
	if n == 0 || packed.Field(n-1).Name != ItemsColumn {
		return nil, fmt.Errorf("not a packed schema: the last column is not %q", ItemsColumn)
	}
	lt, ok := packed.Field(n - 1).Type.(*arrow.ListType)
	if !ok {
		return nil, fmt.Errorf("packed column %q is not a list", ItemsColumn)
	}
	st, ok := lt.Elem().(*arrow.StructType)
	if !ok {
		return nil, fmt.Errorf("packed column %q is not a list of structs", ItemsColumn)
	}
	return st, nil
}

// LayoutFromPacked rebuilds the layout of a packed schema: query columns,
// then items: list<struct<item columns>>; flatOrder names the flat columns
// in their original order.
func LayoutFromPacked(packed *arrow.Schema, flatOrder, queryKey []string) (*Layout, error) {
	n := packed.NumFields()
	st, err := ItemStruct(packed)
	if err != nil {
		return nil, err
	}
	byName := map[string]arrow.Field{}
	isQuery := map[string]bool{}
	for _, f := range packed.Fields()[:n-1] {
		byName[f.Name], isQuery[f.Name] = f, true
	}
	for _, f := range st.Fields() {
		byName[f.Name] = f
	}
	if len(byName) != len(flatOrder) {
		return nil, fmt.Errorf("packed schema has %d columns, the flat order names %d", len(byName), len(flatOrder))
	}
	fields := make([]arrow.Field, len(flatOrder))
	q := make([]bool, len(flatOrder))
	pos := map[string]int{}
	for i, name := range flatOrder {
		f, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("flat column %q is not in the packed schema", name)
		}
		if _, twice := pos[name]; twice {
			return nil, fmt.Errorf("the flat order names %q twice", name)
		}
		fields[i], q[i], pos[name] = f, isQuery[name], i
	}
	var key []int
	for _, k := range queryKey {
		if !isQuery[k] || slices.Contains(key, pos[k]) {
			return nil, fmt.Errorf("query key %q is not a query-level column of the packed schema, or is named twice", k)
		}
		key = append(key, pos[k])
	}
	md := packed.Metadata()
	return NewLayout(arrow.NewSchema(fields, &md), key, q)
}
