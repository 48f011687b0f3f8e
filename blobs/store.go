package blobs

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/lash-run/lash/streams"
)

// Backend is what the store needs from the stream layer.
type Backend interface {
	PutObject(ctx context.Context, name string, sum [32]byte, meta map[string]string, data []byte) error
	GetObject(ctx context.Context, name string, sum [32]byte, limit int64) ([]byte, error)
	DeleteObject(ctx context.Context, name string) (int64, error)
}

// Store puts and gets payloads by reference.
type Store struct {
	b   Backend
	lim Limits
}

// New returns a store over b with the deployment's limits.
func New(b Backend, lim Limits) *Store { return &Store{b: b, lim: lim} }

// Limits are the store's limits.
func (s *Store) Limits() Limits { return s.lim }

// WithMax is the same store with another ceiling, for payloads that gather
// others (a commit body holds a turn's answers and results).
func (s *Store) WithMax(max int64) *Store {
	return &Store{b: s.b, lim: Limits{Inline: s.lim.Inline, Max: max}}
}

// Put stores data for owner and returns its reference; data above
// Limits.Max is a *TooLargeError and stores nothing.
func (s *Store) Put(ctx context.Context, owner Owner, data []byte) (Ref, error) {
	if err := s.lim.Check(int64(len(data))); err != nil {
		return Ref{}, err
	}
	sum := sha256.Sum256(data)
	if err := s.b.PutObject(ctx, owner.Name(sum), sum, owner.Metadata(), data); err != nil {
		return Ref{}, fmt.Errorf("blobs: put: %w", err)
	}
	return Ref{Sum: sum, Size: int64(len(data))}, nil
}

// Get reads the payload ref names, owned by owner. An object written
// before objects had owners is found under its sha256 alone.
func (s *Store) Get(ctx context.Context, owner Owner, ref Ref) ([]byte, error) {
	if err := s.lim.Check(ref.Size); err != nil {
		return nil, err
	}
	data, err := s.b.GetObject(ctx, owner.Name(ref.Sum), ref.Sum, ref.Size)
	if errors.Is(err, streams.ErrNotFound) && owner != (Owner{}) {
		data, err = s.b.GetObject(ctx, Owner{}.Name(ref.Sum), ref.Sum, ref.Size)
	}
	switch {
	case errors.Is(err, streams.ErrNotFound):
		return nil, fmt.Errorf("%w: %s", ErrMissing, ref)
	case errors.Is(err, streams.ErrCorrupt), errors.Is(err, streams.ErrTooLarge):
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, ref, err)
	case err != nil:
		return nil, fmt.Errorf("blobs: get %s: %w", ref, err)
	}
	if int64(len(data)) != ref.Size {
		return nil, fmt.Errorf("%w: %s: read %d bytes", ErrCorrupt, ref, len(data))
	}
	return data, nil
}

// Delete removes the object ref names for owner, for good, and returns the
// bytes it held (0 when it was not there). Objects without an owner are
// shared and never deleted here.
func (s *Store) Delete(ctx context.Context, owner Owner, ref Ref) (int64, error) {
	if owner == (Owner{}) {
		return 0, nil
	}
	n, err := s.b.DeleteObject(ctx, owner.Name(ref.Sum))
	if err != nil {
		return 0, fmt.Errorf("blobs: delete %s: %w", ref, err)
	}
	return n, nil
}
