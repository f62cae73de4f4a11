package manifests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// Format and FormatVersion identify the manifest format.
const (
	Format        = "relayout-manifest"
	FormatVersion = 1
	// FileName is the manifest's name in the output root.
	FileName = "manifest.json"
)

// Manifest is the content of manifest.json.
type Manifest struct {
	Format          string          `json:"format"`
	FormatVersion   int             `json:"format_version"`
	RelayoutVersion string          `json:"relayout_version"`
	Config          json.RawMessage `json:"config"`
	ConfigHash      string          `json:"config_hash"`
	Schema          []Column        `json:"schema"`
	SliceKeys       []string        `json:"slice_keys"`
	SortKeys        []string        `json:"sort_keys"`
	Inputs          []Input         `json:"inputs"`
	Files           []File          `json:"files"`
	Slices          []Slice         `json:"slices"`
	Totals          Totals          `json:"totals"`
	Fingerprint     Fingerprint     `json:"fingerprint"`
	// Packing is set for packed outputs.
	Packing *Packing `json:"packing,omitempty"`
	// Partitioning is set when the data files lie in Hive partition
	// folders (--output-partitioning hive).
	Partitioning *Partitioning `json:"partitioning,omitempty"`
	// Tensors is set when tensor shards were written.
	Tensors *Tensors `json:"tensors,omitempty"`
}

// Column is a top-level column of the table.
type Column struct {
	Name     string `json:"name"`
	Type     string `json:"type"` // Arrow type, e.g. "int64", "list<item: float, nullable>"
	Nullable bool   `json:"nullable"`
}

// Input is one input object as it was when read.
type Input struct {
	Path  string `json:"path"`
	Bytes int64  `json:"bytes"`
	ETag  string `json:"etag,omitempty"`
	MTime string `json:"mtime,omitempty"`
	Rows  int64  `json:"rows"`
}

// File is one output data file.
type File struct {
	Path      string     `json:"path"` // relative to the output root
	Bytes     int64      `json:"bytes"`
	Rows      int64      `json:"rows"`
	FirstRow  int64      `json:"first_row"` // global index of its first row
	XXHash64  string     `json:"xxhash64"`  // 16 hex digits
	RowGroups []RowGroup `json:"row_groups"`
}

// RowGroup is one row group of a file.
type RowGroup struct {
	Rows     int64 `json:"rows"`
	FirstRow int64 `json:"first_row"` // within the file
	Offset   int64 `json:"offset"`    // byte offset of its first column chunk
	Length   int64 `json:"length"`    // bytes up to the end of its last column chunk
}

// Slice is one distinct slice-key tuple: its values and where its rows are.
type Slice struct {
	Key  KeyValues `json:"key"`
	Rows int64     `json:"rows"`
	// Items is the slice's flat rows when the output is packed.
	Items    int64     `json:"items,omitempty"`
	FirstRow int64     `json:"first_row"` // global index of its first row
	Segments []Segment `json:"segments"`
}

// Segment is the part of a slice inside one row group.
type Segment struct {
	File     int   `json:"file"`      // index into Files
	RowGroup int   `json:"row_group"` // index within the file
	FirstRow int64 `json:"first_row"` // within the file
	Rows     int64 `json:"rows"`
	Offset   int64 `json:"offset"` // byte range of the row group
	Length   int64 `json:"length"`
}

// Totals sums the output.
type Totals struct {
	Rows      int64 `json:"rows"`
	Files     int   `json:"files"`
	RowGroups int   `json:"row_groups"`
	Bytes     int64 `json:"bytes"`
	Slices    int   `json:"slices"`
}

// Fingerprint is the order-independent content fingerprint of all rows.
type Fingerprint struct {
	Algorithm string `json:"algorithm"`
	Rows      int64  `json:"rows"`
	Hash      string `json:"hash"` // 16 hex digits
}

// KV is one named key value.
type KV struct {
	Name  string
	Value any
}

// KeyValues is an ordered set of key values; it is a JSON object whose
// members keep the slice keys' order.
type KeyValues []KV

// MarshalJSON writes an object in order.
func (k KeyValues) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, kv := range k {
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(kv.Name)
		b.Write(name)
		b.WriteByte(':')
		v, err := json.Marshal(kv.Value)
		if err != nil {
			return nil, err
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads an object keeping member order.
func (k *KeyValues) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	t, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := t.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("slice key: want an object")
	}
	*k = (*k)[:0]
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return err
		}
		*k = append(*k, KV{Name: t.(string), Value: v})
	}
	_, err = dec.Token()
	return err
}

// Encode writes m as indented JSON with a final newline.
func Encode(w io.Writer, m *Manifest) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	enc.SetEscapeHTML(false)
	return enc.Encode(m)
}

// Marshal returns the bytes Encode writes.
func Marshal(m *Manifest) ([]byte, error) {
	var b bytes.Buffer
	if err := Encode(&b, m); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Decode reads a manifest, rejecting unknown formats and versions.
func Decode(data []byte) (*Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields() // an edited manifest is not trusted
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if m.Format != Format {
		return nil, fmt.Errorf("manifest: format is %q, want %q", m.Format, Format)
	}
	if m.FormatVersion != FormatVersion {
		return nil, fmt.Errorf("manifest: format_version %d is not supported (this relayout reads %d)", m.FormatVersion, FormatVersion)
	}
	return &m, nil
}

// Packing describes a packed output (run with --query-key): one row per
// query with its query-level columns and `items`, a list of structs of the
// item-level columns. FlatColumns is the original column order, which
// unpacking restores. Rows elsewhere in the manifest count queries; the
// fingerprint is over the flat rows (items).
type Packing struct {
	QueryKey      []string     `json:"query_key"`
	QueryColumns  []string     `json:"query_columns"`
	ItemColumns   []string     `json:"item_columns"`
	FlatColumns   []string     `json:"flat_columns"`
	ItemOrder     []string     `json:"item_order"`
	MovedToItems  []string     `json:"moved_to_items"`
	Queries       int64        `json:"queries"`
	Items         int64        `json:"items"`
	ItemsPerQuery Distribution `json:"items_per_query"`
	BytesBefore   int64        `json:"bytes_before"`
	BytesAfter    int64        `json:"bytes_after"`
}

// Distribution summarises counts.
type Distribution struct {
	Min int64 `json:"min"`
	P50 int64 `json:"p50"`
	P90 int64 `json:"p90"`
	P99 int64 `json:"p99"`
	Max int64 `json:"max"`
}

// Partitioning says how the data files are laid out in folders.
type Partitioning struct {
	// Style is "hive": parquet/k1=v1/k2=v2/part-NNNNN.parquet.
	Style string `json:"style"`
	// Keys are the leading slice keys that name the folders, in folder
	// order; Types their types as --hive-types names them. These columns
	// are in the schema but not in the files: readers take them from the
	// folder names (DuckDB hive_partitioning, pyarrow partitioning="hive").
	Keys  []string `json:"keys"`
	Types []string `json:"types"`
}
