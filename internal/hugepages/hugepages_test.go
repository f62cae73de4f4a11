package hugepages

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// vmFlags is VmFlags for a test.
func vmFlags(t *testing.T, p uintptr) string {
	t.Helper()
	f, err := VmFlags(p)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestAdviseMarksTheHeap checks, on this machine's setting, that the
// mechanism advises the mapping a later large heap allocation lands in
// (the kernel shows it as "hg" in /proc/self/smaps) where the setting is
// "madvise", and does nothing where it is not; and that Advise does
// nothing where huge pages are not worthwhile (free page reporting and
// cheap 4 KiB faults).
func TestAdviseMarksTheHeap(t *testing.T) {
	mode := Mode()
	worth, why := Worthwhile()
	t.Logf("transparent huge pages: %q; free page reporting: %v; a 4 KiB fault: %v; worthwhile: %v %s", mode, FreePageReporting(), SmallFaultCost(), worth, why)
	reporting := FreePageReporting()
	if worth != (mode == "madvise" && (!reporting || SmallFaultCost() >= SmallFaultThreshold)) {
		t.Fatalf("Worthwhile says %v (%s) with the setting %q", worth, why, mode)
	}
	if !worth {
		stop, reason := Advise(256 << 20)
		if n := stop(); n != 0 || reason != why {
			t.Fatalf("Advise advised %d mappings where it is not worthwhile (%s), saying %q", n, why, reason)
		}
	}
	// The mechanism, wherever the setting allows it.
	stop := AdviseGranted(256 << 20)
	// What a run then decodes lands in the room Advise made.
	var bufs [][]byte
	for i := 0; i < 16; i++ {
		bufs = append(bufs, make([]byte, 8<<20))
	}
	p := uintptr(unsafePointer(&bufs[8][0]))
	flags := vmFlags(t, p)
	n := stop()
	if mode != "madvise" {
		if n != 0 {
			t.Fatalf("setting %q: %d mappings advised, want none", mode, n)
		}
		if mode == "never" && strings.Contains(flags, " hg") {
			t.Fatalf("setting %q: the heap is advised: %s", mode, flags)
		}
		return
	}
	if n == 0 {
		t.Fatal("no mapping advised")
	}
	if !strings.Contains(flags, " hg") {
		t.Fatalf("a heap allocation after Advise is in a mapping without huge pages advised: %s", flags)
	}
	runtime.KeepAlive(bufs)
	if stop() != n {
		t.Fatal("a second stop changed the count")
	}
}

// vmRSS is this process's resident set, in bytes.
func vmRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

var kept [][]byte

// TestAdviseTouchesNoRoom checks that the room Advise grows the heap by
// is not faulted in, also where the heap has freed memory (as a run's has,
// after the plan decoded its sample). Made as one object, the room was
// zeroed whole by the runtime, 1 GiB resident, in most runs of this test.
//
// The bound is a quarter of the room, not the freed memory and one piece
// (128 MiB): once advised, any 2 MiB range with one resident page may be
// faulted or collapsed (khugepaged, max_ptes_none 511 by default) into a
// whole huge page, so the resident set grows by a few MiB more than was
// touched, as it did on a CI machine (129 MiB). A room zeroed whole is
// 1 GiB.
func TestAdviseTouchesNoRoom(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's shadow of the room is resident: the resident set cannot tell whether the room was touched")
	}
	for i := 0; i < 96; i++ {
		b := make([]byte, 1<<20)
		for j := range b {
			b[j] = 1
		}
		if i%8 == 0 {
			kept = append(kept, b) // holes between what stays live
		}
	}
	runtime.GC()
	before := vmRSS(t)
	stop := AdviseGranted(1 << 30)
	after := vmRSS(t)
	stop()
	t.Logf("setting %q: resident %d MiB before Advise(1 GiB), %d MiB after", Mode(), before>>20, after>>20)
	if after-before > 256<<20 {
		t.Fatalf("Advise(1 GiB) faulted in %d MiB", (after-before)>>20)
	}
	// A second Advise in the same process (a worker's next task) finds the
	// first's room free in the heap and grows nothing: before, it grew the
	// heap over the freed room, zeroing what it landed on (22 MiB more
	// resident here, against 0-3 MiB now over eight runs). The bound
	// leaves room for khugepaged's collapses, as above.
	stop = AdviseGranted(1 << 30)
	again := vmRSS(t)
	stop()
	t.Logf("resident %d MiB after a second Advise(1 GiB)", again>>20)
	if again-after > 12<<20 {
		t.Fatalf("a second Advise(1 GiB) faulted in %d MiB", (again-after)>>20)
	}
	runtime.KeepAlive(kept)
}

// TestDecide checks Worthwhile's rule on the hosts it was measured on:
// huge pages where the setting is "madvise", except where the kernel
// reports free pages to a hypervisor and a 4 KiB fault is cheap.
func TestDecide(t *testing.T) {
	for _, c := range []struct {
		host      string
		mode      string
		reporting bool
		fault     time.Duration
		want      bool
		why       string // part of the reason given
	}{
		{"a host without free page reporting", "madvise", false, 0, true, ""},
		{"a Firecracker VM, huge pages 25% slower", "madvise", true, 2700 * time.Nanosecond, false, "costs only 2.7 us"},
		{"a PVM guest, huge pages 18% faster", "madvise", true, 12 * time.Microsecond, true, ""},
		{"the fault not measured", "madvise", true, 0, false, "free page reporting"},
		{"the setting always", "always", false, 0, false, `"always"`},
		{"the setting never", "never", true, 12 * time.Microsecond, false, `"never"`},
	} {
		got, why := decide(c.mode, c.reporting, c.fault)
		if got != c.want || !strings.Contains(why, c.why) || (got && why != "") || (!got && why == "") {
			t.Errorf("%s: decide = %v, %q; want %v with %q", c.host, got, why, c.want, c.why)
		}
	}
}
