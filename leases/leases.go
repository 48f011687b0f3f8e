package leases

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/lash-run/lash/streams"
	"github.com/vmihailenco/msgpack/v5"
)

// Errors.
var (
	// ErrBusy: a live holder has the lease. The *BusyError names it.
	ErrBusy = errors.New("leases: busy")
	// ErrLost: the lease is no longer the caller's (expired, released, or
	// taken by a successor). Stop mutating work at once.
	ErrLost = errors.New("leases: lost")
	// ErrInvalid: a key or TTL that cannot be used.
	ErrInvalid = errors.New("leases: invalid argument")
)

// BusyError names the live holder.
type BusyError struct {
	Key    string
	Holder Owner
	Token  uint64
	// Renewed is the server's time of the holder's last claim or renewal:
	// without proof of its death, its lease ends a TTL after it.
	Renewed time.Time
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("leases: %s is held by %s (token %d)", e.Key, e.Holder, e.Token)
}

func (e *BusyError) Unwrap() error { return ErrBusy }

// Store is what leases need from the stream layer.
type Store interface {
	KVCreate(ctx context.Context, key string, value []byte, ttl time.Duration) (uint64, error)
	KVSwap(ctx context.Context, key string, value []byte, rev uint64, ttl time.Duration) (uint64, error)
	KVDelete(ctx context.Context, key string, rev uint64) (uint64, error)
	KVGet(ctx context.Context, key string) (*streams.KVEntry, error)
	KVList(ctx context.Context, prefix string) ([]streams.KVEntry, error)
}

// Lease is a held lease. Token is the fencing token: it never changes while
// the lease is held and a later holder always gets a larger one. Revision
// moves with every renewal. ExpiresAt is measured on this process's
// monotonic clock, ahead of the server's TTL by a safety margin.
//
// Renew moves Revision and ExpiresAt under the lease's lock: while a
// Keeper renews it, read them with Valid and Current, not the fields.
type Lease struct {
	Key       string
	Token     uint64
	Revision  uint64
	Owner     Owner
	TTL       time.Duration
	ExpiresAt time.Time

	mu sync.Mutex
	// unsure: a renewal got no answer, so it may have landed and moved the
	// key past Revision. Only this lease's own writes can have done that;
	// a copy of it does not inherit the doubt.
	unsure bool
}

// Valid reports whether the holder may still trust the lease at now.
func (l *Lease) Valid(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return now.Before(l.ExpiresAt)
}

// Copy is a copy of the lease as it stands, for a holder that keeps an old
// version (a stale copy's renewal is refused).
func (l *Lease) Copy() *Lease {
	rev, exp := l.Current()
	return &Lease{Key: l.Key, Token: l.Token, Revision: rev, Owner: l.Owner, TTL: l.TTL, ExpiresAt: exp}
}

// Current is the lease's revision and expiry as of its last renewal.
func (l *Lease) Current() (revision uint64, expires time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.Revision, l.ExpiresAt
}

// value is what a lease key holds. Token is 0 in the message written by a
// claim, whose own revision is the token; renewals carry it forward.
type value struct {
	Owner Owner  `msgpack:"o"`
	Token uint64 `msgpack:"t,omitempty"`
}

func (v value) token(rev uint64) uint64 {
	if v.Token != 0 {
		return v.Token
	}
	return rev
}

// Manager claims, renews and releases leases for one owner.
type Manager struct {
	s     Store
	owner Owner
	// mine is the value a claim writes, encoded once: the owner is fixed.
	mine    []byte
	mineErr error
	margin  func(ttl time.Duration) time.Duration
	now     func() time.Time

	mu sync.Mutex
	// released holds the revisions of the delete markers this manager
	// left: claiming such a key again is one compare-and-set over its own
	// marker, while nobody wrote after it.
	released map[string]uint64
}

// maxReleased bounds the markers a manager remembers.
const maxReleased = 4096

// Option configures a Manager.
type Option func(*Manager)

// WithMargin sets how long before the TTL a holder stops trusting its
// lease. Default: a fifth of the TTL, at least 100ms.
func WithMargin(f func(ttl time.Duration) time.Duration) Option {
	return func(m *Manager) { m.margin = f }
}

