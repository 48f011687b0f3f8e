package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Request is what a route needs from an HTTP request: the wildcards of its
// path, its query and, for writes, its JSON body.
type Request struct {
	Path  map[string]string
	Query url.Values
	Body  []byte
}

// route maps an API path to the lash-admin command line that answers it.
type route struct {
	pattern string // a net/http pattern
	write   bool   // a write: refused by a read-only console
	argv    func(r Request) ([]string, error)
}

// maxBody bounds a request body: a decision is a few hundred bytes.
const maxBody = 64 << 10

// routes lists the API. Positional arguments follow "--", so a path value
// is never taken for a flag; flags carry their values after "=".
var routes = []route{
	{pattern: "GET /api/sessions", argv: func(r Request) ([]string, error) {
		argv := []string{"sessions", "ls"}
		for _, f := range []string{"state", "after", "sort", "limit", "label"} {
			if v := r.Query.Get(f); v != "" {
				argv = append(argv, "--"+f+"="+v)
			}
		}
		return argv, nil
	}},
	{pattern: "GET /api/sessions/{id}", argv: session("sessions", "show")},
	{pattern: "GET /api/sessions/{id}/transcript", argv: session("transcript")},
	{pattern: "GET /api/sessions/{id}/turns", argv: session("turns")},
	{pattern: "GET /api/sessions/{id}/turns/{turn}/effects", argv: func(r Request) ([]string, error) {
		return []string{"effects", "--", r.Path["id"], r.Path["turn"]}, nil
	}},
	{pattern: "POST /api/sessions/{id}/decide", write: true, argv: decide},
	{pattern: "GET /api/quarantine", argv: fixed("quarantine", "ls")},
	{pattern: "GET /api/nodes", argv: fixed("nodes", "ls")},
	{pattern: "GET /api/leases", argv: fixed("leases", "ls")},
	{pattern: "GET /api/processes", argv: func(r Request) ([]string, error) {
		argv := []string{"processes", "ls"}
		for _, f := range []string{"status", "session"} {
			if v := r.Query.Get(f); v != "" {
				argv = append(argv, "--"+f+"="+v)
			}
		}
		return argv, nil
	}},
	{pattern: "GET /api/triggers", argv: fixed("triggers", "ls")},
	{pattern: "GET /api/triggers/deliveries", argv: fixed("triggers", "deliveries")},
	{pattern: "GET /api/agents", argv: fixed("agents", "ls")},
	{pattern: "GET /api/agents/{name}", argv: func(r Request) ([]string, error) {
		return []string{"agents", "show", "--", r.Path["name"]}, nil
	}},
	{pattern: "GET /api/agents/{name}/history", argv: func(r Request) ([]string, error) {
		return []string{"agents", "history", "--", r.Path["name"]}, nil
	}},
}

func fixed(argv ...string) func(Request) ([]string, error) {
	return func(Request) ([]string, error) { return argv, nil }
}

func session(cmd ...string) func(Request) ([]string, error) {
	return func(r Request) ([]string, error) { return append(cmd, "--", r.Path["id"]), nil }
}

// Decision is the body of a decide request: approve runs the suspended
// call again (lash-admin decide ID CALL resume), deny cancels it. Key is
// the decision's idempotency key: the page sends the same key when it
// retries, and the session applies the decision once.
type Decision struct {
	CallID string `json:"call_id"`
	Action string `json:"action"` // "approve" or "deny"
	Key    string `json:"key"`
}

// ErrBadRequest marks a request the console or lash-admin refused as
// invalid; ErrNotFound one naming something that does not exist.
var (
	ErrBadRequest = errors.New("bad request")
	ErrNotFound   = errors.New("not found")
)

// refusal is a message that is one of those errors without saying so.
type refusal struct {
	kind error
	msg  string
}

func (e *refusal) Error() string        { return e.msg }
func (e *refusal) Is(target error) bool { return target == e.kind }

// BadRequest and NotFound make errors for a Source to return.
func BadRequest(msg string) error { return &refusal{ErrBadRequest, msg} }
func NotFound(msg string) error   { return &refusal{ErrNotFound, msg} }

func decide(r Request) ([]string, error) {
	var d Decision
	dec := json.NewDecoder(strings.NewReader(string(r.Body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return nil, BadRequest(fmt.Sprintf("decision: %v", err))
	}
	action := map[string]string{"approve": "resume", "deny": "cancel"}[d.Action]
	switch {
	case action == "":
		return nil, BadRequest(fmt.Sprintf("decision action %s: give approve or deny", strconv.Quote(d.Action)))
	case d.CallID == "":
		return nil, BadRequest("decision without a call_id")
	}
	argv := []string{"decide"}
	if d.Key != "" {
		argv = append(argv, "--key="+d.Key)
	}
	return append(argv, "--", r.Path["id"], d.CallID, action), nil
}
