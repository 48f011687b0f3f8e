// Package natstool offers tools served by other programs over NATS, as NATS
// micro services, to a lash turn.
//
// # The wire contract
//
// A program serves a tool as a micro endpoint (github.com/nats-io/nats.go/micro)
// whose subject is <prefix>.tool.<name>; the prefix is "lash" unless both
// sides agree on another. The service may have any name and version and any
// number of endpoints. The endpoint's metadata carries:
//
//	lash.description  the tool's description, shown to the model
//	lash.schema       the JSON schema of the arguments, as JSON text; a JSON
//	                  object whose "type" is "object"
//
// A call is a request whose body is the call's JSON arguments, with headers:
//
//	Lash-Idempotency-Key    CallInfo.IdempotencyKey(): the same on every attempt
//	Lash-Attempt            the attempt, from 1, in decimal
//	Lash-In-Doubt           "true" when an earlier attempt may have run unrecorded
//	Lash-Call-Id            the model's id for the call
//	Lash-Decision           the decision's payload, when a decision resumed the call
//	Lash-Decision-Encoding  "base64" when Lash-Decision is base64 (standard
//	                        encoding), because the payload is not printable
//	                        ASCII without surrounding blanks, which a header
//	                        value must be
//
// The response body is the output the model sees. An error response carries
// the micro error headers Nats-Service-Error (the description) and
// Nats-Service-Error-Code. Code 409 means pending: the call suspends and its
// ticket is the response body, or the description when the body is empty.
// Any other code is a failed call whose text (body, else description) the
// model sees. Serve puts the full text in the body because NATS header
// values cannot hold line breaks.
//
// # The lash side
//
// Discover asks every micro service for its INFO ($SRV.INFO) and returns a
// tools.Tool for each tool endpoint under the prefix, to register in a
// tools.Registry. How a call's outcome maps, through tools.Runner:
//
//   - output: a ToolOK result.
//   - error response, code 409: tools.Pending(ticket), a ToolPending result.
//   - any other error response: a ToolError result with the server's text.
//   - no program serves the tool (nats.ErrNoResponders), still after
//     waiting NoServerWait (within the call's deadline) for one to come
//     back: a ToolError result, `no server for tool "x"`. The Runner
//     records every failure a tool returns, error or result alike, so this
//     outcome is recorded and shown to the model either way; a result says
//     so plainly.
//   - the deadline, or the Runner's context ending: an error wrapping the
//     context's, which the Runner turns into its timeout failure or
//     ErrInterrupted.
//   - any other transport failure (connection closed, say): an error
//     wrapping it, a ToolError result once through the Runner.
//
// A call whose context has no deadline waits DefaultCallTimeout.
//
// # The serving side
//
// Serve answers this contract for Go functions. Any other program may serve
// it too, for instance:
//
//	nats req lash.tool.ledger_append '{"entry":"x"}' -H Lash-Idempotency-Key:k1
//
// tests a server by hand, and `nats micro info` shows an endpoint's metadata.
package natstool
