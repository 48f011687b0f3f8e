package codemode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/lash-run/lash/live"
)

// Guide tells the model how to write a program; Describe lists the tools
// it may call in it.
const Guide = `Write a Starlark program (Python-like: no classes, no try, no imports, no recursion) to do the work.
Each call below is made durably: if the program runs again, calls already made return
their recorded results instead of running twice. Nothing else reaches the outside.

  tool_name(arg=value, ...)       call a tool; its result, or the program stops with its error
  attempt(tool_name, arg=...)     call it; struct(ok, value, error, cancelled), never stopping
  parallel([call(tool_name, arg=...), ...])
                                  make the calls at once; a list of struct(ok, value, error, cancelled)
  llm("prompt")                   ask the model; its answer as text
  sleep(seconds)                  wait; once it ended, a run again does not wait again
  print(...)                      output you will read afterwards
  result = ...                    the program's result (numbers, text, lists, dicts, None)
  tool("name", arg=...)           a tool listed as tool("name")
  json.encode(v), json.decode(s)  JSON

while loops run, but a program has a bounded number of steps, calls and printed bytes.`

// maxDescribed bounds Describe's text; the tools past it are named only.
const maxDescribed = 32 << 10

// Describe renders tools as the functions a program calls: a signature
// from each one's JSON schema (its properties in the schema's order,
// optional ones "= None"), its description, and its parameters'.
func Describe(tools []Tool) string {
	var b strings.Builder
	var rest []string
	ids := names(tools)
	for _, t := range tools {
		if b.Len() > maxDescribed {
			rest = append(rest, t.Name)
			continue
		}
		describeTool(&b, t, ids[t.Name])
	}
	if len(rest) > 0 {
		fmt.Fprintf(&b, "also: %s\n", strings.Join(rest, ", "))
	}
	return b.String()
}

func describeTool(b *strings.Builder, t Tool, name string) {
	call := name + "("
	if name == "" {
		call = fmt.Sprintf("tool(%q, ", t.Name)
	}
	params := properties(t.Schema)
	var sig []string
	byDict := false
	for _, p := range params {
		if identifier(p.name) != p.name {
			byDict = true // no keyword can name it: the arguments go as one dict
			continue
		}
		s := p.name + ": " + p.kind
		if !p.required {
			s += " = None"
		}
		sig = append(sig, s)
	}
	if byDict {
		sig = []string{"{...}"}
	}
	b.WriteString(strings.TrimSuffix(call, ", ") + strings.Join(sig, ", ") + ")\n")
	if d := oneLine(t.Description, 500); d != "" {
		b.WriteString("    " + d + "\n")
	}
	for _, p := range params {
		switch {
		case byDict:
			req := ""
			if p.required {
				req = ", required"
			}
			line := fmt.Sprintf("    %q: %s%s", p.name, p.kind, req)
			if d := oneLine(p.desc, 200); d != "" {
				line += ". " + d
			}
			b.WriteString(line + "\n")
		case p.desc != "":
			b.WriteString("    " + p.name + ": " + oneLine(p.desc, 200) + "\n")
		}
	}
}

type param struct {
	name, kind, desc string
	required         bool
}

// properties reads a schema's properties in the document's order; a
// schema it cannot read has none (the tool takes what it is given).
func properties(schema json.RawMessage) []param {
	var s struct {
		Properties json.RawMessage `json:"properties"`
		Required   []string        `json:"required"`
	}
	if json.Unmarshal(schema, &s) != nil || len(s.Properties) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(s.Properties))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	var out []param
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return out
		}
		name, _ := tok.(string)
		var p struct {
			Type        any    `json:"type"`
			Description string `json:"description"`
			Enum        []any  `json:"enum"`
		}
		if err := dec.Decode(&p); err != nil {
			return out
		}
		kind := kindOf(p.Type)
		if len(p.Enum) > 0 {
			var vs []string
			for _, v := range p.Enum[:min(len(p.Enum), 8)] {
				j, _ := json.Marshal(v)
				vs = append(vs, string(j))
			}
			if len(p.Enum) > 8 {
				vs = append(vs, "…")
			}
			kind = "one of " + strings.Join(vs, ", ")
		}
		req := false
		for _, r := range s.Required {
			req = req || r == name
		}
		out = append(out, param{name: name, kind: kind, desc: p.Description, required: req})
	}
	return out
}

// kindOf names a JSON schema type as the program sees its values.
func kindOf(t any) string {
	switch t := t.(type) {
	case string:
		switch t {
		case "string":
			return "str"
		case "integer":
			return "int"
		case "number":
			return "float"
		case "boolean":
			return "bool"
		case "array":
			return "list"
		case "object":
			return "dict"
		case "null":
			return "None"
		}
	case []any:
		var ks []string
		for _, x := range t {
			ks = append(ks, kindOf(x))
		}
		return strings.Join(ks, " | ")
	}
	return "any"
}

// oneLine is s on one line, cut at n bytes.
func oneLine(s string, n int) string { return clip(strings.Join(strings.Fields(s), " "), n) }

// clip cuts s at n bytes, not inside a character, marking the cut.
func clip(s string, n int) string {
	if c, cut := live.Clip(s, n); cut {
		return c + "…"
	}
	return s
}
