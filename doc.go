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
// input and returns the turn that consumed it; Decide and Cancel are inputs
// too, applied at the turn's next safe boundary. Node.Serve takes inputs
// from a durable consumer shared by every node, so any node runs any
// session, never two at once. Node.Close drains.
package lash
