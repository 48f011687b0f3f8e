package agents

import (
	"errors"
	"strings"
	"testing"
)

const support = `
name: support
description: answers customers
labels: {team: care}
instructions: |
  You answer customers of the shop.
provider: anthropic
model: claude-sonnet-4-5
parameters:
  temperature: 0.2
  max_tokens: 1024
tools: [wait_for_approval, ledger_append]
limits:
  max_iterations: 8
  decision_wait: 10m
sub_agents:
  agents: [researcher]
  max_depth: 1
`

func TestParseAndVersion(t *testing.T) {
	ds, err := Parse([]byte(support + "---\n" + `{"name": "researcher", "instructions": "dig", "provider": "openai", "model": "gpt-4.1"}`))
	if err != nil || len(ds) != 2 {
		t.Fatalf("Parse = %d definitions, %v", len(ds), err)
	}
	d := ds[0]
	if err := d.Check(nil); err != nil {
		t.Fatal(err)
	}
	if d.Name != "support" || d.Provider != "anthropic" || *d.Parameters.Temperature != 0.2 || d.Limits.DecisionWait != "10m" || d.SubAgents.MaxDepth != 1 {
		t.Fatalf("parsed %+v", d)
	}
	if err := ds[1].Check(nil); err != nil {
		t.Fatal(err)
	}
	// The same definition spelled otherwise is the same version; any
	// change of substance is another.
	again, err := Parse([]byte(strings.Replace(support, "[wait_for_approval, ledger_append]", "[ledger_append, wait_for_approval, ledger_append]", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if again[0].Version() != d.Version() {
		t.Fatal("reordering the tools made another version")
	}
	other, _ := Parse([]byte(strings.Replace(support, "max_iterations: 8", "max_iterations: 9", 1)))
	if other[0].Version() == d.Version() {
		t.Fatal("a changed limit kept the version")
	}
	if len(d.Version()) != 64 {
		t.Fatalf("version %q is not a hex sha256", d.Version())
	}
}

func TestRefusals(t *testing.T) {
	known := func(tool string) bool { return tool == "wait_for_approval" || tool == "ledger_append" }
	cases := []struct {
		name, file, want string
	}{
		{"unknown field", support + "temprature: 1\n", "field temprature not found"},
		{"unknown provider", strings.Replace(support, "anthropic", "gemeni", 1), `provider "gemeni"`},
		{"unknown tool", strings.Replace(support, "ledger_append]", "ledger_apend]", 1), `tool "ledger_apend": no such tool`},
		{"bad tool name", strings.Replace(support, "ledger_append]", "\"ledger append\"]", 1), `tool "ledger append"`},
		{"no name", strings.Replace(support, "name: support", "", 1), "agent name"},
		{"long name", strings.Replace(support, "name: support", "name: "+strings.Repeat("a", 65), 1), "1 to 64 bytes"},
		{"name with a dot", strings.Replace(support, "name: support", "name: sup.port", 1), `has '.'`},
		{"no model", strings.Replace(support, "model: claude-sonnet-4-5", "", 1), "model"},
		{"bad duration", strings.Replace(support, "10m", "ten minutes", 1), "decision_wait"},
		{"deep sub-agents", strings.Replace(support, "max_depth: 1", "max_depth: 4", 1), "max_depth"},
		{"temperature", strings.Replace(support, "0.2", "3", 1), "temperature"},
		{"temperature not a number", strings.Replace(support, "0.2", ".nan", 1), "temperature"},
		{"not yaml", "name: [", "document 1"},
		{"empty", "", "no definition"},
		{"repeated field", support + "description: " + strings.Repeat("x", 2000) + "\n", "mapping key \"description\" already defined"},
		{"long description", strings.Replace(support, "answers customers", strings.Repeat("x", 2000), 1), "description of 2000 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ds, err := Parse([]byte(c.file))
			if err == nil {
				err = ds[0].Check(known)
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v; want ErrInvalid saying %q", err, c.want)
			}
		})
	}
}

func TestDefinitionBound(t *testing.T) {
	ds, err := Parse([]byte(strings.Replace(support, "You answer customers of the shop.", strings.Repeat("y", MaxDefinitionBytes), 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := ds[0].Check(nil); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "bytes encoded") {
		t.Fatalf("an oversized definition: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(support))
	f.Add([]byte(`{"name":"a","provider":"openai","model":"m"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ds, err := Parse(data)
		if err != nil {
			return
		}
		for _, d := range ds {
			if d.Check(nil) == nil && len(d.Version()) != 64 {
				t.Fatal("a valid definition without a version")
			}
		}
	})
}
