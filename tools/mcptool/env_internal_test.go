package mcptool

import (
	"slices"
	"strings"
	"testing"
)

// A server process gets none of the node's environment but what finds
// programs and its own entries: a third-party server never sees the
// node's keys.
func TestChildEnv(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-node-secret")
	t.Setenv("PATH", "/usr/bin")
	env := childEnv(map[string]string{"GITHUB_TOKEN": "t"})
	if !slices.Contains(env, "PATH=/usr/bin") || !slices.Contains(env, "GITHUB_TOKEN=t") {
		t.Fatalf("env %v", env)
	}
	for _, kv := range env {
		if strings.Contains(kv, "sk-node-secret") {
			t.Fatalf("the node's key reached the server: %v", env)
		}
	}
}
