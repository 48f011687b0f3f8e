// Package blobs keeps large payloads by reference. A model answer, a tool
// result or a commit body above the deployment's inline size is stored once
// in the JetStream object store, named by its sha256, and the journal
// record or log entry carries a Ref (the sum and the size) instead of the
// bytes. The object is written before the record that names it, so a
// reader that finds the record finds the object.
//
// Rules (ref.go holds them, free of IO):
//
//   - A payload of at most Limits.Inline bytes stays in its message.
//   - A payload above Limits.Max is never stored: Put refuses it with a
//     *TooLargeError (ErrTooLarge), which callers record as an error the
//     model sees, never retry.
//   - Put is idempotent: the same bytes for the same owner, from any node,
//     are one object.
//   - Get checks the bytes against the Ref (ErrCorrupt) and reports a
//     missing object as ErrMissing: neither can succeed by retrying.
//
// Objects are named by their Owner (a turn's journal, a session's bodies
// and snapshot), so an owner's objects are deleted with it without looking
// for other readers (ADR 0035); the deployment's own are shared.
package blobs
