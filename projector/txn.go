package projector

import (
	"errors"
	"io"

	"github.com/cockroachdb/pebble/v2"
	"github.com/vmihailenco/msgpack/v5"
)

// Txn is the write side a fold sees while applying messages. Keys are
// scoped to the fold. Reads see what earlier batches wrote, not this
// batch's own writes: a fold keeps what it needs between messages in the
// memo (SetMemo), which lives for the whole run.
type Txn struct {
	db   *pebble.DB
	b    *pebble.Batch
	fold string
	// memo lives for the whole run, one map per fold; dirty names what
	// this Txn changed, per fold.
	memo  map[string]map[string]any
	dirty map[string]map[string]struct{}
	// settle waits for the previous batch's commit, so reads see it.
	settle func() error
	kbuf   []byte
	// aside holds the payloads of the quarantine entries this Txn wrote,
	// which its batch holds and the store does not show yet.
	aside map[string][]byte
}

func (p *Projector) newTxn(memo map[string]map[string]any, settle func() error) *Txn {
	return &Txn{db: p.db, b: p.db.NewBatch(), memo: memo, dirty: map[string]map[string]struct{}{}, settle: settle}
}

func foldKey(fold string, key []byte) []byte {
	k := make([]byte, 0, 2+len(fold)+1+len(key))
	k = append(k, 'f', '/')
	k = append(k, fold...)
	k = append(k, '/')
	return append(k, key...)
}

// Get returns a copy of the value at key as earlier batches left it, or
// ErrNotFound.
func (t *Txn) Get(key []byte) ([]byte, error) {
	if err := t.settle(); err != nil {
		return nil, err
	}
	return get(t.db, foldKey(t.fold, key))
}

// Set writes value at key. The batch copies both, so callers may reuse
// their buffers.
func (t *Txn) Set(key, value []byte) error { return t.b.Set(t.scoped(key), value, nil) }

// Delete removes key.
func (t *Txn) Delete(key []byte) error { return t.b.Delete(t.scoped(key), nil) }

// scoped builds the fold's key in a buffer reused across writes.
func (t *Txn) scoped(key []byte) []byte {
	t.kbuf = append(append(append(append(t.kbuf[:0], 'f', '/'), t.fold...), '/'), key...)
	return t.kbuf
}

// DeletePrefix deletes every key of the fold under prefix, those written
// earlier in this Txn included.
func (t *Txn) DeletePrefix(prefix []byte) error {
	full := t.scoped(prefix)
	start := append([]byte(nil), full...)
	return t.b.DeleteRange(start, prefixEnd(start), nil)
}

// Scan calls fn for every key with the prefix as earlier batches left them,
// from the first at or above prefix+from, in order, with the prefix removed.
func (t *Txn) Scan(prefix, from []byte, fn func(key, value []byte) error) error {
	if err := t.settle(); err != nil {
		return err
	}
	full := foldKey(t.fold, prefix)
	it, err := t.db.NewIter(&pebble.IterOptions{LowerBound: append(append([]byte(nil), full...), from...), UpperBound: prefixEnd(full)})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err == nil {
			err = fn(it.Key()[len(full):], v)
		}
		if err != nil {
			it.Close()
			return err
		}
	}
	return it.Close()
}

// Memo is state a fold keeps between messages and batches of one run,
// keyed within the fold: what it cached must equal what it wrote.
func (t *Txn) Memo(key string) (any, bool) {
	v, ok := t.memo[t.fold][key]
	return v, ok
}

// SetMemo caches v under key and marks it changed in this Txn. A nil v
// says the fold deleted what key held: reads in this batch see it gone
// (Memo returns nil, true), and once the batch is written the memo forgets
// key, so what is deleted leaves nothing in memory either.
func (t *Txn) SetMemo(key string, v any) {
	m, d := t.memo[t.fold], t.dirty[t.fold]
	if m == nil {
		m = map[string]any{}
		t.memo[t.fold] = m
	}
	if d == nil {
		d = map[string]struct{}{}
		t.dirty[t.fold] = d
	}
	m[key] = v
	d[key] = struct{}{}
}

// forgetDeleted drops the memo entries this Txn set to nil, once its
// batch holds the deletions: reads after it settle on that batch.
func (t *Txn) forgetDeleted() {
	for fold, keys := range t.dirty {
		m := t.memo[fold]
		for k := range keys {
			if v, ok := m[k]; ok && v == nil {
				delete(m, k)
			}
		}
	}
}

// Changed calls fn for every memo key of the fold set in this Txn.
func (t *Txn) Changed(fn func(key string, v any) error) error {
	m := t.memo[t.fold]
	for k := range t.dirty[t.fold] {
		if err := fn(k, m[k]); err != nil {
			return err
		}
	}
	return nil
}

// getter is what Pebble's DB, snapshots and batches share for point reads.
type getter interface {
	Get(key []byte) ([]byte, io.Closer, error)
}

type iterable interface {
	NewIter(o *pebble.IterOptions) (*pebble.Iterator, error)
}

func get(r getter, key []byte) ([]byte, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	out := append([]byte(nil), v...)
	return out, closer.Close()
}

// getDecoded reads key and decodes its msgpack value.
func getDecoded[T any](r getter, key []byte) (*T, error) {
	v, err := get(r, key)
	if err != nil {
		return nil, err
	}
	var out T
	if err := msgpack.Unmarshal(v, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// scan visits every key with prefix, in order. Keys and values are only
// valid during the call.
func scan(r iterable, prefix []byte, fn func(key, value []byte) error) error {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err == nil {
			err = fn(it.Key(), v)
		}
		if err != nil {
			it.Close()
			return err
		}
	}
	return it.Close()
}

// prefixEnd is the smallest key above every key with prefix.
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}