// New returns a manager that claims as owner.
func New(s Store, owner Owner, opts ...Option) *Manager {
	m := &Manager{s: s, owner: owner, now: time.Now, released: map[string]uint64{}, margin: func(ttl time.Duration) time.Duration {
		return max(ttl/5, 100*time.Millisecond)
	}}
	for _, o := range opts {
		o(m)
	}
	m.mine, m.mineErr = msgpack.Marshal(&value{Owner: owner})
	return m
}

// Owner is the manager's owner.
func (m *Manager) Owner() Owner { return m.owner }

// Key names the lease of a session or process with an id of any form.
func Key(kind, id string) (string, error) {
	tok, err := streams.Token(id)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return kind + "." + tok, nil
}

func checkTTL(ttl time.Duration) error {
	if ttl < time.Second || ttl%time.Second != 0 {
		return fmt.Errorf("%w: TTL %s must be whole seconds, at least one", ErrInvalid, ttl)
	}
	return nil
}

// Claim takes the lease at key for ttl. A live lease of the same owner and
// incarnation is renewed and returned with its token. A holder proven dead
// is replaced at once with a new, larger token. Any other live holder is a
// *BusyError: wait for its TTL and claim again.
func (m *Manager) Claim(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	if err := checkTTL(ttl); err != nil {
		return nil, err
	}
	mine := m.mine
	if m.mineErr != nil {
		return nil, m.mineErr
	}
	if marker, ok := m.takeReleased(key); ok {
		// Released by this manager: if nobody wrote since, the key is
		// free, and one write over the marker takes it.
		start := m.now()
		rev, err := m.s.KVSwap(ctx, key, mine, marker, ttl)
		if err == nil {
			return m.lease(key, rev, rev, ttl, start), nil
		}
		if !errors.Is(err, streams.ErrConflict) {
			return nil, err
		}
	}
	for range 5 {
		start := m.now()
		rev, err := m.s.KVCreate(ctx, key, mine, ttl)
		if err == nil {
			return m.lease(key, rev, rev, ttl, start), nil
		}
		if !errors.Is(err, streams.ErrConflict) {
			return nil, err
		}
		e, err := m.s.KVGet(ctx, key)
		if errors.Is(err, streams.ErrNotFound) {
			continue // expired or released since: create again
		}
		if err != nil {
			return nil, err
		}
		var held value
		if err := msgpack.Unmarshal(e.Value, &held); err != nil {
			return nil, fmt.Errorf("leases: %s holds an unreadable value: %w", key, err)
		}
		token := held.token(e.Revision)
		switch {
		case held.Owner.same(m.owner):
			l := m.lease(key, token, e.Revision, ttl, start)
			if err := m.Renew(ctx, l); errors.Is(err, ErrLost) {
				continue
			} else if err != nil {
				return nil, err
			}
			return l, nil
		case m.dead(ctx, held.Owner):
			rev, err := m.s.KVSwap(ctx, key, mine, e.Revision, ttl)
			if errors.Is(err, streams.ErrConflict) {
				continue // someone else moved first; look again
			}
			if err != nil {
				return nil, err
			}
			return m.lease(key, rev, rev, ttl, start), nil
		default:
			return nil, &BusyError{Key: key, Holder: held.Owner, Token: token, Renewed: e.Created}
		}
	}
	return nil, fmt.Errorf("leases: %s: claim kept racing with other claimants", key)
}

func (m *Manager) lease(key string, token, rev uint64, ttl time.Duration, start time.Time) *Lease {
	return &Lease{Key: key, Token: token, Revision: rev, Owner: m.owner, TTL: ttl, ExpiresAt: m.TrustedUntil(start, ttl)}
}

// Renew extends l by its TTL if it is still the standing value of its key;
// otherwise ErrLost. The expiry is measured from before the request left.
// A renewal of l that got no answer may have landed: the next Renew (or
// Release) of l that finds the key moved by it goes on from there, rather
// than giving up a lease nobody else has.
func (m *Manager) Renew(ctx context.Context, l *Lease) error {
	data, err := msgpack.Marshal(&value{Owner: l.Owner, Token: l.Token})
	if err != nil {
		return err
	}
	start := m.now()
	held, _ := l.Current()
	rev, err := m.s.KVSwap(ctx, l.Key, data, held, l.TTL)
	if errors.Is(err, streams.ErrConflict) {
		if at, ok := m.ownLanded(ctx, l, held); ok {
			start = m.now()
			rev, err = m.s.KVSwap(ctx, l.Key, data, at, l.TTL)
		}
	}
	if errors.Is(err, streams.ErrConflict) {
		return fmt.Errorf("%w: %s (token %d) was replaced or expired", ErrLost, l.Key, l.Token)
	}
	if err != nil {
		l.mu.Lock()
		l.unsure = true
		l.mu.Unlock()
		return err
	}
	l.mu.Lock()
	l.Revision, l.unsure = rev, false
	l.ExpiresAt = m.TrustedUntil(start, l.TTL)
	l.mu.Unlock()
	return nil
}

