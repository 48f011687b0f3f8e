package projector

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/lash-run/lash/streams"
	"github.com/vmihailenco/msgpack/v5"
)

// Errors.
var (
	// ErrPoison: a fold cannot apply a message. Folds wrap it; the
	// projector sets the message aside and goes on.
	ErrPoison = errors.New("projector: message cannot be folded")
	// ErrNotFound: the read model has no such entry.
	ErrNotFound = errors.New("projector: not found")
)

// Flusher is a Fold that keeps state between messages of one Txn (say, a
// head it updates many times); Flush writes it before the Txn commits.
type Flusher interface {
	Flush(tx *Txn) error
}

// Preparer is a Fold whose decoding can run ahead of applying, on the
// reader's goroutine. Prepare must not touch the store; whatever it finds
// wrong it returns inside its result for ApplyPrepared to report, in order.
type Preparer interface {
	Prepare(m *streams.Msg) any
	ApplyPrepared(tx *Txn, m *streams.Msg, prepared any) error
}

// Fold turns stream messages into read-model entries. Apply must be a pure
// function of the message and what the fold wrote before: a rebuild from
// zero must give the same entries. It validates before it writes, and
// returns an error wrapping ErrPoison for a message it cannot apply.
type Fold interface {
	Name() string
	Apply(tx *Txn, m *streams.Msg) error
}

// Versioned is a fold whose entries' layout has a version: a store folded
// under another version is cleared and folded again when it opens.
type Versioned interface {
	Version() int
}

// Source is what the projector reads from.
type Source interface {
	Tail(ctx context.Context, s streams.Stream, filters []string, from uint64, fn func(*streams.Msg, uint64) error) error
	ReadSubjects(ctx context.Context, filters []string, from uint64, fn func(*streams.Msg) error) error
}

// Config says what to fold.
type Config struct {
	Stream streams.Stream
	// Filter selects the stream's subjects to fold; More adds filters.
	Filter string
	More   []string
	Folds  []Fold
	// BatchSize caps the messages applied in one Pebble batch. Default 1024.
	BatchSize int
	// BatchBytes caps what one Pebble batch writes: the batch is committed
	// after the message that took it past. Default DefaultBatchBytes.
	BatchBytes int
	// Verify, if set, vouches for each message before any fold sees it
	// (streams.Client.Verify): one it refuses is set aside in the
	// quarantine under the fold name "signature" and folded by none.
	Verify func(*streams.Msg) error
}

// DefaultBatchBytes keeps a batch well under half the memtable
// (memTableBytes): Pebble holds a larger batch apart until a flush of its
// own, and drops rather than reuses a buffer over 1 MiB. A thousand commits
// of 64 KiB bodies made batches of 64 MiB, most of a burst's heap.
const DefaultBatchBytes = 256 << 10

// memTableBytes is a store's memtable size. Pebble keeps the active
// memtable and the last flushed one (for reuse) fully allocated, with cgo
// in C memory: a node's two stores hold four of them for good.
const memTableBytes = 1 << 20

// SignatureFold names the quarantine entries of messages Config.Verify
// refused.
const SignatureFold = "signature"

// Keys outside the folds' own space.
var (
	keyCursor     = []byte("m/cursor")
	keyLayout     = []byte("m/layout")
	prefixQuarant = []byte("q/")
)

// Projector folds one stream into a Pebble store. The last applied stream
// sequence is written in the same batch as the fold's entries, so a
// projector stopped at any point resumes without applying anything twice.
type Projector struct {
	db  *pebble.DB
	src Source
	cfg Config

	applied atomic.Uint64
	mu      sync.Mutex
	moved   chan struct{} // closed and replaced whenever applied moves
	runMu   sync.Mutex    // one fold loop at a time
}

// blockCacheBytes bounds a store's block cache (Pebble's default is 8
// MiB). A node keeps two stores, and what their caches hold after a burst
// stays resident (with cgo, in C memory); the system's page cache serves
// the reads a small cache misses.
const blockCacheBytes = 2 << 20

