package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/relayout/relayout/internal/par"
)

// listing error: a cleanup that cannot list must not look complete.
func ListKeys(ctx context.Context, out Location, prefix string) ([]string, error) {
	var keys []string
	it := out.Bucket.List(&blob.ListOptions{Prefix: out.Key(prefix)})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return keys, nil
		}
		if err != nil {
			return nil, Classify(fmt.Errorf("list %s: %w", out.URL(prefix), err))
		}
		if obj.IsDir {
			continue
		}
		keys = append(keys, strings.TrimPrefix(obj.Key, out.Prefix))
	}
}

// removeParallel is how many deletes RemovePrefix has in flight: a
// delete is a request or two whose latency bounds it (s3blob asks for the
// object's attributes first), and a work prefix of a Hive output of 1,200
// folders holds thousands of objects (36 s one after another at 10 ms a
// request).
const removeParallel = 16

// RemovePrefix deletes every object under rel (best effort on NotFound),
// several at once.
func RemovePrefix(ctx context.Context, out Location, rel string) error {
	keys, err := ListKeys(ctx, out, rel)
	if err != nil {
		return err
	}
	// On S3, a request per thousand keys (deleteS3Batches); the rest one
	// at a time, 16 at once.
	if keys, err = deleteS3Batches(ctx, out, keys); err != nil {
		return err
	}
	err = par.ForEach(ctx, len(keys), removeParallel, func(i int) error {
		k := keys[i]
		if err := out.Bucket.Delete(ctx, out.Key(k)); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return Classify(fmt.Errorf("remove %s: %w", out.URL(k), err))
		}
		return nil
	})
	if err != nil {
		return err
	}
	RemoveEmptyDirs(out, rel)
	return nil
}

// RemoveEmptyDirs removes, on a local location, the folder rel and the
// folders under it that are empty (fileblob deletes files, not the folders
// they emptied; an object store has no folders). Folders with anything in
// them stay.
func RemoveEmptyDirs(out Location, rel string) {
	if out.Local != "" {
		removeEmptyDirs(filepath.Join(out.Local, filepath.FromSlash(out.Key(rel))))
	}
}

// removeEmptyDirs removes dir and the folders under it that are empty.
func removeEmptyDirs(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.IsDir() {
			removeEmptyDirs(filepath.Join(dir, e.Name()))
		}
	}
	os.Remove(dir) // fails, as it should, when not empty
}
