//go:build lash_break_fence

package lash

// holderGuard is off in this build. For the chaos harness's check of the
// check only (guard_fence.go).
const holderGuard = false
