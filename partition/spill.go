package partition

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/relayout/relayout/internal/errs"
)

const spillPrefix = "relayout-spill-"

// NewSpillDir creates this run's spill folder in tmpDir (default: the system
// temp folder) with a pid file, after removing the folders of runs that were
// killed (their pid no longer alive), which could not clean up after
// themselves.
func NewSpillDir(tmpDir string) (string, error) {
	if tmpDir == "" {
		tmpDir = os.TempDir()
	}
	removeStaleSpills(tmpDir)
	dir, err := os.MkdirTemp(tmpDir, spillPrefix)
	if err != nil {
		return "", errs.TransientErr(fmt.Errorf("create spill folder in %s: %w", tmpDir, err))
	}
	if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(dir)
		return "", errs.TransientErr(fmt.Errorf("create spill folder in %s: %w", tmpDir, err))
	}
	return dir, nil
}

func removeStaleSpills(tmpDir string) {
	ents, err := os.ReadDir(tmpDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), spillPrefix) {
			continue
		}
		dir := filepath.Join(tmpDir, e.Name())
		data, err := os.ReadFile(filepath.Join(dir, "pid"))
		if err != nil {
			continue // being created, or not ours
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || pid <= 0 {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			os.RemoveAll(dir)
		}
	}
}
