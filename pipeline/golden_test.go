package pipeline

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
)

// TestGoldenManifest pins the manifest of a small generated input byte for
// byte (inputs' paths and mtimes, which name the temporary folder, are
// normalised). Any change to the layout, encodings, manifest format or
// fingerprint shows as a diff; regenerate with -update and review it.
func TestGoldenManifest(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 3_000, Files: 2, Seed: 1})
	out := filepath.Join(t.TempDir(), "out")
	smallRun(t, in, out, func(o *RunOptions) { o.RowGroupBytes = 64 << 10; o.MinRowGroupBytes = 8 << 10 })
	got, err := os.ReadFile(filepath.Join(out, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	got = normaliseInputs(got)
	golden := filepath.Join(testutil.Root(), "testdata", "golden", "manifest.json")
	if *update {
		os.WriteFile(golden, got, 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		lo := max(i-200, 0)
		t.Fatalf("manifest differs from %s at byte %d:\n got  ...%s\n want ...%s", golden, i, got[lo:min(i+100, len(got))], want[lo:min(i+100, len(want))])
	}
}
