package provider

import (
	"strings"

	"github.com/lash-run/lash/turn"
)

const (
	errorPrefix      = "error: "
	lateResultPrefix = "[late result for tool call "
	lateResultSep    = ")]: "
)

// ToolText is the text a model is shown for a tool message: its Text,
// prefixed with "error: " when the call failed (Message.Error).
func ToolText(m turn.Message) string {
	if m.Error {
		return errorPrefix + m.Text
	}
	return m.Text
}

// LateResultText is the text of the user message that carries a tool result
// for a call the conversation has already answered (the real result that
// follows a pending placeholder):
//
//	[late result for tool call <id> (<name>)]: <ToolText(m)>
func LateResultText(m turn.Message) string {
	return lateResultPrefix + m.CallID + " (" + m.Name + lateResultSep + ToolText(m)
}

// ParseLateResult undoes LateResultText: it reports whether text has that
// form and returns the call id, the tool name and the result text. A
// server that wants to see the conversation as lash wrote it uses it.
func ParseLateResult(text string) (callID, name, result string, ok bool) {
	rest, ok := strings.CutPrefix(text, lateResultPrefix)
	if !ok {
		return "", "", "", false
	}
	callID, rest, ok = strings.Cut(rest, " (")
	if !ok || callID == "" {
		return "", "", "", false
	}
	name, result, ok = strings.Cut(rest, lateResultSep)
	if !ok {
		return "", "", "", false
	}
	return callID, name, result, true
}

// LateResults reports, for each message of msgs, whether it is a tool
// message answering a call that an earlier tool message in msgs already
// answered. Those are the messages a provider sends as LateResultText. A
// call is the newest assistant message's that names its id: a model may
// use an id again once its call was answered, and the new call's result
// is not late.
func LateResults(msgs []turn.Message) []bool {
	late := make([]bool, len(msgs))
	answered := make(map[string]bool)
	for i, m := range msgs {
		if m.Role == turn.RoleAssistant {
			for _, c := range m.ToolCalls {
				delete(answered, c.ID)
			}
		}
		if m.Role != turn.RoleTool {
			continue
		}
		if answered[m.CallID] {
			late[i] = true
			continue
		}
		answered[m.CallID] = true
	}
	return late
}
