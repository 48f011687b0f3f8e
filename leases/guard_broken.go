//go:build lash_break_fence

package leases

// selfExpiry is off in this build: a holder never stops trusting its
// lease. For the chaos harness's check of the check only.
const selfExpiry = false
