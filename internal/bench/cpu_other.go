//go:build !unix

package bench

import "time"

// cpuTime is unknown here; the figures that use it are left out.
func cpuTime() time.Duration { return 0 }
