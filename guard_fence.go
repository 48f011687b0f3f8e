//go:build !lash_break_fence

package lash

// holderGuard: a node's session runs end when it stops trusting its
// liveness key. The chaos harness's check of the check builds without it
// (build tag lash_break_fence), with the fence and the leases' own expiry.
const holderGuard = true
