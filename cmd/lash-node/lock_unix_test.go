//go:build unix

package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// flock locks belong to an open file, so two lockData calls in one process
// contend as two processes do.
func TestLockData(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	lock := filepath.Join(dir, "lash-node.lock")
	release, err := lockData(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockData(dir); err == nil || !strings.Contains(err.Error(), "another lash-node uses --data") {
		t.Fatalf("second lock: %v", err)
	}
	if _, err := os.Stat(lock); err != nil {
		t.Fatalf("a refused lock removed the holder's file: %v", err)
	}
	release()
	if _, err := os.Stat(lock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lock file after release: %v", err)
	}
	release, err = lockData(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	release()
}

// Lockers that take and release the lock as fast as they can never hold it
// two at once, although each release removes the file others may have
// open: a locker that locked a removed file notices and tries again.
func TestLockDataExcludesUnderContention(t *testing.T) {
	dir := t.TempDir()
	const lockers, rounds = 8, 300
	var holders, held, refused atomic.Int64
	var wg sync.WaitGroup
	for range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				release, err := lockData(dir)
				if err != nil {
					refused.Add(1)
					continue
				}
				if n := holders.Add(1); n != 1 {
					t.Errorf("%d lockers hold the lock at once", n)
				}
				held.Add(1)
				holders.Add(-1)
				release()
			}
		}()
	}
	wg.Wait()
	if held.Load() == 0 || refused.Load() == 0 {
		t.Errorf("held %d times, refused %d times: no contention", held.Load(), refused.Load())
	}
	if _, err := os.Stat(filepath.Join(dir, "lash-node.lock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file after the last release: %v", err)
	}
}
