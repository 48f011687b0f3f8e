// Package mcptool offers the tools of Model Context Protocol servers as
// lash tools (ADR 0040), on the official Go SDK: a Source connects to one
// server, over stdio (a child process, started when first needed and again
// after it exited) or streamable HTTP (with headers that are never logged
// or journaled), and lists its tools as <server>__<tool>. A call carries
// lash's idempotency key, attempt and in-doubt flag in the request's _meta
// (MetaIdempotencyKey, MetaAttempt, MetaInDoubt), and the call's ticket for
// durable work through the node API (MetaCallTicket). Everything that fails
// (an unreachable server, a process gone mid-call, a result over
// Server.MaxResultBytes) is a failed call the model reads; the end of the
// call's context is left to the tools.Runner, which records its timeout.
//
// ParseServers reads the file lash-node's --mcp-servers names.
package mcptool
