package loader

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/relayout/relayout/internal/hugepages"
)

// TestAdviseHugePages checks that where huge pages pay on this host, a
// large buffer allocated after AdviseHugePages lies in a mapping advised
// for them (VmFlags "hg" in /proc/self/smaps), and that elsewhere it says
// why it did not ask.
func TestAdviseHugePages(t *testing.T) {
	worth, reason := hugepages.Worthwhile()
	stop, asked, why := AdviseHugePages(128 << 20)
	defer stop()
	t.Logf("setting %q, worthwhile %v %s", hugepages.Mode(), worth, reason)
	if asked != worth {
		t.Fatalf("asked %v (%s), want %v", asked, why, worth)
	}
	if !asked {
		if why == "" {
			t.Fatal("did not ask and gave no reason")
		}
		return
	}
	if why != "" {
		t.Fatalf("asked and gave a reason: %s", why)
	}
	buf := make([]byte, 64<<20) // what a window's buffers grow by
	flags := vmFlagsOf(t, uintptr(unsafe.Pointer(&buf[32<<20])))
	runtime.KeepAlive(buf)
	if !strings.Contains(flags, " hg") {
		t.Fatalf("a 64 MiB buffer allocated after AdviseHugePages is not in a mapping advised for huge pages: %s", flags)
	}
}

// vmFlagsOf returns the VmFlags line of the mapping holding p.
func vmFlagsOf(t *testing.T, p uintptr) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			lo, hi, _ := strings.Cut(f[0], "-")
			s, err1 := strconv.ParseUint(lo, 16, 64)
			e, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil {
				in = uintptr(s) <= p && p < uintptr(e)
				continue
			}
		}
		if in && strings.HasPrefix(l, "VmFlags:") {
			return l
		}
	}
	t.Fatalf("no mapping holds %#x", p)
	return ""
}
