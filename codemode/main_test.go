package codemode_test

import (
	"os"
	"testing"

	"github.com/lash-run/lash/codemode"
)

// TestMain serves as a sandbox's child when this binary is started as one.
func TestMain(m *testing.M) {
	codemode.ServeChild()
	os.Exit(m.Run())
}
