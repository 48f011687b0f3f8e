// Package triggers starts work when something happens outside: a signal
// published on <prefix>.signal.<type>.<key...> is recorded once as an
// occurrence, matched against subscriptions, and delivered at most once
// to each as a process start (package processes), whose end wakes the
// subscription's wake target session (ADR 0024).
//
// Everything lives on the TRIGGERS stream, one subject per record, each
// named by an id derived from what it is:
//
//   - <prefix>.trig.sub.<id>: a subscription's states, one per change,
//     the newest last. The id is a hash of the owner (the host, or a
//     session) and the subscription's key, so registering is idempotent;
//     a changed definition under the same key is ErrConflict, not an
//     upsert. Changes are compare-and-set on the subject; update names
//     the revision it changes. Delete leaves a tombstone state (the
//     history stays); revive starts a new incarnation.
//   - <prefix>.trig.op.<op>: the receipt of an operation, stored in the
//     same atomic batch as the state it made, so an operation took effect
//     exactly when its receipt exists, and repeating it returns the
//     receipt.
//   - <prefix>.trig.occ.<id>: an occurrence. Its id hashes the signal's
//     source type, source key and idempotency key (the signal's
//     Nats-Msg-Id): the same signal published again, even after the
//     dedupe window, is the same occurrence.
//   - <prefix>.trig.dlv.<id>: a delivery, reserved with the occurrence in
//     one atomic batch where every subject must be empty: at most one
//     delivery per occurrence and subscription, forever. The delivery
//     holds the process registration it starts (fixed from the
//     subscription's state when the signal was stored), and gains a
//     started mark once the process is registered. The process's id is
//     the delivery's, so registering it twice makes one process.
//
// A Router (one per node) follows subscriptions and deliveries: it
// matches a signal against the subscriptions as they stood at the
// signal's stream sequence, whichever node delivers it and whenever, and
// its sweep registers the process of reservations left without a started
// mark by a node that died between the two.
//
// Schedules (schedules.go, ADR 0025) make time a source: a named
// repeating message schedule on the TIMERS stream whose ticks nodes
// publish as the signals <prefix>.signal.cron.<name>, one occurrence per
// tick.
//
// Bounds: keys and operation ids 256 bytes; source patterns 16 tokens;
// fixed tool arguments 16 KiB; signal payloads 64 KiB of JSON; 256
// deliveries per occurrence (further matches are listed as undelivered);
// 1000 revisions per subscription.
package triggers
