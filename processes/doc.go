// Package processes keeps durable background work: a tool call moved to
// the background, a sub-agent's turn, work owned outside lash. Each
// process has its own log on the PROCESSES stream, subject
// <prefix>.proc.<pid>.ev, one JSON event per message (ADR 0020).
//
// The log is the process. Its first event registers it: the input, a
// recovery disposition, the event types it may emit, who started it and
// why, and the session to wake when it ends. Registration is idempotent
// by the registration's hash; the same id with other content is
// ErrConflict. Every later event is appended with the stream's
// compare-and-set at the head its writer read, after the rules below were
// checked on the log as it stands (fold.go), so events are numbered
// densely from 1 and no rule can be raced past:
//
//   - only built-in and declared event types;
//   - one terminal event (completed, failed, cancelled, abandoned), keyed,
//     so a repeat of the same one is a no-op and a different one is
//     ErrTerminal; only grant changes follow it;
//   - one cancel request and one abandon request, keyed the same way;
//   - a runner writes under the process's lease (package leases, key
//     "proc.<pid>"): each attempt begins with a started event carrying the
//     lease's token, and the log refuses tokens older than the newest it
//     holds (ErrFenced), so a runner whose lease was superseded can
//     neither report an outcome nor disturb the new one;
//   - owner-bound work starts once; externally owned work never starts,
//     and its owner reports its end with the ByExternalOwner authority;
//   - grants (granted, revoked) name the sessions that may address the
//     process; they are the only events that may follow the terminal;
//   - abandoned names its writer and evidence: the owner's node draining,
//     recovery on proof of death or after MaxAttempts attempts that never
//     ended (all under the lease), or recovery honouring an abandon
//     request.
//
// Running and recovering processes is the Worker's (ADR 0021): it follows
// the stream, and for each process not ended applies the pure rule of its
// disposition (Recover): run it (rerunnable, or owner-bound not started),
// never run it (externally owned), and end started owner-bound work only
// on proof of its runner's death or an operator's request after the
// runner's lease lapsed. Elapsed time alone never ends anything. An
// executor's error marked Retryable hands the attempt back; at most
// MaxAttempts attempts begin.
//
// A process registered where a worker runs is handed to that worker at
// once (no hop through the stream), and the worker decides on its fold
// without reading the log again: its writes are compare-and-sets at the
// fold's head (ADR 0037).
//
// Waiting for a process (Await) reads its log (on one server one batched
// direct get, so an ended process costs one round trip), then follows it
// through a consumer that delivers events as they are stored: no
// polling, and no terminal written meanwhile is missed.
//
// Bounds: ids as in package streams (256 bytes), 32 declared event types
// of at most 64 bytes, 64 KiB of event data or input, 64 sessions holding
// grants, 10,000 events per process (then only its end, a new attempt or a
// cancel request). Prune removes the logs of processes that ended before a
// cutoff, never of one that has not.
package processes
