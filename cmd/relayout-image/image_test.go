package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
)

// TestImageRunsFromItsLayers builds the image of a static relayout, opens
// the archive with nothing but tar and JSON (the OCI layout: index,
// manifest, config, layers, every blob's digest), checks the config (a
// non-root user, relayout as entrypoint, CA certificates, the version) and
// runs the binary taken out of its layer on a fixture; the same binary
// gives the same archive byte for byte, and a push to a registry gives the
// archive's digest.
func TestImageRunsFromItsLayers(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "relayout-static")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "github.com/relayout/relayout/cmd/relayout")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	certs := "/etc/ssl/certs/ca-certificates.crt"
	if _, err := os.Stat(certs); err != nil {
		t.Fatalf("no CA bundle at %s (Debian ca-certificates)", certs)
	}
	archive := filepath.Join(dir, "relayout-oci.tar")
	img, err := Build(bin, certs, "9.8.7-test", "amd64")
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteArchive(img, "9.8.7-test", archive); err != nil {
		t.Fatal(err)
	}

	// Read the OCI layout with tar and JSON only.
	files := map[string][]byte{}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			files[h.Name], _ = io.ReadAll(tr)
		}
	}
	f.Close()
	blob := func(digest string) []byte {
		t.Helper()
		data, ok := files["blobs/sha256/"+strings.TrimPrefix(digest, "sha256:")]
		if !ok {
			t.Fatalf("no blob %s in the archive", digest)
		}
		if got := fmt.Sprintf("sha256:%x", sha256.Sum256(data)); got != digest {
			t.Fatalf("blob %s hashes to %s", digest, got)
		}
		return data
	}
	if !strings.Contains(string(files["oci-layout"]), `"imageLayoutVersion"`) {
		t.Fatalf("oci-layout: %q", files["oci-layout"])
	}
	var index struct {
		Manifests []struct {
			MediaType, Digest string
			Annotations       map[string]string
		}
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, files["index.json"])
	}
	if index.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "9.8.7-test" {
		t.Fatalf("the image is not tagged with the version: %v", index.Manifests[0].Annotations)
	}
	var manifest struct {
		MediaType string
		Config    struct{ MediaType, Digest string }
		Layers    []struct{ MediaType, Digest string }
	}
	if err := json.Unmarshal(blob(index.Manifests[0].Digest), &manifest); err != nil {
		t.Fatal(err)
	}
	if manifest.MediaType != "application/vnd.oci.image.manifest.v1+json" || len(manifest.Layers) != 1 {
		t.Fatalf("manifest: %+v", manifest)
	}
	var cfg struct {
		Architecture, OS string
		Config           struct {
			User, WorkingDir string
			Entrypoint, Env  []string
			Labels           map[string]string
		}
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(blob(manifest.Config.Digest), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Config.User != "65532:65532" || strings.Join(cfg.Config.Entrypoint, " ") != BinPath ||
		cfg.Config.Labels["org.opencontainers.image.version"] != "9.8.7-test" || !strings.Contains(strings.Join(cfg.Config.Env, " "), "SSL_CERT_FILE="+CertsPath) {
		t.Fatalf("config: %+v", cfg)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(manifest.Layers[0].Digest)))
	if err != nil {
		t.Fatal(err)
	}
	layer, _ := io.ReadAll(zr)
	if got := fmt.Sprintf("sha256:%x", sha256.Sum256(layer)); len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != got {
		t.Fatalf("diff_ids %v, the layer is %s", cfg.RootFS.DiffIDs, got)
	}
	inLayer := map[string]*tar.Header{}
	contents := map[string][]byte{}
	lr := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := lr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		inLayer[h.Name] = h
		contents[h.Name], _ = io.ReadAll(lr)
	}
	if h := inLayer[BinPath[1:]]; h == nil || h.Mode&0o111 == 0 {
		t.Fatalf("no executable %s in the layer", BinPath)
	}
	if len(contents[CertsPath[1:]]) < 1000 || !strings.Contains(string(contents["etc/passwd"]), "nonroot:x:65532") {
		t.Fatal("the layer lacks the CA bundle or the non-root user")
	}

	// The binary from the layer runs a fixture.
	exe := filepath.Join(dir, "from-image")
	if err := os.WriteFile(exe, contents[BinPath[1:]], 0o755); err != nil {
		t.Fatal(err)
	}
	in := testutil.Generate(t, gen.Options{Rows: 3_000, Files: 1, Seed: 111})
	out := filepath.Join(dir, "out")
	for _, args := range [][]string{{"--version"}, {"run", "--quiet", "--input", in, "--output", out, "--slice-keys", "country"}, {"verify", "--deep", out}} {
		if b, err := exec.Command(exe, args...).CombinedOutput(); err != nil {
			t.Fatalf("the image's relayout %v: %v: %s", args, err, b)
		}
	}

	// Reproducible, and a push gives the same digest.
	again := filepath.Join(dir, "again.tar")
	img2, _ := Build(bin, certs, "9.8.7-test", "amd64")
	if err := WriteArchive(img2, "9.8.7-test", again); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(archive)
	b, _ := os.ReadFile(again)
	if !bytes.Equal(a, b) {
		t.Fatal("the same binary gave two different archives")
	}
	reg := httptest.NewServer(registry.New())
	defer reg.Close()
	ref, err := name.ParseReference(strings.TrimPrefix(reg.URL, "http://") + "/relayout:9.8.7-test")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	d, err := remote.Head(ref)
	if err != nil || d.Digest.String() != index.Manifests[0].Digest {
		t.Fatalf("pushed %v (%v), the archive's manifest is %s", d, err, index.Manifests[0].Digest)
	}
}

// TestDockerfileMatchesTheImage: the Dockerfile (for those who build with
// Docker) declares the user, entrypoint and binary path this image has.
func TestDockerfileMatchesTheImage(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(testutil.Root(), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for _, want := range []string{fmt.Sprintf("USER %d:%d", UID, UID), `ENTRYPOINT ["` + BinPath + `"]`, "COPY --from=build /relayout " + BinPath, "CGO_ENABLED=0"} {
		if !strings.Contains(s, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}
