// Package sessionlog reads and writes a session's log on JetStream: the
// fence markers of lease holders, the commits of finished turns, the
// consume entries of inputs that started no turn, and the session's
// inputs.
//
// The log is the subject p.sess.<session>.ev; its head revision is the
// stream sequence of its last message. Every entry carries the fencing
// token of the holder that wrote it.
//
// Write rules:
//
//   - Fence(token) reads the head and appends a fence marker there with a
//     compare-and-set. A head written under a newer token is a
//     *FencedError (ErrFenced); a write landing in between is
//     streams.ErrConflict (read the head again). A head written under the
//     same token is the holder's own write: Fence returns it, so a retry
//     after a lost ack is harmless. From then on every write of an older
//     holder fails at the stream, however late it arrives.
//   - Fence and Commit return a Position: the holder's last write and its
//     token. Commit appends only after a Position, so a holder can only
//     ever write after its own writes. Of racing commits at one position
//     exactly one lands; the others get streams.ErrConflict and change
//     nothing. A commit is stamped with its turn id and the sha256 of its
//     body: retrying the same stamp returns the original revision, with or
//     without a lease and after the dedupe window, because the commit that
//     landed is the entry right after the position. The same turn with
//     another body is a *CommitConflictError (ErrCommitConflict). An entry
//     after the position written under a newer token is a *FencedError.
//   - FenceAfter is Fence on a log the caller has read: it names the head
//     it read instead of reading it again. Refence appends the holder's
//     fence again right after its own position, for a run that goes on to
//     the next input after a commit.
//   - Consume is Commit for inputs consumed without a turn (a duplicate
//     key, a refused input), idempotent by id and body the same way.
//   - With WithBlobs, a body above the store's inline size is put in the
//     object store first and the entry carries its size (BodySize) with
//     the content hash, which names the object; Body reads it back.
//   - With WithSettings, fences, commits and consumes carry the writer's
//     turn-settings fingerprint.
//   - A new holder looks for commits of older holders with FindCommit, from
//     the last revision it knows, before committing a turn it recovers.
//   - AppendInput (a client's message, on p.sess.<session>.in) and
//     AppendDecision (decisions and cancels, on p.sess.<session>.decide)
//     need no lease; the client's idempotency key, scoped to the session,
//     is the msg id. The two subjects share the stream's sequence, so a
//     session's inputs have one order: InputsAfter lists both after a
//     cursor that commits carry; InputAfter reads the first one, in one
//     get per subject from the leader, sent at once.
//   - PutSnapshot stores a full-state snapshot the caller encoded, as of a
//     revision, on p.sess.<session>.snap (by reference when large) and
//     drops the older ones; LastSnapshot reads the newest. Snapshots are
//     derived data and take no fence; one that does not match its hash is
//     ErrMalformed.
//   - Msg ids are scoped by session subject: JetStream dedupes them across
//     the whole stream.
//
// A message that is not an entry this version reads is ErrMalformed.
package sessionlog
