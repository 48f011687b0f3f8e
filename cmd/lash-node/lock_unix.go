//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockData takes the data directory for this process: two nodes on one
// directory would run two servers on one JetStream store. The lock goes
// with the process, however it ends; release also removes the lock file.
//
// Removing the file opens a gap that lockData closes: a process that
// opened the file just before its holder removed it locks a file no path
// names any more, while a third process creates and locks a new one. So
// after flock succeeds, the path must still name the file locked; if not,
// lockData tries once more. The holder removes the file before it closes
// (and so unlocks) it.
func lockData(dir string) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "lash-node.lock")
	for range 2 {
		f, err := lockFile(path, dir)
		if err != nil {
			return nil, err
		}
		if f != nil {
			return func() {
				_ = os.Remove(path)
				_ = f.Close()
			}, nil
		}
	}
	return nil, fmt.Errorf("lock %s: the file was replaced twice while it was being locked", path)
}

// lockFile opens and locks path. It returns nil and no error when the path
// no longer names the file it locked.
func lockFile(path, dir string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another lash-node uses --data %s (give each node its own)", dir)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	locked, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	named, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		f.Close()
		return nil, nil
	case err != nil:
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	case !os.SameFile(locked, named):
		f.Close()
		return nil, nil
	}
	return f, nil
}
