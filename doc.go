// Package lash runs AI-agent turns durably on NATS JetStream.
//
// A Node connects to a deployment (or starts an embedded nats-server),
// and runs sessions' turns with a model provider and tools. Session.Send
// appends input durably; Session.Run claims the session's lease, fences
// the session log, and runs each pending input as a turn of the turn
// machine (package turn): every effect is answered from the journal when it
// was recorded, and performed and recorded otherwise, so a turn left by a
// node that died is finished by another without calling the model again or
// re-running recorded tools. Each turn ends in one idempotent commit.
//
// Session.Turn(key, input).Run (or Stream, with live events) sends one
// input and returns the turn that consumed it; Decide is an input too,
// applied at the turn's next safe boundary; Cancel also stops a model call
// or tool round in flight. Node.Serve takes inputs from a durable consumer
// shared by every node, so any node runs any session, never two at once,
// each input as soon as it is delivered. Node.Close drains.
//
// A node keeps the sessions it ran folded in memory (WithStateCache) and
// trusts them until its fence finds that the log moved; a session it does
// not keep starts from the newest snapshot on its log. Model requests hash
// the history by a running digest (turn.Digest), so a turn costs the same
// however long its session is.
//
// Nothing wedges a session: an input that cannot start a turn (unreadable,
// a key taken before, a decision for no suspended call) is consumed without
// one and named on the log; a turn that can never succeed (nondeterminism,
// a lost journal record, turn settings no live node runs, failures on
// every attempt) is committed as failed with its cause (the Fail* codes),
// and the session goes on. Payloads above the deployment's inline size go
// to the object store by reference (package blobs); ids and sizes have
// bounds (streams.MaxIDBytes, streams.Config).
package lash
