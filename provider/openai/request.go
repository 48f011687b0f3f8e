package openai

import (
	"bytes"
	"encoding/json"
	"fmt"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/lash-run/lash/provider"
	"github.com/lash-run/lash/turn"
)

// params maps a lash request to the SDK's. Failures are terminal *Error
// with code invalid_request.
func (c *Client) params(req turn.ModelRequest) (sdk.ChatCompletionNewParams, error) {
	var p sdk.ChatCompletionNewParams
	p.Model = req.Model
	if p.Model == "" {
		p.Model = c.cfg.Model
	}
	if p.Model == "" {
		return p, invalid("the request names no model and Config.Model is empty")
	}
	msgs, err := messages(req.Messages)
	if err != nil {
		return p, err
	}
	p.Messages = msgs
	for _, t := range req.Tools {
		tool, err := functionTool(t)
		if err != nil {
			return p, err
		}
		p.Tools = append(p.Tools, tool)
	}
	s := req.Sampling
	if s.Temperature != nil {
		p.Temperature = sdk.Float(*s.Temperature)
	}
	if s.TopP != nil {
		p.TopP = sdk.Float(*s.TopP)
	}
	if s.MaxTokens > 0 {
		if c.cfg.MaxCompletionTokens {
			p.MaxCompletionTokens = sdk.Int(int64(s.MaxTokens))
		} else {
			p.MaxTokens = sdk.Int(int64(s.MaxTokens))
		}
	}
	if len(s.Stop) > 0 {
		p.Stop.OfStringArray = s.Stop
	}
	return p, nil
}

// messages maps the conversation. A tool message for a call that an earlier
// tool message already answered (the real result after a pending
// placeholder) becomes a user message with provider.LateResultText: the API
// accepts one tool message per tool_call_id.
func messages(in []turn.Message) ([]sdk.ChatCompletionMessageParamUnion, error) {
	late := provider.LateResults(in)
	out := make([]sdk.ChatCompletionMessageParamUnion, 0, len(in))
	for i, m := range in {
		switch m.Role {
		case turn.RoleSystem:
			out = append(out, sdk.SystemMessage(m.Text))
		case turn.RoleUser:
			out = append(out, sdk.UserMessage(m.Text))
		case turn.RoleAssistant:
			var a sdk.ChatCompletionAssistantMessageParam
			if m.Text != "" || len(m.ToolCalls) == 0 {
				a.Content.OfString = sdk.String(m.Text)
			}
			for _, tc := range m.ToolCalls {
				args := tc.Arguments
				if args == "" {
					args = "{}"
				}
				a.ToolCalls = append(a.ToolCalls, sdk.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
						ID:       tc.ID,
						Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: args},
					},
				})
			}
			out = append(out, sdk.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case turn.RoleTool:
			if late[i] {
				out = append(out, sdk.UserMessage(provider.LateResultText(m)))
				continue
			}
			out = append(out, sdk.ToolMessage(provider.ToolText(m), m.CallID))
		default:
			return nil, invalid(fmt.Sprintf("message %d has no valid role (%v)", i, m.Role))
		}
	}
	return out, nil
}

// functionTool maps a tool. Its schema is sent as the function's parameters
// with each top-level value as written; the API wants a JSON object there.
func functionTool(t turn.ToolSpec) (sdk.ChatCompletionToolUnionParam, error) {
	def := shared.FunctionDefinitionParam{Name: t.Name}
	if t.Description != "" {
		def.Description = sdk.String(t.Description)
	}
	if schema := bytes.TrimSpace([]byte(t.Schema)); len(schema) > 0 {
		var top map[string]json.RawMessage
		if err := json.Unmarshal(schema, &top); err != nil || top == nil {
			return sdk.ChatCompletionToolUnionParam{}, invalid(fmt.Sprintf("the schema of tool %q is not a JSON object", t.Name))
		}
		def.Parameters = make(shared.FunctionParameters, len(top))
		for k, v := range top {
			def.Parameters[k] = v
		}
	}
	return sdk.ChatCompletionFunctionTool(def), nil
}

func invalid(msg string) *Error {
	return &Error{Code: provider.CodeInvalidRequest, Message: msg}
}
