package main

import (
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/relayout/relayout/internal/hugepages"
)

// dropInitPages unmaps the pages of the binary's read-only segments (code
// and read-only data) that starting it mapped. Package initialisation (the
// cloud SDKs' among some 970 packages) touches code and data all over a
// 73 MB text and read-only segment, and the kernel maps 64 KiB around each
// touched page: 44 MiB of the binary are resident before relayout reads a
// byte, 6 MiB after this, and about 30 MiB again at the height of a run
// (measured with /proc/PID/smaps_rollup and RELAYOUT_MEMSTATS). Unmapped, they stop counting in the process's
// RSS and become the page cache the kernel reclaims first, so that a run
// at --memory-limit 128MiB peaks at 112 MiB RSS instead of 130. A page used
// again is mapped again from the page cache (a minor fault). Writable
// mappings are left alone: dropping them would lose their contents.
func dropInitPages() {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return
	}
	for _, m := range hugepages.Mappings() {
		if m.Path != exe || strings.ContainsRune(m.Perms, 'w') {
			continue
		}
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, m.Start, m.End-m.Start, unix.MADV_DONTNEED)
	}
}
