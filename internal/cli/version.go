package cli

import (
	"regexp"
	"runtime/debug"
)

var semver = regexp.MustCompile(`^v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?)(?:\+[0-9A-Za-z.-]+)?$`)

// Version is a binary's version as SemVer: set, when a build gave one
// (-ldflags "-X main.version=1.2.3"), or the module's version, or
// 0.0.0-dev for a build from a checkout.
func Version(set string) string {
	v := set
	if v == "" {
		if bi, ok := debug.ReadBuildInfo(); ok {
			v = bi.Main.Version
		}
	}
	if m := semver.FindStringSubmatch(v); m != nil {
		return m[1]
	}
	return "0.0.0-dev"
}

// IsVersionFlag reports whether arg asks for the version: --version or
// -version.
func IsVersionFlag(arg string) bool { return arg == "--version" || arg == "-version" }
