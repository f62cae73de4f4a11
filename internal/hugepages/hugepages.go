// Package hugepages asks the kernel to back the Go heap with transparent
// huge pages while a run holds a large decoded table in memory.
//
// Why: a run that sorts a table in memory faults in every page of its heap
// once (about 180,000 4 KiB faults for the 1M-row generated log, 700 MB).
// On virtual machines a fault costs several microseconds, so faults were a
// quarter of the run's CPU time (1.5 of 6.3 s). With 2 MiB pages there are
// a few hundred, and fewer TLB misses while gathering. Most Linux hosts
// set transparent huge pages to "madvise", and Go's runtime no longer
// advises its heap (since Go 1.21.1), so the heap gets 4 KiB pages unless
// the process asks.
//
// How: Go maps its heap a few MiB at a time as it grows, and each new
// mapping starts without the advice (the runtime maps with MAP_FIXED, which
// drops it). So Advise first grows the heap by the bytes the caller expects
// to use, in allocations it never touches (no page is faulted in), and
// advises the heap's mappings; the allocations are then dropped, and Go's page
// allocator, which reuses the lowest free addresses first, places the
// table there. A goroutine also advises mappings added later, on a short
// tick. Huge pages make the resident set coarser (about 10% larger
// measured), so callers use this only where memory is not tight.
//
// Not in a VM whose kernel gives free memory back to the hypervisor (free
// page reporting, virtio-balloon): it reports every free block of a huge
// page's size or more, and the hypervisor drops its backing, so every huge
// page the process faults in is backed afresh by the host, 2 MiB at a
// time, while 4 KiB pages mostly come from memory the guest freed but did
// not report. Measured on such a VM (Firecracker, nested): the in-memory
// run of the 1M-row log faulted in 268 huge pages with 1.3 s more system
// time, 2.9 s against 2.3 s in 4 KiB pages (docs/benchmarks.md). Unless
// a 4 KiB fault is itself dear there: on another VM that reports free
// pages (a PVM guest) a 4 KiB fault cost 10-15 us of CPU, so 512 of them
// cost more than the host's backing of a huge page, and the same run took
// 2.25-2.35 s with huge pages against 2.77-2.92 s without. Where free page
// reporting is on, Worthwhile therefore measures one 4 KiB fault's cost
// (about 1 MiB of faults, once per process) and asks for huge pages where
// it is at least SmallFaultThreshold.
package hugepages

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"
)

// room is the largest room an Advise of this process has made.
var (
	roomMu sync.Mutex
	room   int64
)

// Tick is how often new heap mappings are advised: the heap grows by a
// 64 MiB arena in about 100 ms while a table is decoded.
const Tick = 10 * time.Millisecond

// Mode reads the kernel's transparent huge page setting: "always",
// "madvise" or "never" ("" where there is none).
func Mode() string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.IndexByte(s, '['); i >= 0 {
		if j := strings.IndexByte(s[i:], ']'); j > 0 {
			return s[i+1 : i+j]
		}
	}
	return ""
}

