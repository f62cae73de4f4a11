package storage

import (
	"context"
	"encoding/pem"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"gocloud.dev/blob"
)

// TestOpenS3Parameters: s3:// URLs take the query parameters gocloud's
// s3blob opener takes (its own, then the AWS config's), and refuse bad
// values and unknown parameters with a message naming them.
func TestOpenS3Parameters(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	for _, c := range []struct{ query, err string }{
		{"region=us-east-1&endpoint=http://127.0.0.1:9&use_path_style=true&disable_https=true", ""},
		{"region=us-east-1&s3ForcePathStyle=true&accelerate=false&ssetype=aws:kms&kmskeyid=k1", ""},
		{"region=us-east-1&request_checksum_calculation=when_required&response_checksum_validation=when_required", ""},
		{"region=us-east-1&ssetype=AES256", ""},
		{"region=us-east-1&ssetype=rot13", `"rot13" is not a valid value for "ssetype"`},
		{"region=us-east-1&use_path_style=maybe", `invalid value for "use_path_style"`},
		{"region=us-east-1&disable_https=2x", `invalid value for "disable_https"`},
		{"region=us-east-1&colour=blue", "colour"},
	} {
		u, err := url.Parse("s3://bucket?" + c.query)
		if err != nil {
			t.Fatal(err)
		}
		b, err := openS3(context.Background(), u)
		if c.err == "" {
			if err != nil {
				t.Errorf("%s: %v", c.query, err)
			} else {
				b.Close()
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: error %v, want one containing %q", c.query, err, c.err)
		}
	}
}

// TestOpenS3KeepsCABundle: a store behind TLS with a private CA, named by
// AWS_CA_BUNDLE, is reached: the connection pool is set on the AWS
// config's own HTTP client, which carries the bundle, not on a new one.
func TestOpenS3KeepsCABundle(t *testing.T) {
	backend := s3mem.New()
	if err := backend.CreateBucket("tls"); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewTLSServer(gofakes3.New(backend).Server())
	defer ts.Close()
	bundle := filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	if err := os.WriteFile(bundle, pemBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_CA_BUNDLE", bundle)
	loc, err := OpenDir(context.Background(), "s3://tls/out/?region=us-east-1&use_path_style=true&request_checksum_calculation=when_required&response_checksum_validation=when_required&endpoint="+ts.URL, false)
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Bucket.Close()
	if err := loc.Bucket.WriteAll(context.Background(), "out/x", []byte("hello"), nil); err != nil {
		t.Fatalf("writing through TLS with the CA bundle: %v", err)
	}
	got, err := loc.Bucket.ReadAll(context.Background(), "out/x")
	if err != nil || string(got) != "hello" {
		t.Fatalf("read back %q, %v", got, err)
	}
}

// TestOpenDirSharesBuckets: OpenDir returns one bucket for every location
// on a bucket opened with the same parameters (in any order) and the same
// credential variables, and another when either differs.
func TestOpenDirSharesBuckets(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	ctx := context.Background()
	open := func(name string) *blob.Bucket {
		t.Helper()
		loc, err := OpenDir(ctx, name, false)
		if err != nil {
			t.Fatal(err)
		}
		return loc.Bucket
	}
	a := open("s3://shared/in/?region=us-east-1&endpoint=http://127.0.0.1:9&use_path_style=true")
	if b := open("s3://shared/out/x/?use_path_style=true&endpoint=http://127.0.0.1:9&region=us-east-1"); b != a {
		t.Error("two prefixes of one bucket, the same parameters in another order: two buckets")
	}
	if b := open("s3://shared/?region=us-east-1&endpoint=http://127.0.0.1:10&use_path_style=true"); b == a {
		t.Error("another endpoint: the same bucket")
	}
	if b := open("s3://other/in/?region=us-east-1&endpoint=http://127.0.0.1:9&use_path_style=true"); b == a {
		t.Error("another bucket: the same bucket")
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "someone-else")
	if b := open("s3://shared/in/?region=us-east-1&endpoint=http://127.0.0.1:9&use_path_style=true"); b == a {
		t.Error("other credentials in the environment: the same bucket")
	}
	if _, err := OpenDir(ctx, "s3://shared/?colour=blue", false); err == nil {
		t.Error("an unknown parameter opened")
	}
	if _, err := OpenDir(ctx, "s3://shared/?colour=blue", false); err == nil {
		t.Error("an unknown parameter opened the second time (a failed open was kept)")
	}
}
