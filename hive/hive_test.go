package hive

import (
	"math/rand/v2"
	"path"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/relayout/relayout/internal/arrowmem"
)

func TestSegmentsDecode(t *testing.T) {
	got := Segments("year=2024/plain/city=S%C3%A3o%20Paulo/x%2Fy=a%3Db/bad=%zz/=skipped/part-0.parquet")
	want := []KV{{"year", "2024", false}, {"city", "São Paulo", false}, {"x/y", "a=b", false}, {"bad", "%zz", false}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("segment %d: got %v, want %v", i, got[i], want[i])
		}
	}
	if s := Segments("k=v.parquet"); len(s) != 0 {
		t.Fatalf("a file name is not a folder: %v", s)
	}
}

// TestInferLikeDuckDB: the rules DuckDB's hive_types_autocast follows
// (checked against DuckDB 1.x by hand: 1 and 30000000000 are BIGINT;
// 2026-11-30 DATE; 01, 1.5, true and timestamps VARCHAR; NULL and
// __HIVE_DEFAULT_PARTITION__ null).
func TestInferLikeDuckDB(t *testing.T) {
	cases := []struct {
		values []string
		want   arrow.DataType
	}{
		{[]string{"1", "30000000000", "-4"}, arrow.PrimitiveTypes.Int64},
		{[]string{"1", DefaultPartition, "NULL"}, arrow.PrimitiveTypes.Int64},
		{[]string{"2026-11-30", "2026-12-01"}, arrow.FixedWidthTypes.Date32},
		{[]string{"01", "2"}, arrow.BinaryTypes.String},
		{[]string{"1.5", "2"}, arrow.BinaryTypes.String},
		{[]string{"true", "false"}, arrow.BinaryTypes.String},
		{[]string{"2026-1-5"}, arrow.BinaryTypes.String},
		{[]string{"2026-11-30 10:00:00"}, arrow.BinaryTypes.String},
		{[]string{DefaultPartition}, arrow.BinaryTypes.String},
	}
	for _, tc := range cases {
		var rels, urls []string
		for _, v := range tc.values {
			rels = append(rels, "k="+Escape(v)+"/f.parquet")
			urls = append(urls, "f")
		}
		p, err := Discover(rels, urls, Auto, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !arrow.TypeEqual(p.Types[0], tc.want) {
			t.Errorf("%v: inferred %s, want %s", tc.values, p.Types[0], tc.want)
		}
	}
}

func TestConstant(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	v := "2026-11-30"
	for _, n := range []int{0, 1, 7, 1000} {
		for _, tc := range []struct {
			t    arrow.DataType
			v    string
			want string
		}{
			{arrow.FixedWidthTypes.Date32, v, v},
			{arrow.PrimitiveTypes.Int32, "-12", "-12"},
			{arrow.PrimitiveTypes.Float64, "1.5", "1.5"},
			{arrow.FixedWidthTypes.Boolean, "true", "true"},
			{arrow.BinaryTypes.String, "a/b", "a/b"},
		} {
			a, err := Constant(mem, tc.t, &tc.v, n)
			if err != nil {
				t.Fatal(err)
			}
			if a.Len() != n || a.NullN() != 0 {
				t.Fatalf("%s: %d values, %d null", tc.t, a.Len(), a.NullN())
			}
			for i := 0; i < n; i++ {
				if a.ValueStr(i) != tc.want {
					t.Fatalf("%s[%d] = %s, want %s", tc.t, i, a.ValueStr(i), tc.want)
				}
			}
			a.Release()
		}
		a, _ := Constant(mem, arrow.PrimitiveTypes.Int64, nil, n)
		if a.NullN() != n {
			t.Fatalf("null constant: %d nulls of %d", a.NullN(), n)
		}
		a.Release()
	}
	if _, err := Parse(arrow.PrimitiveTypes.Int32, "x1"); err == nil {
		t.Fatal("x1 parsed as int32")
	}
}

// TestPathRoundTripsAndStaysInside: any value, written as a folder by Path
// and read back by Segments, is the same value, and null only where it was
// null (a string "NULL" was read back as null); the folders are exactly one
// per key, and none is "." or ".." or holds a "/".
func TestPathRoundTripsAndStaysInside(t *testing.T) {
	fixed := []string{"", "a/b", "../..", "x=y", "100%", "sp ace", "São Paulo", "日本", "a\\b", "#?*:", "\x00\x01\n", ".", "..", DefaultPartition + "x",
		// strings a reader would take for null, were they written as they are
		"NULL", "null", "Null", DefaultPartition, strings.ToLower(DefaultPartition), "%4EULL"}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune("a/=%. \\#:?é日\x00\x7f-_")
	for i := 0; i < 2000; i++ {
		n := rng.IntN(12)
		var b strings.Builder
		for j := 0; j < n; j++ {
			b.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		fixed = append(fixed, b.String())
	}
	for _, v := range fixed {
		v := v
		keys := []string{"k/1", "date"}
		p, err := Path(keys, []*string{&v, nil})
		if err != nil {
			t.Fatal(err)
		}
		segs := strings.Split(p, "/")
		if len(segs) != 2 || path.Clean("out/"+p) != "out/"+p {
			t.Fatalf("value %q: path %q", v, p)
		}
		for _, s := range segs {
			if s == "." || s == ".." || s == "" {
				t.Fatalf("value %q: segment %q", v, s)
			}
		}
		got := Segments(p + "/part-00000.parquet")
		if len(got) != 2 || got[0].Key != "k/1" || got[0].Value != v || got[0].Null || got[1].Key != "date" || !got[1].Null {
			t.Fatalf("value %q: path %q read back as %v", v, p, got)
		}
	}
	long := strings.Repeat("x", 300)
	if _, err := Path([]string{"k"}, []*string{&long}); err == nil {
		t.Fatal("a 300-byte folder name was accepted")
	}
}

func TestParseTypesAndMode(t *testing.T) {
	ts, err := ParseTypes("date=date, hour=int32,city:varchar")
	if err != nil {
		t.Fatal(err)
	}
	if !arrow.TypeEqual(ts["date"], arrow.FixedWidthTypes.Date32) || !arrow.TypeEqual(ts["hour"], arrow.PrimitiveTypes.Int32) || !arrow.TypeEqual(ts["city"], arrow.BinaryTypes.String) {
		t.Fatalf("%v", ts)
	}
	for _, bad := range []string{"date", "date=decimal", "=int32"} {
		if _, err := ParseTypes(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if m, err := ParseMode(""); err != nil || m != Auto {
		t.Fatal(m, err)
	}
	if _, err := ParseMode("maybe"); err == nil {
		t.Fatal("maybe accepted")
	}
}

// TestPathNeverEndsInDotDot: object-store clients rewrite "../" in keys
// (gocloud's fileblob escapes the slash), so no folder may end in "..".
func TestPathNeverEndsInDotDot(t *testing.T) {
	for _, v := range []string{"..", "a..", "...", ".", "a.b."} {
		v := v
		p, _ := Path([]string{"k"}, []*string{&v})
		if strings.HasSuffix(p, "..") {
			t.Errorf("value %q: folder %q ends in ..", v, p)
		}
		if got := Segments(p + "/f"); got[0].Value != v {
			t.Errorf("value %q read back as %q", v, got[0].Value)
		}
	}
}

// TestMain poisons arrow buffers when freed (arrowmem.TestMain).
func TestMain(m *testing.M) { arrowmem.TestMain(m) }
