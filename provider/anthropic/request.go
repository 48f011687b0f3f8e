package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/lash-run/lash/provider"
	"github.com/lash-run/lash/turn"
)

// params maps a lash request to the SDK's, with the sampling parameters
// the SDK has no field for as options. Failures are terminal *Error with
// code invalid_request.
func (c *Client) params(req turn.ModelRequest) (sdk.MessageNewParams, []option.RequestOption, error) {
	var p sdk.MessageNewParams
	p.Model = sdk.Model(req.Model)
	if p.Model == "" {
		p.Model = sdk.Model(c.cfg.Model)
	}
	if p.Model == "" {
		return p, nil, invalid("the request names no model and Config.Model is empty")
	}
	system, msgs, err := messages(req.Messages)
	if err != nil {
		return p, nil, err
	}
	p.System, p.Messages = system, msgs
	for _, t := range req.Tools {
		tool, err := toolParam(t)
		if err != nil {
			return p, nil, err
		}
		p.Tools = append(p.Tools, sdk.ToolUnionParam{OfTool: tool})
	}
	s := req.Sampling
	p.MaxTokens = c.cfg.MaxTokens
	if s.MaxTokens > 0 {
		p.MaxTokens = int64(s.MaxTokens)
	}
	p.StopSequences = s.Stop
	var extra []option.RequestOption
	if s.Temperature != nil {
		extra = append(extra, option.WithJSONSet("temperature", *s.Temperature))
	}
	if s.TopP != nil {
		extra = append(extra, option.WithJSONSet("top_p", *s.TopP))
	}
	return p, extra, nil
}

// messages maps the conversation. A first system message is the system
// prompt; a later one (a node's notice) is a system message in the
// conversation. Tool results
// go in the user turn after the assistant's tool use, with user text that
// follows them: the API wants turns that alternate. A tool message for a
// call an earlier one answered (the real result after a pending
// placeholder) is user text, provider.LateResultText.
func messages(in []turn.Message) ([]sdk.TextBlockParam, []sdk.MessageParam, error) {
	late := provider.LateResults(in)
	var (
		system []sdk.TextBlockParam
		out    []sdk.MessageParam
		role   turn.Role
		blocks []sdk.ContentBlockParamUnion
	)
	flush := func() {
		if len(blocks) == 0 {
			return
		}
		if role == turn.RoleAssistant {
			out = append(out, sdk.NewAssistantMessage(blocks...))
		} else {
			out = append(out, sdk.NewUserMessage(blocks...))
		}
		blocks = nil
	}
	add := func(r turn.Role, b sdk.ContentBlockParamUnion) {
		if r != role {
			flush()
			role = r
		}
		blocks = append(blocks, b)
	}
	for i, m := range in {
		switch m.Role {
		case turn.RoleSystem:
			if i == 0 {
				system = append(system, sdk.TextBlockParam{Text: m.Text})
				continue
			}
			// A notice later in the conversation stays the system's word,
			// never the user's.
			flush()
			role = turn.RoleSystem
			out = append(out, sdk.MessageParam{OfSystem: &sdk.SystemMessageParam{Content: []sdk.TextBlockParam{{Text: nonEmpty(m.Text)}}}})
		case turn.RoleUser:
			add(turn.RoleUser, sdk.NewTextBlock(nonEmpty(m.Text)))
		case turn.RoleAssistant:
			if m.Text != "" {
				add(turn.RoleAssistant, sdk.NewTextBlock(m.Text))
			}
			for _, tc := range m.ToolCalls {
				input := json.RawMessage(bytes.TrimSpace([]byte(tc.Arguments)))
				if len(input) == 0 || !json.Valid(input) || input[0] != '{' {
					input = json.RawMessage(`{}`)
				}
				add(turn.RoleAssistant, sdk.NewToolUseBlock(tc.ID, input, tc.Name))
			}
			if m.Text == "" && len(m.ToolCalls) == 0 {
				add(turn.RoleAssistant, sdk.NewTextBlock(nonEmpty("")))
			}
		case turn.RoleTool:
			if late[i] {
				add(turn.RoleUser, sdk.NewTextBlock(provider.LateResultText(m)))
				continue
			}
			add(turn.RoleUser, sdk.NewToolResultBlock(m.CallID, nonEmpty(m.Text), m.Error))
		default:
			return nil, nil, invalid(fmt.Sprintf("message %d has no valid role (%v)", i, m.Role))
		}
	}
	flush()
	return system, out, nil
}

// nonEmpty stands in for an empty text, which the API refuses.
func nonEmpty(s string) string {
	if s == "" {
		return "(empty)"
	}
	return s
}

// toolParam maps a tool; its schema must be a JSON object.
func toolParam(t turn.ToolSpec) (*sdk.ToolParam, error) {
	tool := &sdk.ToolParam{Name: t.Name}
	if t.Description != "" {
		tool.Description = sdk.String(t.Description)
	}
	if schema := bytes.TrimSpace([]byte(t.Schema)); len(schema) > 0 {
		var top map[string]json.RawMessage
		if err := json.Unmarshal(schema, &top); err != nil || top == nil {
			return nil, invalid(fmt.Sprintf("the schema of tool %q is not a JSON object", t.Name))
		}
		for k, v := range top {
			switch k {
			case "type":
			case "properties":
				tool.InputSchema.Properties = v
			case "required":
				if err := json.Unmarshal(v, &tool.InputSchema.Required); err != nil {
					return nil, invalid(fmt.Sprintf("the schema of tool %q: required is not a list of names", t.Name))
				}
			default:
				if tool.InputSchema.ExtraFields == nil {
					tool.InputSchema.ExtraFields = map[string]any{}
				}
				tool.InputSchema.ExtraFields[k] = v
			}
		}
	}
	return tool, nil
}

func invalid(msg string) *Error {
	return &Error{Code: provider.CodeInvalidRequest, Message: msg}
}
