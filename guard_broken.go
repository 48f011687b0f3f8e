//go:build lash_break_replay

package lash

// replayGuard is off in this build: a replay runs recorded calls again.
// For the chaos harness's check of the check only (guard.go).
const replayGuard = false
