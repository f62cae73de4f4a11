package storage

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/relayout/relayout/internal/testutil"
)

// resident counts the pages of the file at path that are in the page cache.
func resident(t *testing.T, path string) (cached, total int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	for _, v := range vec {
		if v&1 != 0 {
			cached++
		}
	}
	return cached, len(vec)
}

// writeAll writes 8 MiB in 100 KiB writes.
func writeAll(t *testing.T, w io.WriteCloser) {
	t.Helper()
	buf := make([]byte, 100<<10)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	for n := 0; n < 8<<20; n += len(buf) {
		if _, err := w.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// The bytes written through DropBehind and NewWriter (a local folder)
// are not in the page cache once the file is closed; the same bytes
// written plainly are (the control: a file system that keeps every page,
// such as tmpfs, fails it rather than passing the test by accident).
func TestDropBehindLeavesNothingCached(t *testing.T) {
	defer func(f func() bool) { dropBehindOn = f }(dropBehindOn)
	dropBehindOn = func() bool { return true }
	dir := t.TempDir()
	plain, _ := os.Create(filepath.Join(dir, "plain"))
	writeAll(t, plain)
	if c, n := resident(t, filepath.Join(dir, "plain")); c < n*9/10 {
		t.Fatalf("control: a plain write left %d of %d pages cached; this file system drops them anyway", c, n)
	}
	want, _ := os.ReadFile(filepath.Join(dir, "plain"))
	f, _ := os.Create(filepath.Join(dir, "spill"))
	writeAll(t, NewDropBehind(f))
	loc, err := OpenDir(context.Background(), dir, false)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(context.Background(), loc, "out/part", nil)
	if err != nil {
		t.Fatal(err)
	}
	writeAll(t, w)
	for _, name := range []string{"spill", "out/part"} {
		p := filepath.Join(dir, name)
		c, n := resident(t, p)
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: the bytes differ from a plain write's (%v)", name, err)
		}
		t.Logf("%s: %d of %d pages cached", name, c, n)
		if c > 2 {
			t.Errorf("%s: %d of %d pages still cached after a drop-behind write", name, c, n)
		}
	}
	if dropDirty.Load() != 0 {
		t.Errorf("%d dirty bytes still counted after every file closed", dropDirty.Load())
	}
}

// Off (no memory cgroup limit), the same writers leave the page cache be.
func TestDropBehindOffCaches(t *testing.T) {
	defer func(f func() bool) { dropBehindOn = f }(dropBehindOn)
	dropBehindOn = func() bool { return false }
	dir := t.TempDir()
	f, _ := os.Create(filepath.Join(dir, "spill"))
	writeAll(t, NewDropBehind(f))
	if c, n := resident(t, filepath.Join(dir, "spill")); c < n*9/10 {
		t.Fatalf("off: %d of %d pages cached", c, n)
	}
}

// CgroupMemoryLimit, read by a process placed in a memory cgroup (as a
// pod's container is), is that cgroup's limit, and turns drop-behind on.
func TestCgroupMemoryLimitInACgroup(t *testing.T) {
	if os.Getenv("RELAYOUT_CGROUP_HELPER") == "1" {
		fmt.Println(CgroupMemoryLimit(), DropBehindOn())
		return
	}
	const limit = 200 << 20
	name := fmt.Sprintf("relayout-storage-test-%d", os.Getpid())
	var dir, file string
	if ctl, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(string(ctl), "memory") {
		dir, file = filepath.Join("/sys/fs/cgroup", name), "memory.max"
	} else {
		dir, file = filepath.Join("/sys/fs/cgroup/memory", name), "memory.limit_in_bytes"
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		testutil.Missing(t, "cannot make a memory cgroup (needs root and the memory controller): %v", err)
	}
	defer func() {
		for i := 0; i < 50 && os.Remove(dir) != nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
	}()
	if err := os.WriteFile(filepath.Join(dir, file), []byte(fmt.Sprint(limit)), 0o644); err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	cmd := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && exec "$2" -test.run '^TestCgroupMemoryLimitInACgroup$'`, "sh", dir, exe)
	cmd.Env = append(os.Environ(), "RELAYOUT_CGROUP_HELPER=1", "RELAYOUT_DROP_BEHIND=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got := strings.Fields(string(out)); len(got) < 2 || got[0] != fmt.Sprint(limit) || got[1] != "true" {
		t.Fatalf("in a %d-byte memory cgroup: CgroupMemoryLimit, DropBehindOn = %q, want %d true", limit, out, limit)
	}
}
