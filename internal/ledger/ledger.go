// Package ledger is the append-only file the example tool servers write:
// one JSON line per applied call, at most one per idempotency key.
package ledger

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"sync"
)

// Ledger is an append-only file of JSON lines, one per applied call. It is
// idempotent per key within one process; two processes sharing a file could
// both append (the check and the write are not one atomic step).
type Ledger struct {
	mu   sync.Mutex
	path string
}

// New returns the ledger kept in the file at path.
func New(path string) *Ledger { return &Ledger{path: path} }

type record struct {
	Key   string `json:"key"`
	Entry string `json:"entry"`
}

// Append writes entry unless a record with key is already in the file, and
// reports whether it wrote.
func (l *Ledger) Append(key, entry string) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.OpenFile(l.path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return false, err
	}
	defer f.Close()

	r := bufio.NewReader(f)
	terminated := true
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			terminated = line[len(line)-1] == '\n'
			var rec record
			// A line that does not decode is a write cut short by a crash: that
			// append did not happen.
			if json.Unmarshal(line, &rec) == nil && rec.Key == key {
				return false, nil
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return false, err
		}
	}
	b, err := json.Marshal(record{Key: key, Entry: entry})
	if err != nil {
		return false, err
	}
	b = append(b, '\n')
	if !terminated {
		b = append([]byte{'\n'}, b...) // keep a cut-short line from swallowing this one
	}
	if _, err := f.Write(b); err != nil {
		return false, err
	}
	// The answer says "appended": make it true after a power cut too.
	return true, f.Sync()
}
