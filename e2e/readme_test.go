package e2e

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// The README documents every setting and command the built commands' help
// lists.
func TestREADMEMatchesHelp(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(readme)
	flagLine := regexp.MustCompile(`^\s+--([a-z][a-z-]*)`)
	for _, command := range []string{"lash-node", "lash-admin"} {
		out, errOut, code := run(t, command, "--help")
		if code != 0 {
			t.Fatalf("%s --help: exit %d: %s", command, code, errOut)
		}
		help := out + errOut
		flags := 0
		for _, line := range strings.Split(help, "\n") {
			if m := flagLine.FindStringSubmatch(line); m != nil {
				flags++
				if !strings.Contains(doc, "`--"+m[1]) && !strings.Contains(doc, " --"+m[1]) {
					t.Errorf("%s --%s is not in the README", command, m[1])
				}
			}
		}
		if flags < 10 {
			t.Errorf("%s --help lists %d flags:\n%s", command, flags, help)
		}
	}
	out, _, _ := run(t, "lash-admin", "--help")
	_, commands, _ := strings.Cut(out, "Commands:\n")
	commands, _, _ = strings.Cut(commands, "\n\n")
	for _, line := range strings.Split(commands, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] == "help" {
			continue
		}
		name := fields[0]
		if len(fields) > 1 && (fields[1] == "ls" || fields[1] == "show") {
			name += " " + fields[1]
		}
		if !strings.Contains(doc, "`"+name) {
			t.Errorf("lash-admin %s is not in the README", name)
		}
	}
}

// The README's HTTP API examples run as written against a lash-node
// serving --api (its address put in for localhost:8080).
func TestREADMEHTTPExamples(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(readme), "\n## HTTP API\n")
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(blocks) != 2 || !strings.Contains(blocks[1][1], "curl") {
		t.Fatalf("the HTTP API section's shell blocks: %d", len(blocks))
	}
	script, err := os.ReadFile("../examples/chat/demo.script")
	if err != nil {
		t.Fatal(err)
	}
	d := newDeployment(t)
	secret := "a secret of at least thirty-two bytes, for tests"
	_, api := d.apiNode("node-a", d.file("api-secret", secret), "--script", d.file("demo.script", string(script)), "--model", "scripted")
	tok := apiToken(t, secret, map[string]any{"session_prefix": "web-", "decide": true})
	cmd := exec.Command("bash", "-e", "-c", strings.ReplaceAll(blocks[1][1], "localhost:8080", strings.TrimPrefix(api, "http://")))
	cmd.Env = append(os.Environ(), "TOKEN="+tok)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's HTTP API examples: %v\n%s", err, out)
	}
	for _, want := range []string{`"seq":1`, "event: open", `"last_input":1`, `"finishReason":"tool-calls"`, `"object":"chat.completion"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("no %s in the examples' output:\n%s", want, out)
		}
	}
}
