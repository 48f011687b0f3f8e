package blobs

import (
	"encoding/hex"
	"errors"
	"fmt"
)

// Errors.
var (
	// ErrTooLarge: a payload is above Limits.Max.
	ErrTooLarge = errors.New("blobs: payload too large")
	// ErrMissing: the object a reference names is not in the store.
	ErrMissing = errors.New("blobs: referenced payload is missing")
	// ErrCorrupt: the stored bytes do not match the reference.
	ErrCorrupt = errors.New("blobs: referenced payload does not match its reference")
)

// TooLargeError names the size and the limit.
type TooLargeError struct {
	Size, Max int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("blobs: payload of %d bytes, at most %d are kept", e.Size, e.Max)
}

func (e *TooLargeError) Unwrap() error { return ErrTooLarge }

// Ref names a payload kept by reference.
type Ref struct {
	Sum  [32]byte
	Size int64
}

// String is "sha256:<hex> (<size> bytes)".
func (r Ref) String() string {
	return fmt.Sprintf("sha256:%s (%d bytes)", hex.EncodeToString(r.Sum[:]), r.Size)
}

// Limits are a deployment's payload sizes.
type Limits struct {
	// Inline is the largest payload carried inside its message.
	Inline int
	// Max is the largest payload kept at all.
	Max int64
}

// InlineSize reports whether a payload of n bytes stays in its message.
func (l Limits) InlineSize(n int) bool { return n <= l.Inline }

// Check refuses a payload of n bytes above Max.
func (l Limits) Check(n int64) error {
	if n > l.Max {
		return &TooLargeError{Size: n, Max: l.Max}
	}
	return nil
}