// Open opens (or creates) the store in dir.
func Open(dir string, src Source, cfg Config) (*Projector, error) {
	if len(cfg.Folds) == 0 || cfg.Filter == "" {
		return nil, errors.New("projector: a projector needs folds and a subject filter")
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 1024
	}
	if cfg.BatchBytes <= 0 {
		cfg.BatchBytes = DefaultBatchBytes
	}
	opts := &pebble.Options{FormatMajorVersion: pebble.FormatNewest, Logger: quiet{},
		// Small memtables: they stay resident (with cgo, in C memory), so
		// at 64 MiB a burst of writes left tens of MiB behind it. A
		// rebuild flushes more often instead.
		MemTableSize: memTableBytes,
		// No write-ahead log: the cursor lives in the same batches as the
		// entries, so whatever a crash loses, it loses consistently, and
		// the stream folds it again. Close flushes.
		DisableWAL: true}
	for i := range opts.Levels {
		// Folds mostly look up keys that do not exist yet.
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	cache := pebble.NewCache(blockCacheBytes)
	defer cache.Unref()
	opts.Cache = cache
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("projector: open %s: %w", dir, err)
	}
	p := &Projector{db: db, src: src, cfg: cfg, moved: make(chan struct{})}
	if err := p.checkLayout(); err != nil {
		db.Close()
		return nil, err
	}
	cur, err := p.readCursor()
	if err != nil {
		db.Close()
		return nil, err
	}
	p.applied.Store(cur)
	return p, nil
}

// layout names the folds and their versions.
func (p *Projector) layout() []byte {
	var b strings.Builder
	for _, f := range p.cfg.Folds {
		v := 0
		if vf, ok := f.(Versioned); ok {
			v = vf.Version()
		}
		fmt.Fprintf(&b, "%s:%d;", f.Name(), v)
	}
	return []byte(b.String())
}

// checkLayout clears a store folded by other folds or other versions of
// them: it is a cache, and the stream folds it again.
func (p *Projector) checkLayout() error {
	want := p.layout()
	v, closer, err := p.db.Get(keyLayout)
	switch {
	case err == nil:
		same := bytes.Equal(v, want)
		closer.Close()
		if same {
			return nil
		}
	case !errors.Is(err, pebble.ErrNotFound):
		return fmt.Errorf("projector: read layout: %w", err)
	}
	b := p.db.NewBatch()
	if err := b.DeleteRange([]byte{0}, []byte{0xff}, nil); err != nil {
		return err
	}
	if err := b.Set(keyLayout, want, nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("projector: clear for a new layout: %w", err)
	}
	return nil
}

// quiet drops Pebble's informational chatter; its errors go to the default
// slog logger (Pebble also returns them to the calls that hit them).
type quiet struct{}

func (quiet) Infof(string, ...any)      {}
func (quiet) Errorf(f string, a ...any) { slog.Error("pebble: " + fmt.Sprintf(f, a...)) }
func (quiet) Fatalf(f string, a ...any) { panic(fmt.Sprintf("pebble: "+f, a...)) }

