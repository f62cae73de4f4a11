package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/relayout/relayout/internal/arrowmem"
	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
)

// TestMain poisons arrow buffers when freed (arrowmem.TestMain).
func TestMain(m *testing.M) { arrowmem.TestMain(m) }

// BenchmarkRun re-lays out a generated 200k-row log per iteration.
// Run: go test ./pipeline -run '^$' -bench Run -benchtime 3x
func BenchmarkRun(b *testing.B) {
	in := testutil.Generate(b, gen.Options{Rows: 200_000, Files: 4, Seed: 1})
	var inBytes int64
	for _, p := range testutil.Files(b, in) {
		st, _ := os.Stat(p)
		inBytes += st.Size()
	}
	for _, mode := range []struct {
		name  string
		units int64
	}{{"memory", 0}, {"spill", 50_000}} {
		b.Run(mode.name, func(b *testing.B) {
			b.SetBytes(inBytes)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				out := filepath.Join(b.TempDir(), "out")
				_, err := Run(context.Background(), RunOptions{Inputs: []string{in}, Output: out,
					SliceKeys: []string{"country", "date"}, UnitRows: mode.units, TmpDir: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkInspect measures the footer-and-keys read of inspect.
func BenchmarkInspect(b *testing.B) {
	in := testutil.Generate(b, gen.Options{Rows: 200_000, Files: 4, Seed: 1})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Inspect(context.Background(), InspectOptions{Inputs: []string{in}, SliceKeys: []string{"country", "date"}}); err != nil {
			b.Fatal(err)
		}
	}
}
