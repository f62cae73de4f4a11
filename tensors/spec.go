package tensors

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"slices"

	"gopkg.in/yaml.v3"
)

// Spec is a tensor spec (--tensor-spec): named tensors in order, and columns
// to drop. Columns that no entry names and that are not dropped get the
// default conversion.
//
//	tensors:
//	  dense:                       # one [N, F] float32 tensor
//	    columns: ["user_f*", "item_f*"]
//	    dtype: float32
//	  country: {buckets: 1000}     # hashed ids modulo 1000
//	  price: {column: item_price, dtype: float16, fill: -1}
//	  query_embedding: {shape: [8]}
//	drop: ["session_id", "debug_*"]
type Spec struct {
	Entries []Entry  `json:"tensors"`
	Drop    []string `json:"drop"`
}

// Entry is one named tensor of a Spec.
type Entry struct {
	// Name is the tensor's name (before any query./item. prefix).
	Name string `yaml:"-" json:"name"`
	// Column is the source column (default: Name); Columns instead lists
	// column names or globs grouped into one [N, F] tensor, in table order.
	Column  string   `yaml:"column" json:"column,omitempty"`
	Columns []string `yaml:"columns" json:"columns,omitempty"`
	// DType casts the values (default: the column's own width; float32 for
	// groups).
	DType string `yaml:"dtype" json:"dtype,omitempty"`
	// Buckets, for string and binary columns, takes the id modulo Buckets.
	Buckets uint64 `yaml:"buckets" json:"buckets,omitempty"`
	// Fill replaces nulls (default 0).
	Fill *float64 `yaml:"fill" json:"fill,omitempty"`
	// Shape declares the per-row shape of a list column ([D]); every list
	// must then have D elements.
	Shape []int `yaml:"shape" json:"shape,omitempty"`
	// Valid adds (true) or omits (false) the <name>.valid tensor (default:
	// when a source column is nullable).
	Valid *bool `yaml:"valid" json:"valid,omitempty"`
}

var entryKeys = []string{"column", "columns", "dtype", "buckets", "fill", "shape", "valid"}

// ReadSpec reads a spec file.
func ReadSpec(file string) (*Spec, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--tensor-spec: %w", err)
	}
	s, err := ParseSpec(data)
	if err != nil {
		return nil, fmt.Errorf("--tensor-spec %s: %w", file, err)
	}
	return s, nil
}

// ParseSpec parses a spec from YAML.
func ParseSpec(data []byte) (*Spec, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if err.Error() == "EOF" {
			return &Spec{}, nil
		}
		return nil, err
	}
	s := &Spec{}
	if len(doc.Content) == 0 {
		return s, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: want a mapping with tensors: and drop:", root.Line)
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case "tensors":
			if v.Kind != yaml.MappingNode {
				return nil, fmt.Errorf("line %d: tensors: want a mapping from tensor name to its settings", v.Line)
			}
			for j := 0; j+1 < len(v.Content); j += 2 {
				name, body := v.Content[j].Value, v.Content[j+1]
				e := Entry{Name: name}
				if body.Kind == yaml.MappingNode {
					for m := 0; m+1 < len(body.Content); m += 2 {
						if key := body.Content[m].Value; !slices.Contains(entryKeys, key) {
							return nil, fmt.Errorf("line %d: tensor %q: unknown setting %q (known: %v)", body.Content[m].Line, name, key, entryKeys)
						}
					}
					if err := body.Decode(&e); err != nil {
						return nil, fmt.Errorf("tensor %q: %w", name, err)
					}
					e.Name = name
				} else if !(body.Kind == yaml.ScalarNode && (body.Tag == "!!null" || body.Value == "")) {
					return nil, fmt.Errorf("line %d: tensor %q: want a mapping of settings", body.Line, name)
				}
				if slices.ContainsFunc(s.Entries, func(o Entry) bool { return o.Name == name }) {
					return nil, fmt.Errorf("line %d: tensor %q is defined twice", v.Content[j].Line, name)
				}
				if e.Column != "" && len(e.Columns) > 0 {
					return nil, fmt.Errorf("tensor %q: set column or columns, not both", name)
				}
				for _, g := range e.Columns {
					if _, err := path.Match(g, ""); err != nil {
						return nil, fmt.Errorf("tensor %q: bad glob %q", name, g)
					}
				}
				s.Entries = append(s.Entries, e)
			}
		case "drop":
			if err := v.Decode(&s.Drop); err != nil {
				return nil, fmt.Errorf("drop: want a list of column names or globs: %w", err)
			}
			for _, g := range s.Drop {
				if _, err := path.Match(g, ""); err != nil {
					return nil, fmt.Errorf("drop: bad glob %q", g)
				}
			}
		default:
			return nil, fmt.Errorf("line %d: unknown section %q (known: tensors, drop)", k.Line, k.Value)
		}
	}
	return s, nil
}

func matchAny(globs []string, name string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}
