package hugepages

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSmallFaultCost compares the probe with the kernel's own accounts
// of a larger touch: the thread's CPU time (getrusage) over its minor
// faults, faulting 64 MiB of fresh memory in 4 KiB pages. The two must
// agree within 3x either way (the probe takes the cheapest of its chunks,
// and the rusage figure includes the loop's own work).
func TestSmallFaultCost(t *testing.T) {
	probe := SmallFaultCost()
	if probe <= 0 {
		t.Fatal("no 4 KiB fault cost measured")
	}
	if again := SmallFaultCost(); again != probe {
		t.Fatalf("measured twice: %v then %v", probe, again)
	}
	const n = 64 << 20
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	if err := unix.Madvise(b, unix.MADV_NOHUGEPAGE); err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var r0, r1 unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &r0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i += 4 << 10 {
		b[i] = 1
	}
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &r1); err != nil {
		t.Fatal(err)
	}
	faults := r1.Minflt - r0.Minflt
	cpu := time.Duration(r1.Utime.Nano() + r1.Stime.Nano() - r0.Utime.Nano() - r0.Stime.Nano())
	if faults < n/(4<<10)/2 {
		t.Fatalf("touching 64 MiB made %d minor faults: not 4 KiB pages", faults)
	}
	each := cpu / time.Duration(faults)
	t.Logf("probe %v a fault; 64 MiB: %d faults in %v CPU, %v each", probe, faults, cpu, each)
	if probe > 3*each || each > 3*probe {
		t.Fatalf("the probe says %v a fault, the kernel's accounts %v", probe, each)
	}
}

// TestFreshMemoryCost: the per-MiB figures are measured (above zero), the
// 4 KiB one is the 4 KiB fault's cost scaled to the 256 pages of a MiB
// (within 3x: separate probes), and neither is absurd (a second a MiB).
func TestFreshMemoryCost(t *testing.T) {
	small, huge := FreshMemoryCost(false), FreshMemoryCost(true)
	t.Logf("fresh memory: %v a MiB in 4 KiB pages, %v with huge pages; a 4 KiB fault %v", small, huge, SmallFaultCost())
	if small <= 0 || huge <= 0 {
		t.Fatalf("not measured: %v in 4 KiB pages, %v with huge pages", small, huge)
	}
	if small > time.Second || huge > time.Second {
		t.Fatalf("%v and %v a MiB: the probe is not per MiB", small, huge)
	}
	if want := 256 * SmallFaultCost(); small > 3*want || want > 3*small {
		t.Fatalf("%v a MiB in 4 KiB pages, but 256 faults of %v", small, SmallFaultCost())
	}
}
