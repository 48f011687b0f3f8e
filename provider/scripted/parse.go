package scripted

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lash-run/lash/turn"
)

// ParseError is a script that could not be parsed, with the number (from 1)
// of the offending line.
type ParseError struct {
	Line int
	Msg  string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("scripted: line %d: %s", e.Line, e.Msg)
}

// Parse reads a script in the format described in the package
// documentation. Errors are *ParseError and name the line.
func Parse(text string) (*Script, error) {
	p := parser{names: map[string]int{}}
	for i, line := range strings.Split(text, "\n") {
		p.line = i + 1
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := p.parseLine(line); err != nil {
			return nil, err
		}
	}
	if err := p.finishRule(); err != nil {
		return nil, err
	}
	if len(p.script.rules) == 0 {
		return nil, &ParseError{Line: 1, Msg: "the script has no rules"}
	}
	return &p.script, nil
}

// MustParse is Parse for scripts written in code; it panics on an error.
func MustParse(text string) *Script {
	s, err := Parse(text)
	if err != nil {
		panic(err)
	}
	return s
}

type parser struct {
	script  Script
	cur     *rule
	line    int
	names   map[string]int // rule name -> line of its header
	sawDflt int            // line of the default rule, 0 if none yet
}

func (p *parser) errorf(format string, args ...any) error {
	return &ParseError{Line: p.line, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) parseLine(line string) error {
	word, rest := cutWord(line)
	switch word {
	case "rule", "default":
		if err := p.finishRule(); err != nil {
			return err
		}
		if p.sawDflt != 0 {
			return p.errorf("a rule after the default rule (line %d) could never answer", p.sawDflt)
		}
		name := "default"
		if word == "rule" {
			name = rest
			if name == "" || strings.ContainsAny(name, " \t") {
				return p.errorf("a rule needs a one-word name: rule <name>")
			}
		} else if rest != "" {
			return p.errorf("default takes no arguments")
		}
		if at, dup := p.names[name]; dup {
			return p.errorf("rule %q is already defined on line %d", name, at)
		}
		p.names[name] = p.line
		if word == "default" {
			p.sawDflt = p.line
		}
		p.cur = &rule{name: name, line: p.line, isDefault: word == "default"}
		return nil
	}
	if p.cur == nil {
		return p.errorf("%q before the first rule: start one with \"rule <name>\" or \"default\"", word)
	}
	r := p.cur
	switch word {
	case "when":
		if r.isDefault {
			return p.errorf("the default rule takes no conditions")
		}
		c, err := p.parseCond(rest)
		if err != nil {
			return err
		}
		r.conds = append(r.conds, c)
	case "say":
		text, err := p.parseText(rest, true)
		if err != nil {
			return err
		}
		r.say = append(r.say, text)
	case "call":
		name, args := cutWord(rest)
		if name == "" {
			return p.errorf("call needs a tool name: call <name> [json]")
		}
		if args == "" {
			args = "{}"
		}
		if !json.Valid([]byte(args)) {
			return p.errorf("the arguments of call %s are not valid JSON: %s", name, args)
		}
		r.calls = append(r.calls, turn.ToolCall{Name: name, Arguments: args})
	case "finish":
		if r.finish != "" {
			return p.errorf("finish is given twice")
		}
		switch f := turn.FinishReason(rest); f {
		case turn.FinishStop, turn.FinishToolCalls, turn.FinishLength, turn.FinishContentFilter:
			r.finish = f
		default:
			return p.errorf("unknown finish reason %q: want stop, tool_calls, length or content_filter", rest)
		}
	case "usage":
		if r.usage != nil {
			return p.errorf("usage is given twice")
		}
		f := strings.Fields(rest)
		if len(f) != 2 {
			return p.errorf("usage needs two numbers: usage <input> <output>")
		}
		in, err1 := strconv.ParseInt(f[0], 10, 64)
		out, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil || in < 0 || out < 0 {
			return p.errorf("usage needs two counts >= 0, got %q", rest)
		}
		r.usage = &turn.Usage{InputTokens: in, OutputTokens: out}
	case "delay":
		if r.delay != 0 {
			return p.errorf("delay is given twice")
		}
		d, err := time.ParseDuration(rest)
		if err != nil || d <= 0 {
			return p.errorf("delay needs a positive duration like 50ms, got %q", rest)
		}
		r.delay = d
	case "pace":
		if r.pace != 0 {
			return p.errorf("pace is given twice")
		}
		d, err := time.ParseDuration(rest)
		if err != nil || d <= 0 {
			return p.errorf("pace needs a positive duration like 50ms, got %q", rest)
		}
		r.pace = d
	case "fail":
		if r.fail != nil {
			return p.errorf("fail is given twice")
		}
		f, err := p.parseFail(rest)
		if err != nil {
			return err
		}
		r.fail = f
	case "hang":
		if rest != "" {
			return p.errorf("hang takes no arguments")
		}
		r.hang = true
	default:
		return p.errorf("unknown directive %q", word)
	}
	return nil
}

// finishRule checks the rule being read, once all its lines are in.
func (p *parser) finishRule() error {
	r := p.cur
	if r == nil {
		return nil
	}
	p.cur = nil
	fail := func(msg string) error { return &ParseError{Line: r.line, Msg: fmt.Sprintf("rule %q %s", r.name, msg)} }
	answers := len(r.say) > 0 || len(r.calls) > 0
	switch {
	case !answers && r.fail == nil && !r.hang:
		return fail("does nothing: give it say, call, fail or hang")
	case r.hang && (answers || r.fail != nil):
		return fail("hangs, so it can neither answer nor fail")
	case r.fail != nil && r.fail.First == 0 && answers:
		return fail("always fails, so its say and call lines are never used (fail ... first K fails only K times)")
	}
	p.script.rules = append(p.script.rules, *r)
	return nil
}

func (p *parser) parseCond(s string) (cond, error) {
	var c cond
	subject, rest := cutWord(s)
	if subject == "not" {
		c.negate = true
		subject, rest = cutWord(rest)
	}
	switch subject {
	case "user", "tool", "system", "notice", "model":
		op, arg := cutWord(rest)
		if op != "contains" && op != "is" {
			return c, p.errorf("when %s needs contains or is, got %q", subject, op)
		}
		text, err := p.parseText(arg, false)
		if err != nil {
			return c, err
		}
		c.subject, c.op, c.text = subject, op, text
	case "tools", "step":
		f := strings.Fields(rest)
		if len(f) != 2 {
			return c, p.errorf("when %s needs an operator and a number, like: when %s = 2", subject, subject)
		}
		switch f[0] {
		case "=", "==", "!=", "<", "<=", ">", ">=":
		default:
			return c, p.errorf("unknown operator %q: want = != < <= > >=", f[0])
		}
		n, err := strconv.Atoi(f[1])
		if err != nil || n < 0 {
			return c, p.errorf("when %s needs a count >= 0, got %q", subject, f[1])
		}
		c.subject, c.op, c.n = subject, f[0], n
	case "":
		return c, p.errorf("when needs a condition")
	default:
		return c, p.errorf("unknown condition %q: want user, tool, system, model, tools or step", subject)
	}
	return c, nil
}

func (p *parser) parseFail(s string) (*Fail, error) {
	code, rest := cutWord(s)
	status, err := strconv.Atoi(code)
	if err != nil || status < 400 || status > 599 {
		return nil, p.errorf("fail needs an HTTP error status (400-599), got %q", code)
	}
	f := &Fail{Status: status}
	if w, after := cutWord(rest); w == "first" {
		k, krest := cutWord(after)
		n, err := strconv.Atoi(k)
		if err != nil || n < 1 {
			return nil, p.errorf("fail ... first needs a count >= 1, got %q", k)
		}
		f.First, rest = n, krest
	}
	if f.Message, err = p.parseText(rest, true); err != nil {
		return nil, err
	}
	if f.Message == "" {
		f.Message = http.StatusText(status)
	}
	return f, nil
}

// parseText reads TEXT: the trimmed rest of the line, or a Go string literal
// in double quotes.
func (p *parser) parseText(s string, emptyOK bool) (string, error) {
	if strings.HasPrefix(s, `"`) {
		t, err := strconv.Unquote(s)
		if err != nil {
			return "", p.errorf("bad quoted text %s: %v", s, err)
		}
		return t, nil
	}
	if s == "" && !emptyOK {
		return "", p.errorf("missing text")
	}
	return s, nil
}

// cutWord splits s, already trimmed, at its first run of white space.
func cutWord(s string) (word, rest string) {
	i := strings.IndexAny(s, " \t")
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.TrimSpace(s[i:])
}
