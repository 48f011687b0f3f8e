package agents

import (
	"fmt"
	"strings"
)

// Bind is the rule of a session's binding (ADR 0038): the agent a session
// runs after an input that names asked ("" for none), given the session's
// current binding, the turns it committed, and whether the deployment
// signed the input. It returns the binding, or why the input is refused
// (the binding then stays current).
//
//   - An input naming no agent keeps the session's.
//   - A session keeps the agent it started with: once it committed a
//     turn, an input naming another agent is refused (the default agent
//     included, whose name is "").
//   - Naming the same agent again pins it ("name@N"), moves the pin or
//     unpins it ("name"); a pin comes from operators, so an unsigned one
//     is refused.
//
// A malformed ref is refused too (screen refuses its input as well).
func Bind(current, asked string, turns int, signed bool) (spec, refuse string) {
	if asked == "" {
		return current, ""
	}
	name, err := CheckRef(asked)
	switch {
	case err != nil:
		return current, err.Error()
	case turns > 0 && name != Name(current):
		return current, fmt.Sprintf("the session runs %s; an input cannot move it to agent %s (start another session)", label(current), name)
	case strings.Contains(asked, "@") && !signed:
		return current, fmt.Sprintf("a pin (%s) comes from operators (lash-admin send --agent, Session.Send): the deployment did not sign this input", asked)
	}
	return asked, ""
}

// Name is the agent a ref names ("name", "name@N"; "" for the default
// agent).
func Name(spec string) string {
	name, _, _ := strings.Cut(spec, "@")
	return name
}

func label(spec string) string {
	if spec == "" {
		return "the deployment's default agent"
	}
	return "agent " + spec
}
