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

// RemovePrefix deletes every object under rel (best effort on NotFound).
func RemovePrefix(ctx context.Context, out Location, rel string) error {
	keys, err := ListKeys(ctx, out, rel)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := out.Bucket.Delete(ctx, out.Key(k)); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return Classify(fmt.Errorf("remove %s: %w", out.URL(k), err))
		}
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
