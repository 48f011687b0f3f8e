package blobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/lash-run/lash/streams"
)

// Backend is what the store needs from the stream layer.
type Backend interface {
	PutBlob(ctx context.Context, data []byte) ([32]byte, error)
	GetBlob(ctx context.Context, sum [32]byte, limit int64) ([]byte, error)
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

// Put stores data and returns its reference; data above Limits.Max is a
// *TooLargeError and stores nothing.
func (s *Store) Put(ctx context.Context, data []byte) (Ref, error) {
	if err := s.lim.Check(int64(len(data))); err != nil {
		return Ref{}, err
	}
	sum, err := s.b.PutBlob(ctx, data)
	if err != nil {
		return Ref{}, fmt.Errorf("blobs: put: %w", err)
	}
	return Ref{Sum: sum, Size: int64(len(data))}, nil
}

// Get reads the payload ref names.
func (s *Store) Get(ctx context.Context, ref Ref) ([]byte, error) {
	if err := s.lim.Check(ref.Size); err != nil {
		return nil, err
	}
	data, err := s.b.GetBlob(ctx, ref.Sum, ref.Size)
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