// FreePageReporting reports whether the kernel gives free memory back to
// a hypervisor (/sys/module/page_reporting: reported_kib above 0).
func FreePageReporting() bool {
	b, err := os.ReadFile("/sys/module/page_reporting/parameters/reported_kib")
	if err != nil {
		return false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return err == nil && n > 0
}

// SmallFaultThreshold is the CPU cost of one 4 KiB page fault from which
// huge pages pay even where the host backs each one afresh (free page
// reporting). Where they lost, a huge page's fault cost about 5 ms, 2.4 us
// for each 4 KiB it covers, and a 4 KiB fault about 2.7 us; where they
// won, a 4 KiB fault cost 10-15 us (docs/benchmarks.md). The threshold
// sits between, over twice the dearest huge page measured per 4 KiB.
const SmallFaultThreshold = 6 * time.Microsecond

// The probe: probeChunks chunks of probePages 4 KiB pages (1 MiB).
const (
	probeChunks = 2
	probePages  = 128
)

var (
	smallFaultOnce sync.Once
	smallFault     time.Duration
)

// SmallFaultCost is the CPU time one 4 KiB page fault of fresh anonymous
// memory costs this process, measured the first time it is asked for (a
// 1 MiB probe: 1-4 ms), or 0 where it cannot be measured.
func SmallFaultCost() time.Duration {
	smallFaultOnce.Do(func() { smallFault = smallFaultCost() })
	return smallFault
}

// FreshMemoryCost is the CPU time the first write to each page of 1 MiB
// of fresh anonymous memory costs this process now, in 4 KiB pages or
// (huge) advised for transparent huge pages; measured on every call (1
// MiB, or 8 MiB for huge pages), 0 where it cannot be. On ordinary Linux
// it is a few tenths of a millisecond; on a guest whose page faults trap
// to the host, ten times that (docs/benchmarks.md), which every process
// pays for each MiB its peak memory reaches.
func FreshMemoryCost(huge bool) time.Duration { return freshMemoryCost(huge) }

// Worthwhile reports whether Advise would ask for huge pages here, and if
// not, why. Where the kernel reports free pages to a hypervisor, it
// measures what a 4 KiB fault costs (SmallFaultCost) to decide.
func Worthwhile() (bool, string) {
	mode := Mode()
	reporting := mode == "madvise" && FreePageReporting()
	var cost time.Duration
	if reporting {
		cost = SmallFaultCost()
	}
	return decide(mode, reporting, cost)
}

// decide is Worthwhile's rule: the kernel's setting, whether it reports
// free pages to a hypervisor, and (where it does) a 4 KiB fault's cost.
func decide(mode string, reporting bool, smallFault time.Duration) (bool, string) {
	switch {
	case mode != "madvise":
		return false, fmt.Sprintf("the kernel's transparent huge page setting is %q, not \"madvise\"", mode)
	case reporting && smallFault < SmallFaultThreshold:
		return false, fmt.Sprintf("the kernel reports free memory to a hypervisor (free page reporting), so a huge page is backed afresh by the host, and a 4 KiB page fault costs only %.1f us here (huge pages pay from %.0f us)",
			float64(smallFault)/float64(time.Microsecond), float64(SmallFaultThreshold)/float64(time.Microsecond))
	}
	return true, ""
}

// Advise starts advising the heap, having grown it by expect bytes (0:
// not), and returns a function that stops it and reports how many
// mappings were advised. It does nothing (its stop reports 0) where
// Worthwhile says no, and returns Worthwhile's reason then: with the
// setting "always" the heap gets huge pages anyway, with "never" it cannot,
// and with free page reporting and cheap 4 KiB faults they cost more than
// they save.
func Advise(expect int64) (stop func() int, why string) {
	if ok, why := Worthwhile(); !ok {
		return func() int { return 0 }, why
	}
	return AdviseGranted(expect), ""
}

// AdviseGranted is Advise wherever the setting is "madvise", whether or
// not Worthwhile says huge pages pay (--huge-pages on; the tests' way to
// the mechanism on any such host).
func AdviseGranted(expect int64) (stop func() int) {
	if Mode() != "madvise" {
		return func() int { return 0 }
	}
	base := heapBase()
	if base == 0 {
		return func() int { return 0 }
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	advised := map[uintptr]uintptr{}
	pass := func() {
		for _, m := range anonMappings(base) {
			if advised[m[0]] == m[1] {
				continue
			}
			if madviseHuge(m[0], m[1]-m[0]) == nil {
				mu.Lock()
				advised[m[0]] = m[1]
				mu.Unlock()
			}
		}
	}
	// Memory the heap holds free already takes the table first (Go reuses
	// the lowest free pages), and growing over it would zero it: a second
	// Advise in one process (a worker running a list of tasks) zeroed,
	// and so faulted in, the room the first had left. Nor does a later
	// call grow the heap for what an earlier one made room for: the
	// earlier call's pieces filled the heap's free pages before they grew
	// it, so its room is less than it asked by what was free then, and a
	// second call of the same size found 240 MiB "missing" of 1 GiB and
	// zeroed it over freed pages.
	roomMu.Lock()
	if expect <= room {
		expect = 0
	} else {
		room = expect
	}
	roomMu.Unlock()
	expect -= heapSpare()
	if expect >= 1<<20 {
		// Mapped, never written: it costs address space, not memory. In
		// small pieces, because Go zeroes a whole large object when any of
		// its pages was used before, and the heap's free pages come first:
		// one object of the whole size, placed over memory the heap had
		// freed, was zeroed (faulted in, 4 KiB at a time) whole, 1 GiB of
		// it, in about one run in ten; a 32 MiB piece over a 20 MiB hole
		// still faulted in 12 MiB of fresh memory (about 0.1 s of a
		// distributed map task's 0.4). A 1 MiB piece over freed memory is
		// zeroed alone, and the heap's existing mappings are advised
		// first, so what that zeroing faults in comes as huge pages.
		const piece = 1 << 20
		pass()
		var room [][]byte
		for left := expect; left > 0; left -= piece {
			room = append(room, make([]byte, min(piece, left)))
		}
		pass()
		runtime.KeepAlive(room)
		runtime.GC() // frees it for the table
	}
	pass()
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(Tick)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				pass()
			}
		}
	}()
	var once sync.Once
	return func() int {
		once.Do(func() { close(done); wg.Wait() })
		mu.Lock()
		defer mu.Unlock()
		return len(advised)
	}
}

