//go:build lash_break_fence

package sessionlog

// fenceGuard is off in this build: appends land whatever the head, and
// are not deduplicated. For the chaos harness's check of the check only.
const fenceGuard = false
