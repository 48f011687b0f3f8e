package e2e

import (
	"os"
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
