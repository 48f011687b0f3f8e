//go:build !lash_break_replay

package lash

// replayGuard: a run answers an effect recorded when its turn began from
// the journal. Only the chaos harness's check of the check builds without
// it (build tag lash_break_replay), to show its checker sees the recorded
// calls that a replay then runs again.
const replayGuard = true
