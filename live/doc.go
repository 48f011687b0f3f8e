// Package live is the schema of lash's live events and the way to follow
// them.
//
// While a turn runs, the node publishes events about it on
// <prefix>.live.<session> as JSON objects (Event): the messages the turn
// adds, pieces of a model answer as it streams, the machine's steps (tool
// calls starting and ending, waits), and the commit. They are for
// watchers, never truth: the session log holds what happened. A replayed
// model call publishes no text deltas again (it calls no model); its
// whole message is published as every message is.
//
// The deployment's LIVE stream keeps them for a while (Config.LiveRetention
// and LiveMaxBytes, an hour and 64 MiB by default, in memory unless
// LiveFile), each under a stream sequence. Follow reads a session's events
// after a sequence and then the live tail, in order, each once; a watcher
// that reconnects passes the last sequence it saw. One too far behind
// (the events after its sequence are no longer all kept) gets a
// *BehindError instead of a silent gap.
//
// Schema version 1 (V): fields are snake_case, roles, types and statuses
// are words, and an unknown field or type must be ignored by readers:
// later versions add, and bump V only when a meaning changes.
package live
