// Package leases grants the right to run mutating work for a key (a
// session, a process) to one owner at a time, with fencing tokens.
//
// Leases live in the deployment's lease bucket with a per-key TTL.
//
// Rules:
//
//   - Claim creates the key. Its revision is the fencing token: a stream
//     sequence, so every later holder gets a larger one. The same owner and
//     incarnation claiming again gets its live lease back with the same
//     token. Any other live holder is a *BusyError (ErrBusy) naming it.
//   - A holder proven dead is replaced at once: its node's liveness key is
//     gone or names another incarnation, or it ran on this host in this boot
//     and its PID no longer exists. Without such evidence the claimant waits
//     for the TTL; expiry alone is the server's word that the holder stopped
//     renewing.
//   - Renew replaces the value at the held revision, keeping the TTL;
//     Release deletes at the held revision. Both fail with ErrLost once the
//     key moved on, and never touch a successor's lease. A move made by a
//     renewal of the same lease object whose answer was lost is not a loss:
//     the key still holds that lease, at a later revision, and they go on
//     from it. A copy of the lease (Lease.Copy) gets no such benefit.
//   - A holder measures its lease on its own monotonic clock from before the
//     claim or renewal was sent, minus a margin (Lease.ExpiresAt), and stops
//     trusting it then, whatever the server says.
//   - Keep is the one keeper every plane uses (a session's run, a process's
//     attempt): it renews every third of the TTL, tries a failed renewal
//     again at the next tick, and ends its context as lost when a renewal is
//     refused or the expiry passes with none answered.
//
// The lease cuts contention; the data is protected by the fence: writes
// carry the token and the session log refuses older ones.
package leases
