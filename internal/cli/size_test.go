package cli

import "testing"

func TestSize(t *testing.T) {
	good := map[string]int64{"0": 0, "1048576": 1 << 20, "256KiB": 256 << 10, "32MiB": 32 << 20, "2GiB": 2 << 30, " 7 B": 7}
	for in, want := range good {
		var s Size
		if err := s.Set(in); err != nil || int64(s) != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, s, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1.5MiB", "ten", "3MB", "9999999999GiB"} {
		var s Size
		if err := s.Set(in); err == nil {
			t.Errorf("Set(%q) = %d, accepted", in, s)
		}
	}
	for n, want := range map[int64]string{0: "0", 256 << 10: "256KiB", 32 << 20: "32MiB", 1000: "1000"} {
		s := Size(n)
		if got := s.String(); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}
