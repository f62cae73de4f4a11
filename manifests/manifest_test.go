package manifests

import (
	"bytes"
	"encoding/json"
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
