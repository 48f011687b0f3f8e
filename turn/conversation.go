package turn

import "fmt"

// Role says who wrote a message.
type Role uint8

const (
	RoleSystem Role = iota + 1
	RoleUser
	RoleAssistant
	RoleTool
)

func (r Role) String() string {
	switch r {
	case RoleSystem:
		return "system"
	case RoleUser:
		return "user"
	case RoleAssistant:
		return "assistant"
	case RoleTool:
		return "tool"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

func (r Role) valid() bool { return r >= RoleSystem && r <= RoleTool }

// Message is one entry of a conversation. Assistant messages may carry tool
// calls; tool messages answer one call by its id.
type Message struct {
	Role      Role       `msgpack:"r"`
	Text      string     `msgpack:"t,omitempty"`
	ToolCalls []ToolCall `msgpack:"c,omitempty"`
	// CallID and Name identify the call a tool message answers.
	CallID string `msgpack:"i,omitempty"`
	Name   string `msgpack:"n,omitempty"`
	// Error marks a tool message whose call failed, was blocked or cancelled.
	Error bool `msgpack:"e,omitempty"`
	// Pending marks a placeholder answer for a suspended call. Providers
	// require every call to be answered before the conversation goes on; the
	// real answer is appended later with the same CallID.
	Pending bool `msgpack:"p,omitempty"`
}

// ToolCall is one call the model asked for. Arguments is JSON text, kept as
// the model wrote it so that hashing sees exactly what was asked.
type ToolCall struct {
	ID        string `msgpack:"i"`
	Name      string `msgpack:"n"`
	Arguments string `msgpack:"a,omitempty"`
}

// ToolSpec describes a tool offered to the model. Schema is the JSON schema of
// its arguments, as JSON text.
type ToolSpec struct {
	Name        string `msgpack:"n"`
	Description string `msgpack:"d,omitempty"`
	Schema      string `msgpack:"s,omitempty"`
}

// Sampling holds the provider's sampling parameters. Nil pointers and zero
// values mean "the provider's default".
type Sampling struct {
	Temperature *float64 `msgpack:"t,omitempty"`
	TopP        *float64 `msgpack:"p,omitempty"`
	MaxTokens   int      `msgpack:"m,omitempty"`
	Stop        []string `msgpack:"s,omitempty"`
}

// ModelRequest is everything a model call sends. It is hashed, so it holds
// no maps and no field whose encoding could vary between runs.
type ModelRequest struct {
	Model    string     `msgpack:"m"`
	Messages []Message  `msgpack:"g"`
	Tools    []ToolSpec `msgpack:"t,omitempty"`
	Sampling Sampling   `msgpack:"s"`
}

// FinishReason says why the model stopped producing output.
type FinishReason string

const (
	FinishStop          FinishReason = "stop"
	FinishToolCalls     FinishReason = "tool_calls"
	FinishLength        FinishReason = "length"
	FinishContentFilter FinishReason = "content_filter"
)

// ModelResponse is what a successful model call returned.
type ModelResponse struct {
	Text      string       `msgpack:"t,omitempty"`
	ToolCalls []ToolCall   `msgpack:"c,omitempty"`
	Finish    FinishReason `msgpack:"f,omitempty"`
	Usage     Usage        `msgpack:"u"`
}

// Usage counts tokens.
type Usage struct {
	InputTokens  int64 `msgpack:"i"`
	OutputTokens int64 `msgpack:"o"`
	// Of InputTokens, those read from the provider's prompt cache and
	// those written to it; of OutputTokens, those spent reasoning. Zero
	// when the provider does not say.
	CacheReadTokens  int64 `msgpack:"r,omitempty"`
	CacheWriteTokens int64 `msgpack:"w,omitempty"`
	ReasoningTokens  int64 `msgpack:"x,omitempty"`
}

// Total is input plus output tokens.
func (u Usage) Total() int64 { return u.InputTokens + u.OutputTokens }

// Add returns the sum of two usages.
func (u Usage) Add(o Usage) Usage {
	return Usage{InputTokens: u.InputTokens + o.InputTokens, OutputTokens: u.OutputTokens + o.OutputTokens,
		CacheReadTokens: u.CacheReadTokens + o.CacheReadTokens, CacheWriteTokens: u.CacheWriteTokens + o.CacheWriteTokens,
		ReasoningTokens: u.ReasoningTokens + o.ReasoningTokens}
}
