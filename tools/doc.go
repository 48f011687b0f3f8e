// Package tools runs the tool calls of a lash turn.
//
// A Registry holds the tools offered to the model; Specs is the catalog a
// driver answers turn.SyncTools with. Func makes a tool of a Go function
// with a typed arguments struct, inferring the JSON schema from the struct
// and checking every call's arguments against it. A Runner answers a
// turn.ToolCalls batch: RunBatch runs its calls in parallel, and every call
// becomes one turn.ToolResult, in the batch's call order.
//
// # What a tool may rely on, and what it owes
//
//  1. Idempotency key. A call can run more than once: a worker may die after
//     the tool ran but before the result was recorded, and the call runs
//     again elsewhere. CallInfo.Key (the call's turn.ReplayKey) is the same
//     on every attempt and every worker; a tool with side effects passes
//     CallInfo.IdempotencyKey to the system it changes, or records the key
//     with its effect, so the effect happens at most once. Read CallInfo
//     with Info(ctx).
//  2. In doubt. CallInfo.InDoubt says that an earlier attempt may have run,
//     in part or in full, without its outcome being recorded (CallInfo.Attempt
//     is then above 1). A worker that dies just before a call starts leaves
//     it in doubt too: the record that lets the call start is written first. A tool that cannot make its effect idempotent
//     checks, when in doubt, whether the effect already happened, or fails
//     and says so rather than repeat it.
//  3. Timeouts. Each call runs under a deadline: the tool's own (WithTimeout,
//     or any TimeoutTool) or the Runner's default. A tool must honour its
//     context and return soon after it is done. At the deadline the call is
//     answered with a timeout failure the model sees, and that answer stands:
//     whatever the tool returns later is discarded. A Go function cannot be
//     stopped from outside, so a tool that ignores its context keeps its
//     goroutine until it returns (Runner.Stragglers counts those).
//  4. Failures are answers. Invalid arguments, an error returned by the tool,
//     a panic, the deadline and an unknown tool name all become a ToolError
//     result whose output tells the model what went wrong, so it can correct
//     itself. None of them aborts the turn. A name is unknown once the
//     registry has settled (Registry.Settling): while tools served elsewhere
//     may still be coming back, after a start or a reconnect, a call to one
//     not found yet waits for it instead.
//  5. Pending. A tool that needs a decision (a human approval, say) returns
//     Pending(ticket). The call becomes a ToolPending result whose output is
//     the ticket, and the turn suspends it. When a decision resumes it in
//     turn.ResumePassToTool mode, the call runs again with
//     CallInfo.Decision set, and the tool reads Decision.Payload.
//  6. Durable work. A node gives the calls it runs a Durable (ADR 0026):
//     Step runs a function once per call and step id and journals its JSON
//     result, so a call run again in doubt gets the recorded result without
//     repeating the effect; EventKey and AwaitEvent wait for an outsider's
//     event by a signed key, parking the call (a pending result) until the
//     event is resolved, times out, or is cancelled or revoked, and the call
//     runs again. Outside a node they return ErrNoDurable.
//  7. Interruption is not an outcome. When the context given to the Runner
//     ends (the worker is draining, the turn was cancelled), unfinished
//     calls return ErrInterrupted instead of a result. The driver records
//     nothing for them; they run again, in doubt, when the turn resumes.
//
// # The driver's side
//
//	res, err := runner.RunBatch(ctx, batch, journal.Attempt, journal.Record)
//	if err != nil {
//		return err // ErrInterrupted: the results recorded so far stand
//	}
//	return m.Deliver(turn.ToolResults{ID: batch.H.ID, Results: res})
//
// The catalog is hashed into every model request, so Specs must not vary:
// Register records a tool's spec once, Specs sorts by name, and Func renders
// a schema whose bytes depend only on the arguments type.
package tools
