// Command relayout-image builds relayout's OCI image without a Docker
// daemon: one layer on an empty base holding the static binary, CA
// certificates (for object stores over HTTPS) and a non-root user, with
// relayout as the entrypoint, tagged with the version. It writes an OCI
// image layout as a tar archive (bin/relayout-oci.tar: `skopeo copy
// oci-archive:…` and `crane push` read it) and, with -push, also pushes it
// to a registry (credentials as docker login stores them). `make image`
// runs it; the Dockerfile builds the same image with Docker.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed facts.
const (
	BinPath   = "/usr/local/bin/relayout"
	CertsPath = "/etc/ssl/certs/ca-certificates.crt"
	UID       = 65532
	Home      = "/home/nonroot"
)

// epoch is every file's and the image's time: the same binary gives the
// same image, byte for byte.
var epoch = time.Unix(0, 0).UTC()

func main() {
	bin := flag.String("bin", "bin/relayout-linux-amd64", "the static relayout binary (CGO_ENABLED=0, linux)")
	certs := flag.String("certs", "/etc/ssl/certs/ca-certificates.crt", "the CA bundle to put in the image")
	version := flag.String("version", "dev", "the image tag (relayout's version)")
	out := flag.String("out", "bin/relayout-oci.tar", "the OCI image layout archive to write")
	arch := flag.String("arch", "amd64", "the binary's architecture")
	push := flag.String("push", "", "also push the image to this reference (registry/repo:tag)")
	flag.Parse()
	img, err := Build(*bin, *certs, *version, *arch)
	if err == nil {
		err = WriteArchive(img, *version, *out)
	}
	if err == nil && *push != "" {
		var ref name.Reference
		if ref, err = name.ParseReference(*push); err == nil {
			err = remote.Write(ref, img, remote.WithAuthFromKeychain(authn.DefaultKeychain))
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "relayout-image:", err)
		os.Exit(1)
	}
	d, _ := img.Digest()
	fmt.Printf("relayout-image: %s (%s) -> %s\n", *version, d, *out)
}

// Build returns the image of the binary at bin.
func Build(bin, certs, version, arch string) (v1.Image, error) {
	binData, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	certData, err := os.ReadFile(certs)
	if err != nil {
		return nil, fmt.Errorf("CA certificates: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	type entry struct {
		path  string
		mode  int64
		data  []byte
		dir   bool
		owner int
	}
	entries := []entry{
		{path: "etc/", dir: true, mode: 0o755}, {path: "etc/ssl/", dir: true, mode: 0o755}, {path: "etc/ssl/certs/", dir: true, mode: 0o755},
		{path: "home/", dir: true, mode: 0o755}, {path: "home/nonroot/", dir: true, mode: 0o700, owner: UID},
		{path: "tmp/", dir: true, mode: 0o1777}, {path: "usr/", dir: true, mode: 0o755}, {path: "usr/local/", dir: true, mode: 0o755},
		{path: "usr/local/bin/", dir: true, mode: 0o755},
		{path: "etc/passwd", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:%s:/sbin/nologin\n", UID, UID, Home))},
		{path: "etc/group", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", UID))},
		{path: CertsPath[1:], mode: 0o644, data: certData},
		{path: BinPath[1:], mode: 0o755, data: binData},
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].path < entries[j].path })
	for _, e := range entries {
		h := &tar.Header{Name: e.path, Mode: e.mode, ModTime: epoch, Uid: e.owner, Gid: e.owner, Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerBytes)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "relayout-image " + version}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Created = arch, "linux", v1.Time{Time: epoch}
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", UID, UID),
		Entrypoint: []string{BinPath},
		WorkingDir: Home,
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=" + CertsPath, "HOME=" + Home},
		Labels: map[string]string{
			"org.opencontainers.image.title":   "relayout",
			"org.opencontainers.image.version": version,
			"org.opencontainers.image.source":  "https://github.com/relayout/relayout",
		},
	}
	return mutate.ConfigFile(img, cf)
}

// WriteArchive writes img as an OCI image layout (tagged version) packed
// in a tar archive at out: an oci-archive, as skopeo and podman name it.
func WriteArchive(img v1.Image, version, out string) error {
	dir, err := os.MkdirTemp("", "relayout-oci-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": version})); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	f, err := os.Create(out + ".tmp")
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	var paths []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p != dir {
			paths = append(paths, p)
		}
		return err
	})
	sort.Strings(paths)
	for _, p := range paths {
		rel, _ := filepath.Rel(dir, p)
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: epoch, Mode: 0o644, Format: tar.FormatPAX}
		if st.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		h.Typeflag, h.Size = tar.TypeReg, int64(len(data))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(out+".tmp", out)
}
