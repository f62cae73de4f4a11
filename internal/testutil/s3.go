package testutil

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// S3 is a real S3-protocol server (gofakes3, in memory) over HTTP on
// loopback, for the test that started it.
type S3 struct {
	// Backend holds the buckets and objects; tests write and corrupt
	// objects through it behind the server's back.
	Backend *s3mem.Backend
	// Params is the query that points an s3:// URL at the server:
	// "s3://bucket/prefix/" + Params.
	Params string
	// Env is the credentials and region the server takes, set for the
	// rest of the test in this process and to hand to child processes.
	Env []string
	// Conns counts the connections clients opened to the server.
	Conns atomic.Int64
}

// S3Server starts an S3 server with bucket, its handler wrapped by wrap
// when set (a test's counters, delays or fault proxy in front of it), and
// sets the AWS variables that reach it (no instance metadata lookups).
func S3Server(tb testing.TB, bucket string, wrap func(http.Handler) http.Handler) *S3 {
	tb.Helper()
	s := &S3{Backend: s3mem.New()}
	if err := s.Backend.CreateBucket(bucket); err != nil {
		tb.Fatal(err)
	}
	h := gofakes3.New(s.Backend).Server()
	if wrap != nil {
		h = wrap(h)
	}
	ts := httptest.NewUnstartedServer(h)
	ts.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.Conns.Add(1)
		}
	}
	ts.Start()
	tb.Cleanup(ts.Close)
	s.Env = []string{"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_REGION=us-east-1", "AWS_EC2_METADATA_DISABLED=true"}
	for _, kv := range s.Env {
		k, v, _ := strings.Cut(kv, "=")
		tb.Setenv(k, v)
	}
	s.Params = "?region=us-east-1&endpoint=" + ts.URL + "&use_path_style=true&disable_https=true&request_checksum_calculation=when_required&response_checksum_validation=when_required"
	return s
}
