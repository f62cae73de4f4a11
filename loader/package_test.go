package loader_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/internal/version"
	"github.com/relayout/relayout/pipeline"
)

// pep440 is the Python package's form of the CLI's version.
func pep440(v string) string { return strings.Replace(v, "-dev", ".dev0", 1) }

// TestPipInstallOffline: `pip install ./python` (with every extra) works
// offline in a venv that sees the system's packages; the installed module,
// imported from elsewhere, is the package's, versioned as the CLI is, with
// the dependencies pyproject.toml declares, and reads an output.
func TestPipInstallOffline(t *testing.T) {
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import venv, ensurepip, numpy, torch, boto3, azure.storage.blob, google.auth, fsspec").Run(); err != nil {
		testutil.Missing(t, "python3-venv, -pip, -numpy, -torch, -boto3, -azure-storage, -google-auth or -fsspec missing: make deps installs them (%v)", err)
	}
	in := testutil.Generate(t, gen.Options{Rows: 5_000, Files: 1, Seed: 91})
	out := filepath.Join(t.TempDir(), "out")
	if _, err := pipeline.Run(t.Context(), pipeline.RunOptions{Inputs: []string{in}, Output: out, SliceKeys: []string{"country"}, Tensors: true}); err != nil {
		t.Fatal(err)
	}
	venv := filepath.Join(t.TempDir(), "venv")
	if b, err := exec.Command(py, "-m", "venv", "--system-site-packages", venv).CombinedOutput(); err != nil {
		t.Fatalf("venv: %v: %s", err, b)
	}
	src := filepath.Join(testutil.Root(), "python")
	pip := exec.Command(filepath.Join(venv, "bin", "pip"), "install", "--no-index", "--no-cache-dir", "--disable-pip-version-check", src+"[torch,s3,azure,gcs,fsspec]")
	pip.Env = append(os.Environ(), "PIP_NO_INDEX=1", "PIP_FIND_LINKS=")
	if b, err := pip.CombinedOutput(); err != nil {
		t.Fatalf("pip install ./python: %v: %s", err, b)
	}
	script := `import importlib.metadata as md, json, sys, tomllib
import relayout_loader as rl
d = rl.Dataset(sys.argv[1], seed=1)
n = sum(len(b["_index"]) for b in rl.Dataset(sys.argv[1], seed=1, index=True).batches(512))
with open(sys.argv[2], "rb") as f:
    pp = tomllib.load(f)["project"]
declared = sorted(pp["dependencies"] + [f'{r}; extra == "{e}"' for e, rs in pp["optional-dependencies"].items() for r in rs])
print(json.dumps({"file": rl.__file__, "version": rl.__version__, "dist": md.version("relayout-loader"),
                  "requires": sorted(md.requires("relayout-loader")), "declared": declared, "samples": n, "len": len(d)}))`
	cmd := exec.Command(filepath.Join(venv, "bin", "python"), "-c", script, out, filepath.Join(src, "pyproject.toml"))
	cmd.Dir = t.TempDir() // not python/: the installed module must be found
	cmd.Env = append(os.Environ(), "PYTHONPATH=")
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("import the installed package: %v: %s", err, b)
	}
	got := string(b)
	want := pep440(version.Version)
	if !strings.Contains(got, `"version": "`+want+`"`) || !strings.Contains(got, `"dist": "`+want+`"`) {
		t.Fatalf("installed version is not %s: %s", want, got)
	}
	if !strings.Contains(got, filepath.Join(venv, "lib")) {
		t.Fatalf("imported from elsewhere than the venv: %s", got)
	}
	var res struct {
		Requires, Declared []string
		Samples, Len       int
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if strings.Join(res.Requires, "|") != strings.Join(res.Declared, "|") {
		t.Fatalf("the wheel requires %v, pyproject.toml declares %v", res.Requires, res.Declared)
	}
	if res.Samples != 5000 || res.Len != 5000 {
		t.Fatalf("the installed loader read %d samples (len %d), want 5000", res.Samples, res.Len)
	}
}
