package loader

import (
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// lockObjs locks the named objects of the cache folder dir (blocking until
// no other reader holds any of them) and returns the unlock: an open of
// the folder's blocks.lock holding a write lock on each object's byte.
// Each call opens the file anew: locks of one open file description do
// not exclude each other.
func lockObjs(dir string, names []string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, objLocks), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for _, off := range lockOffsets(names) {
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: off, Len: 1}
		for {
			err = unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLKW, &lk)
			if err != unix.EINTR {
				break
			}
		}
		if err != nil {
			f.Close()
			return nil, err
		}
	}
	return func() { f.Close() }, nil // closing the description releases its locks
}
