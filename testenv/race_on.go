//go:build race

package testenv

// RaceDetector reports whether the race detector is built in.
const RaceDetector = true