func (p *Projector) readCursor() (uint64, error) {
	v, closer, err := p.db.Get(keyCursor)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("projector: read cursor: %w", err)
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("projector: cursor of %d bytes", len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// Close flushes and closes the store.
func (p *Projector) Close() error {
	p.runMu.Lock()
	defer p.runMu.Unlock()
	ferr := p.db.Flush()
	if err := p.db.Close(); err != nil {
		return err
	}
	return ferr
}

// Applied is the last stream sequence folded into the store.
func (p *Projector) Applied() uint64 { return p.applied.Load() }

// Run folds the stream from the cursor on, for as long as ctx lives.
func (p *Projector) Run(ctx context.Context) error { return p.run(ctx, true) }

// CatchUp folds the stream up to its last message at the time of the call.
func (p *Projector) CatchUp(ctx context.Context) error { return p.run(ctx, false) }

// Rebuild forgets everything and folds the stream again from its start.
func (p *Projector) Rebuild(ctx context.Context) error {
	p.runMu.Lock()
	b := p.db.NewBatch()
	if err := b.DeleteRange([]byte{0}, []byte{0xff}, nil); err != nil {
		p.runMu.Unlock()
		return err
	}
	if err := b.Set(keyLayout, p.layout(), nil); err != nil {
		p.runMu.Unlock()
		return err
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		p.runMu.Unlock()
		return fmt.Errorf("projector: clear: %w", err)
	}
	p.advance(0)
	p.runMu.Unlock()
	return p.CatchUp(ctx)
}

// WaitFor blocks until the store has folded stream sequence seq: a reader
// that wrote at seq then reads its own write.
func (p *Projector) WaitFor(ctx context.Context, seq uint64) error {
	for {
		p.mu.Lock()
		ch := p.moved
		p.mu.Unlock()
		if p.Applied() >= seq {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("projector: waiting for sequence %d (at %d): %w", seq, p.Applied(), ctx.Err())
		}
	}
}

// memoLimit bounds the state folds keep between batches of one run: past
// it the memo starts empty again. What a burst left in a larger memo (a
// head or a process per key, small objects spread over the whole heap)
// kept the heap's pages from going back to the system long after.
const memoLimit = 4096

func memoSize(memo map[string]map[string]any) int {
	n := 0
	for _, m := range memo {
		n += len(m)
	}
	return n
}

// item is a message on its way from the reader to the applier, with what
// the folds prepared for it.
type item struct {
	m       *streams.Msg
	preps   []any
	pending uint64
	refused error // by Config.Verify
}

// run folds from the cursor on: tailing for as long as ctx lives, or up to
// the last message stored when it started. Three things overlap: reading
// and decoding (the reader's goroutine), applying (the applier), and the
// Pebble commit of the previous batch.
func (p *Projector) run(ctx context.Context, tail bool) error {
	p.runMu.Lock()
	defer p.runMu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	items := make(chan item, 1024)
	applied := make(chan error, 1)
	from := p.Applied() + 1
	go func() { applied <- p.applyAll(items, tail, cancel) }()

	send := func(m *streams.Msg, pending uint64) error {
		it := item{m: m, pending: pending}
		if p.cfg.Verify != nil {
			it.refused = p.cfg.Verify(m)
		}
		for i, f := range p.cfg.Folds {
			if it.refused != nil {
				break
			}
			if pr, ok := f.(Preparer); ok {
				if it.preps == nil {
					it.preps = make([]any, len(p.cfg.Folds))
				}
				it.preps[i] = pr.Prepare(m)
			}
		}
		select {
		case items <- it:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var err error
	if tail {
		err = p.src.Tail(ctx, p.cfg.Stream, p.filters(), from, send)
	} else {
		err = p.src.ReadSubjects(ctx, p.filters(), from, func(m *streams.Msg) error { return send(m, 1) })
	}
	close(items)
	if aerr := <-applied; aerr != nil {
		return aerr // the applier's failure is why the reader stopped
	}
	return err
}

// applyAll applies items in order and commits them in batches; on failure
// it stops the reader through cancel and drains what is still coming.
func (p *Projector) applyAll(items <-chan item, tail bool, cancel func()) (err error) {
	memo := map[string]map[string]any{}
	var inflight chan error // the commit in flight, if any
	wait := func() error {
		if inflight == nil {
			return nil
		}
		err := <-inflight
		inflight = nil
		return err
	}
	// A batch is taken when a message comes, not ahead: an idle projector
	// would hold a pooled batch's buffer (up to 1 MiB) resident.
	var tx *Txn
	defer func() {
		if werr := wait(); err == nil && werr != nil {
			err = fmt.Errorf("projector: commit: %w", werr)
		}
		if tx != nil {
			tx.b.Close()
		}
		if err != nil {
			cancel()
			for range items {
			}
		}
	}()
	var open []item // an atomic batch whose commit message has not come yet
	cursor, n := p.Applied(), 0
	flush := func() error {
		if n == 0 {
			return nil
		}
		for _, f := range p.cfg.Folds {
			if fl, ok := f.(Flusher); ok {
				tx.fold = f.Name()
				if err := fl.Flush(tx); err != nil {
					return fmt.Errorf("projector: fold %s: flush: %w", f.Name(), err)
				}
			}
		}
		if err := tx.b.Set(keyCursor, binary.BigEndian.AppendUint64(nil, cursor), nil); err != nil {
			return err
		}
		if err := wait(); err != nil {
			return fmt.Errorf("projector: commit: %w", err)
		}
		tx.forgetDeleted()
		b, at := tx.b, cursor
		done := make(chan error, 1)
		go func() {
			err := b.Commit(pebble.NoSync)
			b.Close()
			if err == nil {
				p.advance(at)
			}
			done <- err
		}()
		inflight = done
		tx = nil // the batch belongs to the commit now
		n = 0
		if memoSize(memo) > memoLimit {
			if err := wait(); err != nil {
				return fmt.Errorf("projector: commit: %w", err)
			}
			clear(memo)
		}
		return nil
	}
	for it := range items {
		if tx == nil {
			tx = p.newTxn(memo, wait)
		}
		m := it.m
		if id := m.BatchID(); id != "" {
			if len(open) > 0 && open[0].m.BatchID() != id {
				open = open[:0] // a batch the server never committed
			}
			open = append(open, it)
			if !m.IsBatchCommit() {
				continue
			}
			for _, bi := range open {
				if err := p.apply(tx, bi); err != nil {
					return err
				}
			}
			open = open[:0]
		} else if err := p.apply(tx, it); err != nil {
			return err
		}
		cursor = m.Seq
		n++
		if n >= p.cfg.BatchSize || tx.b.Len() >= p.cfg.BatchBytes || (tail && it.pending == 0) {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

func (p *Projector) filters() []string { return append([]string{p.cfg.Filter}, p.cfg.More...) }

func (p *Projector) advance(seq uint64) {
	p.applied.Store(seq)
	p.mu.Lock()
	close(p.moved)
	p.moved = make(chan struct{})
	p.mu.Unlock()
}

// apply runs every fold on an item; a poisoned message is set aside.
func (p *Projector) apply(tx *Txn, it item) error {
	if it.refused != nil {
		return quarantine(tx, it.m, SignatureFold, it.refused)
	}
	for i, f := range p.cfg.Folds {
		tx.fold = f.Name()
		var err error
		if it.preps != nil && it.preps[i] != nil {
			err = f.(Preparer).ApplyPrepared(tx, it.m, it.preps[i])
		} else {
			err = f.Apply(tx, it.m)
		}
		if errors.Is(err, ErrPoison) {
			if err := quarantine(tx, it.m, f.Name(), err); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("projector: fold %s at sequence %d: %w", f.Name(), it.m.Seq, err)
		}
	}
	return nil
}

// Poison is a message set aside.
type Poison struct {
	Seq     uint64 `msgpack:"s"`
	Subject string `msgpack:"j"`
	Fold    string `msgpack:"f"`
	Reason  string `msgpack:"r"`
	// Data is the message's payload, cut at 64 KiB.
	Data []byte `msgpack:"d"`
}

func quarantine(tx *Txn, m *streams.Msg, fold string, why error) error {
	data := m.Data
	if len(data) > 64<<10 {
		data = data[:64<<10]
	}
	return setAside(tx, &Poison{Seq: m.Seq, Subject: m.Subject, Fold: fold, Reason: why.Error(), Data: data})
}

// setAside writes a quarantine entry; a later one for the same message and
// fold replaces it.
func setAside(tx *Txn, p *Poison) error {
	key := binary.BigEndian.AppendUint64(append([]byte(nil), prefixQuarant...), p.Seq)
	key = append(key, p.Fold...)
	if p.Data == nil {
		// Keep the payload an earlier entry for the message holds, in
		// this batch or the store: the same either way, however the
		// stream was cut into batches.
		if data, ok := tx.aside[string(key)]; ok {
			p.Data = data
		} else {
			if err := tx.settle(); err != nil {
				return err
			}
			var old Poison
			if v, err := get(tx.db, key); err == nil && msgpack.Unmarshal(v, &old) == nil {
				p.Data = old.Data
			}
		}
	}
	v, err := msgpack.Marshal(p)
	if err != nil {
		return err
	}
	if tx.aside == nil {
		tx.aside = map[string][]byte{}
	}
	tx.aside[string(key)] = p.Data
	return tx.b.Set(key, v, nil)
}

// Quarantine lists the messages set aside, in stream order.
func (p *Projector) Quarantine() ([]Poison, error) {
	var out []Poison
	err := scan(p.db, prefixQuarant, func(_, v []byte) error {
		var q Poison
		if err := msgpack.Unmarshal(v, &q); err != nil {
			return err
		}
		out = append(out, q)
		return nil
	})
	return out, err
}
