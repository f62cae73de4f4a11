package manifests

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestKeyValuesKeepOrder(t *testing.T) {
	k := KeyValues{{"zeta", "C01"}, {"alpha", int64(3)}, {"mid", nil}}
	data, err := json.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != `{"zeta":"C01","alpha":3,"mid":null}` {
		t.Fatalf("marshal: %s", data)
	}
	var back KeyValues
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if len(back) != 3 || back[0].Name != "zeta" || back[1].Name != "alpha" || back[2].Value != nil {
		t.Fatalf("unmarshal: %+v", back)
	}
}

func TestDecodeRejectsUnknownFormats(t *testing.T) {
	m := &Manifest{Format: Format, FormatVersion: FormatVersion, Config: json.RawMessage(`{}`)}
	data, _ := Marshal(m)
	if _, err := Decode(data); err != nil {
		t.Fatalf("valid manifest: %v", err)
	}
	for name, mut := range map[string]func([]byte) []byte{
		"format": func(b []byte) []byte { return bytes.Replace(b, []byte(Format), []byte("other"), 1) },
		"version": func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"format_version": 1`), []byte(`"format_version": 2`), 1)
		},
		"syntax": func(b []byte) []byte { return b[:len(b)/2] },
	} {
		if _, err := Decode(mut(data)); err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.Contains(err.Error(), "manifest") {
			t.Errorf("%s: error %q does not say manifest", name, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	m := &Manifest{Format: Format, FormatVersion: FormatVersion, Config: json.RawMessage(`{}`),
		Slices: []Slice{{Key: KeyValues{{"country", "C01"}}, Rows: 3}}}
	data, _ := Marshal(m)
	f.Add(data)
	f.Add([]byte(`{"format":"relayout-manifest","format_version":1,"slices":[{"key":{"a":[1]}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data) // must not panic
		if err != nil {
			return
		}
		again, err := Marshal(m)
		if err != nil {
			return // e.g. a key value JSON cannot re-encode
		}
		if _, err := Decode(again); err != nil {
			t.Fatalf("re-encoded manifest does not decode: %v", err)
		}
	})
}

// TestBlockRows: a shard's canonical block boundaries, written out by
// hand: cut at every multiple of block_samples counted from the output's
// first sample, relative to the shard's first.
func TestBlockRows(t *testing.T) {
	for _, c := range []struct {
		first, rows, bs int64
		want            []int64
	}{
		{0, 10, 4, []int64{0, 4, 8, 10}},
		{0, 8, 4, []int64{0, 4, 8}},
		{6, 10, 4, []int64{0, 2, 6, 10}}, // output samples 6..15: cuts at 8 and 12
		{8, 3, 4, []int64{0, 3}},
		{5, 1, 1, []int64{0, 1}},
		{0, 3, 100, []int64{0, 3}},
	} {
		if got := BlockRows(c.first, c.rows, c.bs); !slices.Equal(got, c.want) {
			t.Errorf("BlockRows(%d, %d, %d) = %v, want %v", c.first, c.rows, c.bs, got, c.want)
		}
	}
}
