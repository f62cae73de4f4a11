package testutil

import (
	"io"
	"strings"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"
)

// GCSServer starts fake-gcs-server (the GCS JSON and XML APIs over HTTP
// on loopback) with the bucket, and points the Go client that gocloud's
// gcsblob opens at it for the rest of the test (STORAGE_EMULATOR_HOST,
// which also makes gcsblob use no credentials): gs://bucket/... then
// reaches it as it would reach GCS.
func GCSServer(t testing.TB, bucket string) *fakestorage.Server {
	t.Helper()
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{
		Scheme: "http", Host: "127.0.0.1", Port: 0, Writer: io.Discard,
		// The client reads objects at http://HOST:PORT/BUCKET/OBJECT (the
		// XML API's path style): the server takes that for its public
		// host, matched without the port.
		PublicHost: "127.0.0.1",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: bucket})
	t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimPrefix(srv.URL(), "http://"))
	return srv
}
