// Package agents keeps agent definitions (ADR 0038): what a session bound
// to an agent asks of its model (instructions, provider, model and its
// parameters), the tools it may use, its limits and the sub-agents it may
// start.
//
// A definition is written as a file (YAML or JSON, Parse) and checked as
// a whole before anything is stored (Definition.Check). Its version is the
// sha256 of its canonical JSON, so the same definition spelled otherwise
// is the same version. Each agent's records live on the AGENTS stream, on
// <prefix>.agent.<name>, one per revision, written by operators with a
// compare-and-set on the subject: applying a definition the agent already
// has writes nothing, a deletion is a revision of its own, and every
// revision stays readable by number or version (Resolve) until a sweep
// prunes a deleted agent past the retention (Prune).
//
// Index keeps every agent's current revision in memory, following the
// stream, for a node to find an agent without a read per turn; nothing in
// the node uses it yet (binding sessions to agents is the next step).
//
// The records are durable truth: on a deployment that signs (ADR 0036)
// one no node or operator wrote is passed over.
package agents
