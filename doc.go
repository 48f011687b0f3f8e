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
// This is the first increment of the facade: a single Run drives a session
// on the calling goroutine. Dispatch across nodes, live events, decisions
// and cancellation through the API, and draining come next.
package lash
