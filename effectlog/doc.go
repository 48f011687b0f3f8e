// Package effectlog is the journal of effect outcomes: what a turn's model
// calls, tool calls, checkpoints and waits returned, keyed by replay key.
//
// Each key has its own subject, p.fx.<session>.<turn>.<effect>.<call|_>.r.
//
// Write rules:
//
//   - Record appends with expected subject sequence 0: the first recorded
//     outcome wins, forever. A loser gets the winner's record back (won is
//     false) and must feed that outcome to its turn, not its own.
//   - Each record carries the request hash of its effect. When the current
//     request's hash differs, Record and Lookup return a
//     *NondeterminismError (ErrNondeterminism, text "lash:nondeterminism")
//     with the key and both hashes: the turn took another path and must
//     stop; the effect is never run again.
//   - Failures are outcomes (Outcome.Failed): they replay as the same
//     failure.
//   - With WithBlobs, an outcome above the store's inline size is put in
//     the object store first and the record carries its reference (Ref);
//     readers get the bytes back, checked against it. A reference whose
//     object is gone is an error that no retry mends (blobs.ErrMissing).
//   - With WithSettings, records carry the recorder's turn-settings
//     fingerprint (Record.Settings): a node tells a turn begun under other
//     settings.
//   - Started notes an attempt on p.fx.….i before it runs; InDoubt tells a
//     re-executor that an attempt may have run without recording. An
//     outcome with Intends set stands for the intents of the tool calls of
//     the batch that is the next effect (effect id + 1): they have no
//     intents of their own, and InDoubt finds them through it.
//   - Purge deletes a committed turn's journal once it is no longer needed
//     for inspection.
//
// Lookup of an unrecorded key is ErrNotRecorded; ids that cannot be
// journaled are ErrInvalid; an unreadable record is ErrMalformed.
package effectlog
