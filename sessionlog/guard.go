//go:build !lash_break_fence

package sessionlog

// fenceGuard: every append to a session log expects the head its writer
// read, so a writer whose lease passed to another writes nothing. Only the
// chaos harness's check of the check builds without it (build tag
// lash_break_fence).
const fenceGuard = true
