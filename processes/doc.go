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
//   - each attempt begins with a started event naming its runner (a node)
//     and taking a token one above the newest on the log; its
//     compare-and-set is the claim. The runner's events carry the token,
//     and the log refuses tokens older than the newest it holds
//     (ErrFenced), so a runner taken over from can neither report an
//     outcome nor disturb the new attempt. A registration may carry the
//     first attempt's start (token 1), written by the node that runs it;
//   - released hands an attempt back unfinished (not owner-bound work):
//     its runner writes nothing more, and any node may start the next;
//   - owner-bound work starts once; externally owned work never starts,
//     and its owner reports its end with the ByExternalOwner authority;
//   - grants (granted, revoked) name the sessions that may address the
//     process; they are the only events that may follow the terminal;
//   - abandoned names its writer and evidence: the owner's node draining,
//     recovery on proof that the runner is gone or after MaxAttempts
//     attempts that never ended (all with a token), or recovery honouring
//     an abandon request.
//
// Running and recovering processes is the Worker's (ADR 0021): it follows
// the stream (the logs, and the prune marks, which end what a purge took
// from under a reader behind it), and for each process not ended applies the pure rule of its
// disposition (Recover): leave an open attempt to its runner while its
// node is not shown gone, run it (rerunnable, or owner-bound not
// started), never run it (externally owned), and end started owner-bound
// work only when its runner is gone (its node's liveness or PID, or its
// own node's word). Elapsed time alone never ends anything. An executor's
// error marked Retryable releases the attempt; at most MaxAttempts
// attempts begin. A worker told its node's liveness lapsed (Lapsed) stops
// its attempts as at a drain and begins none until Alive.
//
// A process registered where a worker runs and has a slot for it is
// registered with its first attempt started in the same write and run at
// once; one it cannot run yet is handed to it (no hop through the stream).
// The worker decides on its fold without reading the log again: its
// writes are compare-and-sets at the fold's head (ADR 0037).
//
// Waiting for a process (Await) reads its log (on one server one batched
// direct get, so an ended process costs one round trip), then follows it
// through a consumer that delivers events as they are stored: no
// polling, and no terminal written meanwhile is missed. Beside a running
// worker, the worker tells it the end instead.
//
// Bounds: ids as in package streams (256 bytes), 32 declared event types
// of at most 64 bytes, 64 KiB of event data or input, 64 sessions holding
// grants, 10,000 events per process (then only its end, a new attempt,
// its release or a cancel request). Prune removes the logs of processes
// that ended before a cutoff, never of one that has not.
package processes
