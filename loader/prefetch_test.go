package loader

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/relayout/relayout/storage"
)

// TestPrefetchSkipsPassedObjects: a prefetch fetches an object only while
// the reader will still open a window that needs it. A prefetch that waited
// for room while the reader fetched, read and evicted the object itself
// used to download it a second time, for nothing (CI: 30 GETs for 29
// shards, reproduced about once in 100 epochs on one core beside two busy
// processes). The reader's own fetch (wait) is never skipped.
func TestPrefetchSkipsPassedObjects(t *testing.T) {
	store, cache := t.TempDir(), t.TempDir()
	data := []byte("a shard's bytes, whole")
	if err := os.WriteFile(filepath.Join(store, "s0.safetensors"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	loc, err := storage.OpenDir(ctx, store, false)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := newRemote(loc, store, Options{CacheDir: cache, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	h := fmt.Sprintf("%016x", xxhash.Sum64(data))
	o := cacheObj{name: fmt.Sprintf("%s-%d.safetensors", h, len(data)), bytes: int64(len(data)), hash: h, key: "s0.safetensors", what: "shard"}
	step := func(what string, pos int, wait bool, want bool, downloads int64) {
		t.Helper()
		if err := rc.ensure(ctx, o, pos, wait); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if rc.present(o) != want || rc.downloads.Load() != downloads {
			t.Fatalf("%s: present %v after %d downloads, want %v after %d", what, rc.present(o), rc.downloads.Load(), want, downloads)
		}
	}
	step("a prefetch of an object no window needs", 0, false, false, 0)
	rc.planUse(o, 3)
	step("a prefetch for window 3", 1, false, true, 1)
	rc.opening(3, []cacheObj{o})                  // window 3, its last use, opens
	rc.setMapped(o, false)                        // and is done with it
	if err := os.Remove(rc.path(o)); err != nil { // evicted
		t.Fatal(err)
	}
	step("a late prefetch for window 3, which the reader has passed", 2, false, false, 1)
	step("the reader's own fetch", 3, true, true, 2)
}