// heapSpare is what the heap holds free: free pages and pages returned
// to the kernel, still mapped.
func heapSpare() int64 {
	ss := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(ss)
	var n int64
	for _, s := range ss {
		if s.Value.Kind() == metrics.KindUint64 {
			n += int64(s.Value.Uint64())
		}
	}
	return n
}

// heapBase returns the start of the mapping that holds a fresh heap
// object: the heap's arenas lie at and above it.
func heapBase() uintptr {
	probe := new([1 << 20]byte) // too large for the stack
	p := uintptr(unsafePointer(probe))
	runtime.KeepAlive(probe)
	for _, m := range Mappings() {
		if m.Start <= p && p < m.End {
			return m.Start
		}
	}
	return 0
}

// A Mapping is one line of /proc/self/maps: the range [Start, End), its
// permissions ("rw-p") and its path ("" for anonymous memory).
type Mapping struct {
	Start, End  uintptr
	Perms, Path string
}

// ParseMapping parses a line of /proc/self/maps, or a mapping's first line
// in /proc/self/smaps.
func ParseMapping(line string) (Mapping, bool) {
	fs := strings.Fields(line)
	if len(fs) < 5 {
		return Mapping{}, false
	}
	lo, hi, ok := strings.Cut(fs[0], "-")
	if !ok {
		return Mapping{}, false
	}
	s, err1 := strconv.ParseUint(lo, 16, 64)
	e, err2 := strconv.ParseUint(hi, 16, 64)
	if err1 != nil || err2 != nil || e <= s {
		return Mapping{}, false
	}
	m := Mapping{Start: uintptr(s), End: uintptr(e), Perms: fs[1]}
	if len(fs) > 5 {
		m.Path = fs[5]
	}
	return m, true
}

// VmFlags returns the VmFlags line of /proc/self/smaps for the mapping
// holding address p: "hg" in it means the mapping is advised for huge
// pages.
func VmFlags(p uintptr) (string, error) {
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return "", err
	}
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		if m, ok := ParseMapping(l); ok {
			in = m.Start <= p && p < m.End
			continue
		}
		if in && strings.HasPrefix(l, "VmFlags:") {
			return l, nil
		}
	}
	return "", fmt.Errorf("no mapping in /proc/self/smaps holds %#x", p)
}

// Mappings lists the process's memory mappings (/proc/self/maps); nil where
// there is no such file.
func Mappings() []Mapping {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []Mapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m, ok := ParseMapping(sc.Text()); ok {
			out = append(out, m)
		}
	}
	return out
}

// anonMappings returns the private anonymous read-write mappings from base
// up to 1 TiB above it, as [start, end) pairs: the heap's arenas.
func anonMappings(base uintptr) [][2]uintptr {
	var out [][2]uintptr
	for _, m := range Mappings() {
		if m.Start < base || m.Start-base >= 1<<40 || m.Perms != "rw-p" || m.Path != "" {
			continue
		}
		out = append(out, [2]uintptr{m.Start, m.End})
	}
	return out
}
