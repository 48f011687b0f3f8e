package cli

import (
	"fmt"
	"strconv"
	"strings"
)

// Size is a byte count as a flag: a number with an optional unit, B, KiB,
// MiB or GiB ("256KiB", "32MiB", "1048576").
type Size int64

var sizeUnits = []struct {
	suffix string
	scale  int64
}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

// Set implements flag.Value.
func (s *Size) Set(v string) error {
	v = strings.TrimSpace(v)
	scale := int64(1)
	for _, u := range sizeUnits {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			v, scale = strings.TrimSpace(n), u.scale
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/scale {
		return fmt.Errorf("want a byte count such as 256KiB, 32MiB or 1048576")
	}
	*s = Size(n * scale)
	return nil
}

// String implements flag.Value, in the largest unit that divides it.
func (s *Size) String() string {
	if s == nil {
		return "0"
	}
	n := int64(*s)
	for _, u := range sizeUnits {
		if n != 0 && n%u.scale == 0 && u.scale > 1 {
			return strconv.FormatInt(n/u.scale, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
