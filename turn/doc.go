// Package turn is lash's agent turn as a pure state machine.
//
// A Machine never performs IO, reads a clock, draws randomness or starts a
// goroutine. It yields effects (SyncTools, LLMCall, ToolCalls, ExecCode,
// ProgramCalls, Checkpoint, Sleep, AwaitEvent; fire-and-forget Progress and
// Emit; finally Done) and is
// fed their results. Everything the turn learns from outside arrives as the
// answer to an effect, so a driver that journals those answers can rebuild the
// turn anywhere: given the same Config, Start and answers, a machine yields
// the same effects with the same ids, keys and byte-identical requests, and
// ends in the same state.
//
// # The driver's duties
//
//  1. Build the machine with New(cfg, start). Start carries the session and
//     turn ids (stable across workers: they go into every replay key), the
//     committed conversation, the calls an earlier turn left suspended, and
//     the input that caused this turn. Build cfg the same way on every
//     worker; hooks are code and are not snapshotted.
//  2. Call Next repeatedly. Progress and Emit are returned once each: persist
//     or publish them, then call Next again. They never need an answer.
//  3. An effect whose Head().ID is not zero is outstanding; Next returns it
//     again until it is answered. Its Head carries the replay key and the
//     hash of its request. Look the key up in the journal: if an answer is
//     recorded, compare the hashes (a mismatch means the turn took another
//     path: stop with a nondeterminism error, never run the effect again);
//     otherwise perform the effect, record its answer, and only then feed it
//     back. For ToolCalls, each PendingCall has its own key and hash; calls
//     may run in parallel and their results may be delivered one at a time.
//  4. Feed the answer with Deliver. A result for another id, of the wrong
//     type, or malformed is refused with an error and changes nothing; fix
//     the driver, do not retry blindly.
//  5. Answer Checkpoint and AwaitEvent with the messages and decisions that
//     arrived since the last boundary, and journal that answer too, so a
//     replay injects the same input at the same place. Check decisions
//     against Suspended at ingress to refuse those for unknown calls early.
//  6. To cancel, answer the outstanding effect with Cancel. It is journaled
//     like any answer, so a replay cancels at the same point.
//  7. Snapshot at any point to park the turn; Restore with the same Config
//     yields the outstanding effect again with the same id and request.
//     Queued Progress and Emit effects are part of the snapshot.
//  8. When Next returns Done, commit its Outcome: the new messages, usage,
//     the status (Waiting when calls are left suspended on decisions) and
//     the termination. Done is returned for ever after; Deliver then fails
//     with ErrFinished.
//
// # The drive loop
//
//	m, err := turn.New(cfg, start)
//	if err != nil {
//		return err
//	}
//	for {
//		switch e := m.Next().(type) {
//		case *turn.Progress:
//			persist(e.Messages, e.Events)
//		case *turn.Emit:
//			publish(e.Event)
//		case *turn.Done:
//			return commit(e.Outcome)
//		default:
//			res, err := journal.AnswerOrRun(ctx, e) // duties 3, 5 and 6
//			if err != nil {
//				return err
//			}
//			if err := m.Deliver(res); err != nil {
//				return err
//			}
//		}
//	}
//
// # The loop inside
//
// A turn syncs the tool catalog, applies decisions carried by its input,
// then iterates: stop rules (consecutive tool failures, token budget,
// maximum iterations with one grace inference that has no tools), the
// BeforeInference hook, a model call (retryable errors sleep and retry under
// a new effect id with the same request; the sleep is Limits.Backoff, or the
// provider's CallError.RetryAfter when longer, capped at Limits.MaxBackoff),
// AfterInference, and either a tool round or a before-finish checkpoint. A
// response whose tool calls lack ids or names, repeat an id, reuse a
// suspended call's id, or have an id or name longer than MaxIDBytes ends the
// turn with CodeInvalidResponse. A tool round gates each call through
// BeforeTool (allow, block with an error the model sees, or suspend on a
// ticket), runs the allowed ones as one batch, answers every call in the
// conversation in the order the model asked for them (a suspended call gets
// a pending placeholder), runs AfterTool and yields an after-tools
// checkpoint. Every checkpoint is a resume gate: injected messages are
// appended and decisions resume or cancel suspended calls; a resumed call
// either takes the decision's payload as its result or runs again in a new
// batch, and skips BeforeTool because the decision is the verdict.
//
// In ModeCode and ModeBoth a call of ProgramTool runs a program after its
// round's batch: ExecCode asks the driver to run it, and each call the
// program makes comes back as a ProgramCalls effect whose calls have keys
// of their own, derived from the program's origin and the call's ordinal
// (program.go).
//
// The run is Waiting when every live call is suspended and nothing new has
// arrived since the last inference; it leaves Waiting only when no call is
// suspended any more. A waiting run parks on an AwaitEvent if
// Config.DecisionWait is set, and otherwise ends the turn Suspended; the next
// turn continues it from its Start.Suspended.
package turn
