package loader

import (
	"runtime"
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
	flags, err := hugepages.VmFlags(uintptr(unsafe.Pointer(&buf[32<<20])))
	if err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(buf)
	if !strings.Contains(flags, " hg") {
		t.Fatalf("a 64 MiB buffer allocated after AdviseHugePages is not in a mapping advised for huge pages: %s", flags)
	}
}
