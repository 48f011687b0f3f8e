package natstool

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
)

// DefaultPrefix is the subject prefix used when a prefix is empty.
const DefaultPrefix = "lash"

// Endpoint metadata keys.
const (
	MetaDescription = "lash.description"
	MetaSchema      = "lash.schema"
)

// Request headers.
const (
	HeaderIdempotencyKey   = "Lash-Idempotency-Key"
	HeaderAttempt          = "Lash-Attempt"
	HeaderInDoubt          = "Lash-In-Doubt"
	HeaderCallID           = "Lash-Call-Id"
	HeaderDecision         = "Lash-Decision"
	HeaderDecisionEncoding = "Lash-Decision-Encoding"
	// HeaderCallTicket carries the call's ticket (tools.CallTicket): with
	// it the tool records steps and awaits events through the node API.
	HeaderCallTicket = "Lash-Call-Ticket"
)

// CodePending is the micro error code of a pending answer.
const CodePending = "409"

var (
	// ErrMalformed reports a tool endpoint whose name or metadata cannot be
	// offered to a model.
	ErrMalformed = errors.New("natstool: malformed tool endpoint")
	// ErrConflict reports two services offering one tool name with different
	// schemas or descriptions.
	ErrConflict = errors.New("natstool: conflicting tool definitions")
	// ErrInvalidPrefix refuses a prefix that is not a plain subject.
	ErrInvalidPrefix = errors.New("natstool: invalid prefix")
)

// Subject is the subject a tool is served on.
func Subject(prefix, name string) string { return prefix + ".tool." + name }

func checkPrefix(prefix string) (string, error) {
	if prefix == "" {
		return DefaultPrefix, nil
	}
	for _, tok := range strings.Split(prefix, ".") {
		if tok == "" || strings.ContainsAny(tok, "*> \t\r\n") {
			return "", fmt.Errorf("%w: %q", ErrInvalidPrefix, prefix)
		}
	}
	return prefix, nil
}

// checkSpec accepts a spec the tools package would register and a model
// provider would take, and returns it with its schema compacted, so the
// catalog's bytes do not depend on how a server spaced its JSON.
func checkSpec(spec turn.ToolSpec) (turn.ToolSpec, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(spec.Schema)); err != nil {
		return spec, fmt.Errorf("schema is not JSON: %v", err)
	}
	spec.Schema = buf.String()
	// The registry's own check, so names and schemas obey the same rules as
	// local tools.
	if err := tools.New().Register(specOnly(spec)); err != nil {
		return spec, err
	}
	if _, err := resolveSchema(spec.Schema); err != nil {
		return spec, err
	}
	return spec, nil
}

func resolveSchema(text string) (*jsonschema.Resolved, error) {
	var s jsonschema.Schema
	if err := json.Unmarshal([]byte(text), &s); err != nil {
		return nil, fmt.Errorf("schema is not a JSON schema: %v", err)
	}
	if s.Type != "object" {
		return nil, fmt.Errorf(`schema's type is %q; model providers take only "object"`, s.Type)
	}
	r, err := s.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("schema does not resolve: %v", err)
	}
	return r, nil
}

// specOnly lets Registry.Register check a spec.
type specOnly turn.ToolSpec

func (s specOnly) Spec() turn.ToolSpec { return turn.ToolSpec(s) }
func (specOnly) Call(context.Context, json.RawMessage) (tools.Result, error) {
	return tools.Result{}, errors.New("natstool: not callable")
}

// encodeDecision returns the header value for a decision payload and
// whether it is base64: nats.go turns line breaks into spaces and trims
// blanks, and other clients may take only ASCII.
func encodeDecision(payload string) (string, bool) {
	if headerSafe(payload) {
		return payload, false
	}
	return base64.StdEncoding.EncodeToString([]byte(payload)), true
}

func headerSafe(s string) bool {
	if s != strings.TrimSpace(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// oneLine makes s fit a header value; the full text goes in the body.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return "error"
	}
	return s
}

// ConflictError names a tool left out because its services disagree. It
// matches ErrConflict.
type ConflictError struct {
	Name   string
	Detail string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%v: tool %q: %s", ErrConflict, e.Name, e.Detail)
}

func (e *ConflictError) Unwrap() error { return ErrConflict }
