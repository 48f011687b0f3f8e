package scripted

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/lash-run/lash/provider"
	"github.com/lash-run/lash/turn"
)

// ErrNoMatch is returned by Respond when no rule matches the request.
var ErrNoMatch = errors.New("scripted: no rule matches the request")

// Script is a parsed script. It is immutable and safe for concurrent use.
type Script struct {
	rules []rule
}

type rule struct {
	name      string
	line      int
	isDefault bool
	conds     []cond
	say       []string
	calls     []turn.ToolCall // IDs are assigned per request
	finish    turn.FinishReason
	usage     *turn.Usage
	delay     time.Duration
	pace      time.Duration
	fail      *Fail
	hang      bool
}

type cond struct {
	negate  bool
	subject string // user, tool, system, model, tools, step
	op      string // contains, is, or a comparison
	text    string
	n       int
}

// Reply is what the script does for one request: the rule that answered,
// the response, and the cues that say how to deliver it.
type Reply struct {
	// Rule is the name of the rule that answered ("default" for the default
	// rule).
	Rule     string
	Response turn.ModelResponse
	// Delay is how long to wait before answering or failing.
	Delay time.Duration
	// Pace is how long to wait between the pieces of a streamed answer.
	Pace time.Duration
	// Hang says never to answer: wait until the request is cancelled.
	Hang bool
	// Fail, if not nil, says to fail instead of answering.
	Fail *Fail
}

// Fail is a scripted failure: an HTTP status and message. First, if not
// zero, limits it to the first First requests its rule matches; Respond
// reports it on every match, and Model does the counting.
type Fail struct {
	Status  int
	Message string
	First   int
}

// Rules returns the names of the rules in file order.
func (s *Script) Rules() []string {
	names := make([]string, len(s.rules))
	for i, r := range s.rules {
		names[i] = r.name
	}
	return names
}

// Respond finds the first rule matching req and returns its reply. It is a
// pure function of req: the same request gets the same reply. It returns an
// error wrapping ErrNoMatch when no rule matches.
func (s *Script) Respond(req turn.ModelRequest) (Reply, error) {
	v := newView(req)
	for i := range s.rules {
		r := &s.rules[i]
		if r.matches(v) {
			return r.reply(req), nil
		}
	}
	return Reply{}, fmt.Errorf("%w (step %d, %d tool results, last user message %q)",
		ErrNoMatch, v.step, v.tools, clip(v.user, 60))
}

// view is what conditions look at.
type view struct {
	user, tool, system, notice, model string
	tools, step                       int
}

func newView(req turn.ModelRequest) view {
	v := view{model: req.Model, step: 1}
	var system []string
	for i, m := range req.Messages {
		switch m.Role {
		case turn.RoleSystem:
			system = append(system, m.Text)
			if i > 0 { // the first is the system prompt
				v.notice = m.Text
			}
		case turn.RoleUser:
			v.user, v.notice = m.Text, ""
		case turn.RoleAssistant:
			v.step++
		case turn.RoleTool:
			v.tool = provider.ToolText(m)
			v.tools++
		}
	}
	v.system = strings.Join(system, "\n")
	return v
}

func (r *rule) matches(v view) bool {
	for _, c := range r.conds {
		if c.holds(v) == c.negate {
			return false
		}
	}
	return true
}

func (c cond) holds(v view) bool {
	var text string
	switch c.subject {
	case "tools":
		return compare(v.tools, c.op, c.n)
	case "step":
		return compare(v.step, c.op, c.n)
	case "user":
		text = v.user
	case "tool":
		text = v.tool
	case "system":
		text = v.system
	case "notice":
		text = v.notice
	case "model":
		text = v.model
	}
	if c.op == "is" {
		return text == c.text
	}
	return strings.Contains(text, c.text)
}

func compare(a int, op string, b int) bool {
	switch op {
	case "=", "==":
		return a == b
	case "!=":
		return a != b
	case "<":
		return a < b
	case "<=":
		return a <= b
	case ">":
		return a > b
	case ">=":
		return a >= b
	}
	return false
}

func (r *rule) reply(req turn.ModelRequest) Reply {
	rep := Reply{Rule: r.name, Delay: r.delay, Pace: r.pace, Hang: r.hang}
	if r.fail != nil {
		f := *r.fail
		rep.Fail = &f
	}
	resp := &rep.Response
	resp.Text = strings.Join(r.say, "\n")
	if len(r.calls) > 0 {
		next := 1
		for _, m := range req.Messages {
			next += len(m.ToolCalls)
		}
		resp.ToolCalls = make([]turn.ToolCall, len(r.calls))
		for i, c := range r.calls {
			c.ID = fmt.Sprintf("call_%d", next+i)
			resp.ToolCalls[i] = c
		}
	}
	resp.Finish = r.finish
	if resp.Finish == "" {
		resp.Finish = turn.FinishStop
		if len(resp.ToolCalls) > 0 {
			resp.Finish = turn.FinishToolCalls
		}
	}
	if r.usage != nil {
		resp.Usage = *r.usage
	} else {
		resp.Usage = deriveUsage(req, *resp)
	}
	return rep
}

// deriveUsage counts one token per four runes, rounded up.
func deriveUsage(req turn.ModelRequest, resp turn.ModelResponse) turn.Usage {
	in := 0
	for _, m := range req.Messages {
		in += utf8.RuneCountInString(m.Text)
		for _, c := range m.ToolCalls {
			in += utf8.RuneCountInString(c.Arguments)
		}
	}
	out := utf8.RuneCountInString(resp.Text)
	for _, c := range resp.ToolCalls {
		out += utf8.RuneCountInString(c.Arguments)
	}
	return turn.Usage{InputTokens: int64((in + 3) / 4), OutputTokens: int64((out + 3) / 4)}
}

// Chunks cuts text into the pieces a stream delivers: each piece is a word
// with the white space that follows it. The pieces join back into text.
func Chunks(text string) []string {
	var out []string
	start := 0
	inSpace := false
	for i, r := range text {
		space := unicode.IsSpace(r)
		if inSpace && !space {
			out = append(out, text[start:i])
			start = i
		}
		inSpace = space
	}
	if start < len(text) {
		out = append(out, text[start:])
	}
	return out
}

func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "..."
}
