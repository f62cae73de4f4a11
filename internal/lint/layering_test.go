// Package lint holds tests about the code base itself, not its behaviour.
package lint

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/relayout/relayout/"

// graph returns each project package's project imports (not its tests'),
// from go list, relative to the module path.
func graph(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	g := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		pkg := strings.TrimPrefix(f[0], module)
		g[pkg] = []string{}
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, module) {
				g[pkg] = append(g[pkg], strings.TrimPrefix(imp, module))
			}
		}
	}
	if len(g) < 10 {
		t.Fatalf("go list found %d packages: %s", len(g), out)
	}
	return g
}

// TestLayering checks the package layering docs/architecture.md
// describes: each stage of the data path depends only on the stages
// before it, the commands sit on top, and nothing reaches back up.
func TestLayering(t *testing.T) {
	g := graph(t)
	forbid := func(pkg string, bad ...string) {
		t.Helper()
		if _, ok := g[pkg]; !ok {
			t.Errorf("package %s is gone: update this test and docs/architecture.md", pkg)
			return
		}
		for _, imp := range g[pkg] {
			for _, b := range bad {
				if imp == b || strings.HasPrefix(imp, b+"/") {
					t.Errorf("%s imports %s", pkg, imp)
				}
			}
		}
	}
	for pkg, imps := range g {
		for _, imp := range imps {
			if strings.HasPrefix(imp, "cmd/") {
				t.Errorf("%s imports %s: nothing imports a command", pkg, imp)
			}
			if imp == "pipeline" && !strings.HasPrefix(pkg, "cmd/") {
				t.Errorf("%s imports pipeline: only the command line does", pkg)
			}
		}
	}
	if len(g["manifests"]) > 0 {
		t.Errorf("manifests imports %v: it is the leaf every stage shares", g["manifests"])
	}
	upper := []string{"pipeline", "plan", "report", "verify"}
	for _, stage := range []string{"source", "storage", "partition", "dedupe", "writer", "tensors", "fingerprint", "loader", "hive"} {
		forbid(stage, upper...)
	}
	// hive is shared by both ends of the data path: it names paths and
	// parses values, and imports no stage.
	forbid("hive", "source", "storage", "partition", "dedupe", "writer", "tensors", "manifests")
	forbid("writer", "partition", "dedupe", "plan")
	forbid("source", "partition", "dedupe", "writer")
	forbid("partition", "dedupe")
	forbid("report", "plan", "pipeline")
	forbid("plan", "pipeline", "dedupe")
	// The loader reads remote outputs through storage (the object-store
	// boundary, as the CLI does), and nothing else of the pipeline; it
	// reads a dataset root's generations as dataset defines them.
	forbid("loader", "source", "partition", "dedupe", "writer", "plan", "report", "verify")
	// dataset is the format of a root (as manifests is of an output): the
	// loaders read it, so it imports no stage of the writing side.
	forbid("dataset", "source", "partition", "dedupe", "writer", "tensors", "fingerprint", "loader", "hive")

	// partition and dedupe feed a writer.Sink and know nothing else of
	// the writers.
	for _, pkg := range []string{"partition", "dedupe"} {
		for _, name := range writerNames(t, pkg) {
			if !slices.Contains([]string{"Sink", "Written"}, name) {
				t.Errorf("%s uses writer.%s: it may only feed a writer.Sink", pkg, name)
			}
		}
	}
}

// writerNames lists the writer identifiers a package's non-test files use.
func writerNames(t *testing.T, pkg string) []string {
	t.Helper()
	dir := filepath.Join("..", "..", pkg)
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s (%v)", dir, err)
	}
	var names []string
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "writer" {
					names = append(names, sel.Sel.Name)
				}
			}
			return true
		})
	}
	return names
}
