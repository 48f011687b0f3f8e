// Package streams is the one package of lash that talks to JetStream. It
// owns the deployment's topology (streams, the lease bucket, subject names),
// the write primitives every other package builds on, error-code mapping,
// and the embedded server.
//
// # Topology
//
// With prefix p (default "lash") a deployment is, all with schema version
// SchemaVersion in their metadata:
//
//	P_SESSIONS   p.sess.<session>.ev   session log: fences, commits (CAS on the head)
//	             p.sess.<session>.in   messages, appended by clients (msg-id dedupe)
//	             p.sess.<session>.decide decisions and cancels, by approvers
//	P_EFFECTS    p.fx.<session>.<turn>.<effect>.<call|_>.r   journal record (first writer wins)
//	             p.fx.<session>.<turn>.<effect>.<call|_>.i   "started" intent
//	P_PROCESSES  p.proc.<process>.ev
//	P_TRIGGERS   p.signal.>, p.trig.>
//	P_TIMERS     p.timer.>            durable timers (message schedules)
//	P_LIVE       p.live.<session>     live events, bounded by age and bytes,
//	                                  in memory unless Config.LiveFile
//	P_LEASES     KV bucket: leases and node liveness, per-key TTL
//	P_BLOBS      object store (stream OBJ_P_BLOBS): payloads by reference,
//	             named by their hex sha256
//
// Ids become subject tokens through Token: ids made of [A-Za-z0-9_-] stay
// as they are, anything else becomes '=' and its base64url encoding. An id
// is at most MaxIDBytes (256) bytes; ParseToken accepts only the token
// Token makes, so one id has one subject.
//
// Sizes are the deployment's: the SESSIONS stream refuses a message over
// Config.MaxInputBytes (headers included), the other streams one over
// Config.MaxMsgSize; Config.InlineBytes and Config.MaxPayloadBytes, kept in
// the streams' metadata, say which payloads go to the object store and
// which are never stored. Bind takes all of them as the streams have them.
//
// No stream expires messages by age: the journal of a turn parked for a
// month, or a fired timer no node took for a week, must stay. What becomes
// garbage is removed by package lifecycle (ADR 0035).
//
// A client given the deployment's secret (Sign) signs what it writes on
// subjects of durable truth (Subjects.Truth) with a Lash-Sig header, and
// Verify tells those records from anything else published there (ADR
// 0036).
//
// Ensure (run by Open) creates what is missing and compares what exists
// with what this build expects; a difference is refused with a
// *SchemaError (ErrSchemaMismatch) and nothing is changed, with two
// exceptions: the LIVE stream's age and size limits are brought to this
// node's settings in place (ADR 0030), and a SESSIONS stream made without
// direct gets is taken as it is, read through the API (ADR 0033).
//
// # Write rules and their errors
//
//   - Append publishes with Nats-Expected-Last-Subject-Sequence: the
//     subject's last stream sequence must be the expected one (0: empty).
//     Server codes 10071 and 10164 both become a *ConflictError
//     (ErrConflict). After a conflict, if the message right after the
//     expected sequence carries the caller's msg id, the write had landed
//     (a retry after a lost ack): Append returns its sequence with
//     duplicate set, also after the dedupe window.
//   - Publish appends without a check; a msg id dedupes retries within the
//     stream's duplicate window only. Permanent identity lives in the data.
//   - AppendBatch stores up to MaxBatch messages of one stream atomically,
//     each with its own optional expected sequence; one failing check
//     rejects all (*ConflictError); other refusals are ErrBatch. On a
//     single server with file storage the server stages each batch in a
//     store of its own on disk, which costs milliseconds: batch where it
//     saves many publishes, not for two messages.
//   - KVCreate claims a key with a TTL (conflict if live); KVSwap replaces
//     it at a revision keeping a TTL (the KV update call would drop it);
//     KVDelete removes it at a revision only, with a delete marker that
//     expires, so released keys leave nothing in the bucket.
//   - A Dispatcher hands out each message of a shared durable consumer to a
//     callback as it arrives; PurgeBefore drops a subject's older messages.
//   - PutBlob stores bytes under their sha256 unless they are there;
//     GetBlob reads them back checked against it (ErrCorrupt), refusing
//     more than a limit (ErrTooLarge) before reading.
//   - A payload above the stream's MaxMsgSize is ErrTooLarge; a missing
//     message is ErrNotFound; an id that cannot be a token is ErrBadID.
//
// Reads that decide a write (the message after a conflict) go to the stream
// leader: the streams do not allow direct gets, which followers may answer
// from behind, except SESSIONS on a single server, the leader itself, where
// its reads are direct gets (ADR 0033; when an operator turns them off,
// the client finds out at its next read and reads through the API from
// then on). Every call takes a context; calls
// without a deadline get DefaultTimeout.
//
// # Interception
//
// Config.Intercept puts an Interceptor between the client and the servers:
// every round trip the client makes (a publish, a batch, a call on the
// lease bucket or the object store, a read, a dispatcher's fetch and acks)
// runs through it, named by a Call. Tests wrap the store there, as
// pebble's errorfs wraps a file system: a call fails before it is sent,
// loses its reply after it landed (the ambiguous case every write must
// survive), waits, goes twice, or every call fails from some point on (a
// node cut off). Without an interceptor a call costs a nil check (ADR
// 0043).
package streams
