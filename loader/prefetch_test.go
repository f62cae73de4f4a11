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

// TestLatePrefetch: a prefetch fetches an object only while the reader
// will still open a window that needs it, and evicts nothing needed before
// that window. A prefetch that waited for room while the reader fetched,
// read and evicted the object itself used to download it a second time,
// for nothing (CI: 30 GETs for 29 shards, reproduced about once in 100
// epochs on one core beside two busy processes). The reader's own fetch
// (wait) is never skipped.
func TestLatePrefetch(t *testing.T) {
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

	// A late prefetch evicts nothing needed before what it fetches: the
	// cache holds one object, o, needed at window 5; p, needed at window
	// 7, is fetched by a prefetch that planned for window 2 (the reader
	// went on meanwhile). Before, it evicted o (needed after window 2)
	// for p (needed later still), and o was downloaded again.
	rc.setMapped(o, false)
	rc.planUse(o, 5)
	data2 := []byte("another shard's bytes")
	if err := os.WriteFile(filepath.Join(store, "s1.safetensors"), data2, 0o644); err != nil {
		t.Fatal(err)
	}
	h2 := fmt.Sprintf("%016x", xxhash.Sum64(data2))
	p := cacheObj{name: fmt.Sprintf("%s-%d.safetensors", h2, len(data2)), bytes: int64(len(data2)), hash: h2, key: "s1.safetensors", what: "shard"}
	rc.planUse(p, 7)
	rc.limit = o.bytes + ledgerSlack + 4 // o, not both
	rc.lastScan.Store(0)                 // list the folder: its true usage
	if err := rc.ensure(ctx, p, 2, false); err != errNoRoom {
		t.Fatalf("a late prefetch of an object needed at window 7, the cache full of one needed at 5: %v, want errNoRoom", err)
	}
	if !rc.present(o) || rc.present(p) {
		t.Fatalf("o present %v, p present %v: the prefetch evicted o, needed sooner than p", rc.present(o), rc.present(p))
	}
}
