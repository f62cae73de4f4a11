package loader

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayout/relayout/internal/testutil"
)

// TestObjectLocks: a download's lock on an object excludes another lock on
// it, from this process (another goroutine) and from a Python reader
// (relayout_loader's _lock_objs), and never one on another object.
func TestObjectLocks(t *testing.T) {
	dir := t.TempDir()
	unlock, err := lockObjs(dir, []string{"a.block", "b.block"})
	if err != nil {
		t.Fatal(err)
	}
	// Another object: not held up.
	other := make(chan error, 1)
	go func() {
		u, err := lockObjs(dir, []string{"c.block"})
		if err == nil {
			u()
		}
		other <- err
	}()
	select {
	case err := <-other:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a lock on another object waited for this one")
	}
	// The same object from another goroutine: held up until released.
	got := make(chan struct{})
	go func() {
		u, err := lockObjs(dir, []string{"b.block", "d.block"})
		if err != nil {
			t.Error(err)
		} else {
			u()
		}
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("a second lock on b.block was granted while the first was held")
	case <-time.After(200 * time.Millisecond):
	}
	unlock()
	select {
	case <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("the second lock was not granted after the first was released")
	}

	// A Python reader on the same folder.
	if err := exec.Command("/usr/bin/python3", "-c", "import xxhash").Run(); err != nil {
		testutil.Missing(t, "python3-xxhash not installed (make deps)")
	}
	unlock, err = lockObjs(dir, []string{"a.block"})
	if err != nil {
		t.Fatal(err)
	}
	script := `import sys, types
import relayout_loader as rl
r = types.SimpleNamespace(dir=sys.argv[1])
print("trying", flush=True)
locks = rl._Remote._lock_objs(r, [{"name": "a.block"}])
print("locked", flush=True)
rl._Remote._unlock_objs(rl._Remote, locks)
`
	py := exec.Command("/usr/bin/python3", "-c", script, dir)
	py.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(testutil.Root(), "python"), "PYTHONDONTWRITEBYTECODE=1")
	out, err := py.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	py.Stderr = &stderr
	if err := py.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 2)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	if l := <-lines; l != "trying" {
		unlock()
		py.Wait()
		t.Fatalf("python printed %q: %s", l, stderr.String())
	}
	select {
	case l := <-lines:
		unlock()
		py.Wait()
		t.Fatalf("python printed %q while Go held the lock on a.block: %s", l, stderr.String())
	case <-time.After(300 * time.Millisecond):
	}
	unlock()
	select {
	case l := <-lines:
		if l != "locked" {
			t.Fatalf("python printed %q: %s", l, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("python was not granted the lock after Go released it")
	}
	if err := py.Wait(); err != nil {
		t.Fatalf("python: %v: %s", err, stderr.String())
	}

	// Python's fallback without F_OFD_SETLKW (before 3.9, off Linux): a
	// lock file per object, excluding a second lock on the object and
	// removed when released.
	fallback := `import fcntl, os, sys, threading, time
del fcntl.F_OFD_SETLKW
import relayout_loader as rl
r = object.__new__(rl._Remote)
r.dir = sys.argv[1]
locks = r._lock_objs([{"name": "f.block"}])
got = threading.Event()
def second():
    rl._Remote._unlock_objs(r, r._lock_objs([{"name": "f.block"}, {"name": "g.block"}]))
    got.set()
th = threading.Thread(target=second)
th.start()
if got.wait(0.3):
    sys.exit("a second lock on f.block was granted while the first was held")
r._unlock_objs(locks)
if not got.wait(60):
    sys.exit("the second lock was not granted after the first was released")
left = [n for n in os.listdir(sys.argv[1]) if n.endswith(".lock") and n != "blocks.lock"]
if left:
    sys.exit(f"lock files left: {left}")
print("ok")
`
	if out := testutil.Python(t, "-c", fallback, dir); strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("python fallback printed %q", out)
	}
}

// TestLedgerWrittenInPlace: the ledger is written over its last value at a
// fixed width, never truncated (a truncated file written again is flushed
// on close by ext4), reads back each value however long the last was, and
// reads a ledger an older reader wrote (unpadded) the same.
func TestLedgerWrittenInPlace(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cache.lock"), []byte("77"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, unlock, err := lockFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if v, ok := readLedger(f); !ok || v != 77 {
		t.Fatalf("an unpadded ledger reads %d, %v; want 77", v, ok)
	}
	for _, v := range []int64{1 << 40, 5, 0, 123456789, 9223372036854775807, 3} {
		if err := writeLedger(f, v); err != nil {
			t.Fatal(err)
		}
		got, ok := readLedger(f)
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		if !ok || got != v || st.Size() != ledgerWidth {
			t.Fatalf("after writing %d: read %d, %v; the file is %d bytes, want %d", v, got, ok, st.Size(), ledgerWidth)
		}
	}
}
