// Package console serves lash's web console: a single page, embedded in
// the binary, that shows a deployment's sessions, transcripts as they
// stream, turns, a turn's journal as a timeline, calls waiting on a
// decision, the quarantine, nodes and leases, processes and triggers, and
// lets an operator approve or deny a suspended call.
//
// Every page asks the JSON API under /api, and each API route but two is
// one lash-admin command run with --json (routes.go maps one to the
// other): the console shows exactly what the CLI prints, in the shapes the
// README documents. The two are the live events, which the console follows
// itself (Source.Follow), and its own configuration (/api/config). The only writes are
// decisions (lash-admin decide), so the trust rules of decisions apply,
// and a read-only console refuses them. Live events reach the page as
// Server-Sent Events whose ids are the LIVE stream's sequences: a browser
// that reconnects resumes after the last event it saw.
//
// lash-admin ui wires a Source to the handler (ADR 0032).
package console
