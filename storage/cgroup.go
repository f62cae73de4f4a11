package storage

import (
	"bufio"
	"bytes"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
)

// DropBehindOn reports whether the local files relayout writes go through
// DropBehind: when the process is in a memory cgroup (a Kubernetes pod, a
// systemd unit with MemoryMax) whose limit, or an ancestor's, is below
// the machine's memory, so that the page cache it fills counts against
// that limit. RELAYOUT_DROP_BEHIND=1 or 0 overrides the check.
func DropBehindOn() bool { return dropBehindOn() }

var dropBehindOn = sync.OnceValue(func() bool {
	switch os.Getenv("RELAYOUT_DROP_BEHIND") {
	case "1", "true", "on":
		return true
	case "0", "false", "off":
		return false
	}
	lim := CgroupMemoryLimit()
	return lim > 0 && lim < memTotal()
})

// CgroupMemoryLimit returns the lowest memory limit of the process's
// memory cgroup and its ancestors (cgroup v2 memory.max, v1
// memory.limit_in_bytes), or 0 when none is set or none is readable.
func CgroupMemoryLimit() int64 {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0
	}
	var best int64
	take := func(file string) {
		b, err := os.ReadFile(file)
		if err != nil {
			return
		}
		v, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
		if err == nil && v > 0 && (best == 0 || v < best) {
			best = v
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		// hierarchy-ID:controllers:path
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) != 3 {
			continue
		}
		var root, file string
		switch {
		case f[0] == "0" && f[1] == "":
			root, file = "/sys/fs/cgroup", "memory.max"
		case strings.Contains(","+f[1]+",", ",memory,"):
			root, file = "/sys/fs/cgroup/memory", "memory.limit_in_bytes"
		default:
			continue
		}
		for p := path.Clean("/" + f[2]); ; p = path.Dir(p) {
			take(path.Join(root, p, file))
			if p == "/" {
				break
			}
		}
	}
	return best
}

// memTotal is the machine's memory in bytes (/proc/meminfo), or the
// largest int64 when unknown.
func memTotal() int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 1<<63 - 1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				return kb << 10
			}
		}
	}
	return 1<<63 - 1
}
