// Package nodeapi is the request/reply API every lash node serves over
// NATS, its wire types, and a typed client for it.
//
// Each node runs a nats.go/micro service named "lash" (so `nats micro ls`
// lists every node as an instance) with these endpoints, all JSON, under
// <prefix>.api.:
//
//	submit  {"session","key","text","decisions","cancel","agent","labels"} -> {"seq","duplicate"} (text, or decisions/cancel)
//	status  {"session"}                                   -> the session's head
//	decide  {"session","key","call_id","action","mode","payload"} -> {"seq","duplicate"}
//	cancel  {"session","key","turn"}                      -> {"seq","duplicate"}
//	live    {"session","after","limit"}                   -> {"records":[{"seq","event"}],"more","first","last"}
//	sessions   {"prefix","after","limit"} or {"ids"}      -> {"sessions":[status...],"next"}
//	transcript {"session","from","limit"}                 -> {"messages":[...],"more","next"}
//	info    {}                                            -> the node: id, incarnation, host, ..., its tools
//	process_start  {"id","tool","args","external_ref","disposition","wake_session","label"} -> the process
//	process_status {"id"}                                 -> the process
//	process_cancel {"id","reason"}                        -> the process, cancel requested
//	process_await  {"id","timeout_ms"}                    -> the process once it ended, or at the timeout
//	step        {"ticket","id","value"}                   -> {"recorded","value"}
//	event_key   {"ticket","name"}                         -> {"key"}
//	await_event {"ticket","name","timeout_ms"}            -> {"status","value","pending"}
//
// step, event_key and await_event are a tool's durable work, for tools
// served outside the node (over NATS or MCP): the ticket its call's request
// carries names the call (lash.ErrBadTicket for one the deployment did not
// sign); see durable.go. On a session's own subject submit names an agent
// by its name only: a pin ("name@N") comes from operators.
// submit, status, decide, cancel and live are also served per session, on
// <prefix>.api.sess.<session>.<endpoint> (SessionSubject; the session as a
// subject token). The session comes from the subject: a request may omit
// it, and one naming another session is refused. There submit takes a
// message only, so NATS permissions grant chatting (submit, status, live) and
// approving (decide, cancel) apart, as they do for the session's input
// and decision subjects. The endpoints without a session in the subject
// name any session: they are for trusted programs. The Client's session
// methods use the per-session subjects.
//
// A process answer is {"id","status","ended","disposition","kind",
// "attempts","events","created","outcome"}: outcome is the terminal
// event's data. process_start registers a background run of one of the
// node's tools, or of a program (tool "program", args {"program"} or
// {"saved"}, lash.BackgroundProgramTool), rerunnable unless disposition
// says owner_bound, or
// external work (externally_owned); the same id with the same content
// answers the process as it stands, other content is refused with 409.
// process_await answers when the process ends, or at timeout_ms (at most
// the node's request timeout less a second) with ended false.
//
// submit, decide and cancel append an input to the session's log (its key
// is the idempotency key, forever: the same key with the same input again
// answers the first input's sequence with duplicate set, with other content
// it is refused with 409); any node may take them, and the session
// runs on whichever node dispatch picks. A cancel naming a turn ("in-<seq>",
// the turn that takes input <seq>) stops that turn only: once it has
// committed, the cancel is consumed as stale and changes nothing. A
// stopped turn's sub-agents are cancelled too. status, sessions and
// transcript read the answering node's projection once it has folded
// everything the SESSIONS stream held when the request came; status lists
// the calls the session holds suspended and what each awaits (a
// "decision", or a sleep, signal, process or event). sessions lists the
// sessions whose ids start with a prefix of [A-Za-z0-9_-] characters, a
// page at a time (at most MaxPageLimit), or those of named ids that exist;
// transcript reads committed
// messages from an index, a page at a time (at most MaxPageBytes, each
// text cut at MaxMessageText with truncated set). info is answered by every node: Client.Info takes the
// first answer, Client.Nodes gathers them all.
//
// Failures are micro errors (the Nats-Service-Error-Code and
// Nats-Service-Error headers) with a one-line description:
//
//	400  bad request: invalid JSON, unknown or missing fields, an id over
//	     256 bytes, an input lash refuses
//	404  unknown session: status, decide or cancel of a session with
//	     neither inputs nor log entries; unknown process
//	409  (processes) an id registered with other content, a cancel of an
//	     ended process
//	409  conflict: the session or the node cannot take the request now
//	     (retry), or the key was used for other content (do not)
//	413  oversized: the input is over the deployment's input limit
//	     (Node.MaxInputBytes, 256 KiB by default)
//	500  anything else
//
// live reads the session's live events after a cursor (0: from the first
// kept), in stream order, at most limit (DefaultLiveLimit; MaxLiveLimit)
// and MaxLiveBytes of them; more says others follow. first and last are
// the sequences the LIVE stream keeps: a cursor below first-1 missed
// events. It is how a client that follows <prefix>.live.<session> reads
// what it missed, without the JetStream API.
//
// A request whose reply subject is the deployment's (<prefix>.>) or the
// server's ($...) is refused and answered nowhere, so no answer is
// captured by a stream; info lists it among the refused.
//
// A refused request changes no durable state. The client returns them as
// *Error, matched with errors.Is against ErrBadRequest, ErrNotFound,
// ErrBusy, ErrTooLarge and ErrInternal.
//
// A program that serves the node API and calls it too (lash-node's HTTP
// gateway) uses Client.Via: its requests go to its own Server in-process,
// handled, refused, kept and counted as from NATS (under the server's
// timeout, whatever the caller's context), with a trip through the server
// fewer each way, no NATS payload limit and no queue per endpoint; once
// that Server stops they go over NATS to the other nodes.
package nodeapi
