//go:build !lash_break_fence

package leases

// selfExpiry: a holder stops trusting its lease when it expires or a
// renewal is refused. The chaos harness's check of the check builds
// without it (build tag lash_break_fence), as a holder whose clock froze
// with its VM would believe its lease still held.
const selfExpiry = true
