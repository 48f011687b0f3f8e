// Package projector folds JetStream streams into Pebble read models.
//
// A Projector tails one stream through an ordered consumer (no state on
// the server) and applies each message to its Folds inside a Pebble batch
// that also stores the last applied stream sequence. A projector stopped at
// any point, even between two messages of a batch, resumes from that
// sequence and applies nothing twice. Messages of an atomic batch are
// buffered until the batch's commit message and applied together, so a
// read model never holds part of a batch.
//
// A message a fold cannot decode is set aside (Quarantine lists it, with
// the reason) and the projection goes on. Read models are caches: Rebuild
// throws one away and folds the stream again from its start, and the result
// equals the incremental one (ARCHITECTURE.md §9, invariant 7). A store
// folded by other folds, or by other versions of them (Versioned), is
// cleared when it opens and folded again.
//
// Readers that need their own write wait for its stream sequence with
// WaitFor. The Sessions fold keeps, per session: its head (revision,
// fence, status, turns, last outcome, usage, inputs pending), its commit
// stamps by turn id, its turns in order with the settings fingerprint each
// ran under, its transcript, and the idempotency keys of the inputs it
// consumed, and an index of the sessions holding suspended calls
// (SuspendedSessions). Session snapshots (p.sess.<s>.snap) are passed over;
// a deletion mark (p.sess.<s>.gone) drops everything of the session.
// Bodies kept in the object store are read through WithBodies;
// one that can never be read (lost, corrupt) is set aside, while any other
// failure stops the fold, which its runner starts again. Inputs a node
// refused (its consume entries and commits say so) are set aside with the
// node's reason. A message whose subject names no session (an over-long or
// non-canonical token) is set aside too.
//
// The Processes fold keeps each process of the PROCESSES stream as its log
// folds (package processes), and indexes it by status and by the sessions
// holding grants on it (ProcessesIn, ProcessesOf). An event of a process
// never registered (or pruned) is set aside.
//
// Pebble is opened with the newest format and a logger that keeps only
// errors, without a write-ahead log: a crash loses the newest batches and
// their cursor together, and the stream folds them again. Close flushes.
package projector
