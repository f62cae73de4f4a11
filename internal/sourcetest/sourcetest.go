// Package sourcetest opens Parquet files as a source.Table for tests of
// the packages above source. It is not in internal/testutil because
// source's own tests use testutil, which so cannot import source.
package sourcetest

import (
	"context"
	"testing"

	"github.com/relayout/relayout/source"
	"github.com/relayout/relayout/storage"
)

// Open lists paths (files or folders, as --input takes them) and opens
// them as one table, closed when the test ends; it fails the test on an
// error.
func Open(t testing.TB, paths ...string) *source.Table {
	t.Helper()
	ctx := context.Background()
	objs, err := storage.List(ctx, paths)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := source.Open(ctx, objs, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tbl.Close() })
	return tbl
}