// ownLanded tells whether the key moved past held by a renewal of l whose
// answer never came: it holds l's owner and token at a later revision,
// which it returns. Without such a renewal a move is a successor's, or a
// copy's of l (whose release must not free it).
func (m *Manager) ownLanded(ctx context.Context, l *Lease, held uint64) (uint64, bool) {
	l.mu.Lock()
	unsure := l.unsure
	l.mu.Unlock()
	if !unsure {
		return 0, false
	}
	e, err := m.s.KVGet(ctx, l.Key)
	if err != nil || e.Revision <= held {
		return 0, false
	}
	var v value
	if msgpack.Unmarshal(e.Value, &v) != nil || !v.Owner.same(l.Owner) || v.token(e.Revision) != l.Token {
		return 0, false
	}
	l.mu.Lock()
	l.Revision = e.Revision
	l.mu.Unlock()
	return e.Revision, true
}

// Release gives l up. It removes the key only if l is still its standing
// value, so a successor's lease is never cleared; otherwise ErrLost.
func (m *Manager) Release(ctx context.Context, l *Lease) error {
	held, _ := l.Current()
	marker, err := m.s.KVDelete(ctx, l.Key, held)
	if errors.Is(err, streams.ErrConflict) {
		if at, ok := m.ownLanded(ctx, l, held); ok {
			marker, err = m.s.KVDelete(ctx, l.Key, at)
		}
	}
	if errors.Is(err, streams.ErrConflict) {
		return fmt.Errorf("%w: %s (token %d) was replaced or expired", ErrLost, l.Key, l.Token)
	}
	if err == nil {
		m.mu.Lock()
		if len(m.released) >= maxReleased {
			for k := range m.released {
				delete(m.released, k)
				break
			}
		}
		m.released[l.Key] = marker
		m.mu.Unlock()
	}
	return err
}

// Forget drops what the manager remembers of key: its owner (a deleted
// session, say) is gone for good, and a marker kept for it would stay in
// memory until maxReleased others pushed it out.
func (m *Manager) Forget(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.released, key)
}

func (m *Manager) takeReleased(key string) (uint64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rev, ok := m.released[key]
	delete(m.released, key)
	return rev, ok
}

// Holder is a lease as any observer reads it.
type Holder struct {
	Key      string
	Owner    Owner
	Token    uint64
	Revision uint64
	Renewed  time.Time // server time of the last claim or renewal
}

// List returns the live leases whose keys start with prefix.
func (m *Manager) List(ctx context.Context, prefix string) ([]Holder, error) {
	entries, err := m.s.KVList(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := make([]Holder, 0, len(entries))
	for _, e := range entries {
		if notLease(e.Key) {
			continue
		}
		h, err := holder(e)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

// Get returns the live lease of key, or nil when nobody holds it: one
// read, whatever the number of leases.
func (m *Manager) Get(ctx context.Context, key string) (*Holder, error) {
	e, err := m.s.KVGet(ctx, key)
	if errors.Is(err, streams.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	h, err := holder(*e)
	return &h, err
}

// notLease tells the bucket's keys that hold no lease: the sweep's
// watermarks (lifecycle.marks.*) and the deployment's signing stamp
// (deployment.signing).
func notLease(key string) bool {
	return strings.HasPrefix(key, "lifecycle.") || strings.HasPrefix(key, "deployment.")
}

func holder(e streams.KVEntry) (Holder, error) {
	var v value
	if err := msgpack.Unmarshal(e.Value, &v); err != nil {
		return Holder{}, fmt.Errorf("leases: %s holds an unreadable value: %w", e.Key, err)
	}
	return Holder{Key: e.Key, Owner: v.Owner, Token: v.token(e.Revision), Revision: e.Revision, Renewed: e.Created}, nil
}
