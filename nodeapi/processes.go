package nodeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/lash-run/lash"
	"time"

	"github.com/lash-run/lash/processes"
)

// Process endpoints.
const (
	EndpointProcessStart  = "process_start"
	EndpointProcessStatus = "process_status"
	EndpointProcessCancel = "process_cancel"
	EndpointProcessAwait  = "process_await"
)

// ProcessStartRequest registers a process: a tool of the nodes run in the
// background (tool: its name, args: its arguments), or work owned outside
// lash (external_ref). Registering the same id with the same content again
// answers the process as it stands; other content is refused (409).
type ProcessStartRequest struct {
	ID   string          `json:"id"`
	Tool string          `json:"tool,omitempty"`
	Args json.RawMessage `json:"args,omitempty"`
	// ExternalRef names external work instead of a tool.
	ExternalRef string `json:"external_ref,omitempty"`
	// Disposition: rerunnable (the default for a tool) or owner_bound;
	// external work is externally_owned.
	Disposition string `json:"disposition,omitempty"`
	// WakeSession, if set, gets an input when the process ends.
	WakeSession string `json:"wake_session,omitempty"`
	Label       string `json:"label,omitempty"`
}

func (r *ProcessStartRequest) missing() []string {
	if r.Tool == "" && r.ExternalRef == "" {
		return need(nil, "id", r.ID, "tool or external_ref", "")
	}
	return need(nil, "id", r.ID)
}

// ProcessRequest names a process; Reason goes with a cancel, and
// TimeoutMS bounds an await (default and most: the node's request
// timeout less a second).
type ProcessRequest struct {
	ID        string `json:"id"`
	Reason    string `json:"reason,omitempty"`
	TimeoutMS int    `json:"timeout_ms,omitempty"`
}

func (r *ProcessRequest) missing() []string { return need(nil, "id", r.ID) }

// ProcessInfo is a process as its log says. Outcome is the terminal
// event's data: a completed process's result, a failure's code and
// message, a cancel's reason, an abandonment's writer and evidence.
type ProcessInfo struct {
	ID          string          `json:"id"`
	Status      string          `json:"status"`
	Ended       bool            `json:"ended"`
	Disposition string          `json:"disposition"`
	Kind        string          `json:"kind"`
	Attempts    int             `json:"attempts"`
	Events      uint64          `json:"events"`
	Created     bool            `json:"created,omitempty"`
	Outcome     json.RawMessage `json:"outcome,omitempty"`
}

func processInfo(p *processes.Process) *ProcessInfo {
	info := &ProcessInfo{ID: p.ID, Status: string(p.Status()), Ended: p.Ended(), Disposition: string(p.Registration.Disposition),
		Kind: string(p.Registration.Input.Kind), Attempts: p.Attempts(), Events: p.Events}
	if p.End != nil {
		info.Outcome = p.End.Data
	}
	return info
}

// processError maps the registry's refusals to the API's codes.
func processError(err error) error {
	switch {
	case errors.Is(err, processes.ErrUnknown):
		return &Error{Code: CodeNotFound, Description: err.Error()}
	case errors.Is(err, processes.ErrInvalid):
		return &Error{Code: CodeBadRequest, Description: err.Error()}
	case errors.Is(err, processes.ErrConflict), errors.Is(err, processes.ErrTerminal), errors.Is(err, processes.ErrRefused):
		return &Error{Code: CodeBusy, Description: err.Error()}
	}
	return err
}

func (s *Server) processStart(ctx context.Context, data []byte) (any, error) {
	var req ProcessStartRequest
	if err := s.decode(data, &req, false); err != nil {
		return nil, err
	}
	reg := processes.Registration{Provenance: processes.Provenance{Host: s.node.ID()}, WakeTarget: req.WakeSession, Label: req.Label,
		Disposition: processes.Disposition(req.Disposition)}
	switch {
	case req.Tool != "" && req.ExternalRef != "":
		return nil, badRequest("a process runs a tool or is external work, not both")
	case req.Tool != "":
		if _, ok := s.node.Tools().Get(req.Tool); !ok && req.Tool != lash.BackgroundProgramTool {
			return nil, badRequest("no tool %q on this node", req.Tool)
		}
		if reg.Disposition == "" {
			reg.Disposition = processes.Rerunnable
		}
		reg.Input = processes.Input{Kind: processes.ToolCall, Tool: req.Tool, Args: req.Args}
		if len(reg.Input.Args) == 0 {
			reg.Input.Args = json.RawMessage(`{}`)
		}
	default:
		if reg.Disposition == "" {
			reg.Disposition = processes.ExternallyOwned
		}
		reg.Input = processes.Input{Kind: processes.External, ExternalRef: req.ExternalRef}
	}
	p, created, err := s.node.Processes().Register(ctx, req.ID, reg)
	if err != nil {
		return nil, processError(err)
	}
	info := processInfo(p)
	info.Created = created
	return info, nil
}

func (s *Server) processStatus(ctx context.Context, data []byte) (any, error) {
	var req ProcessRequest
	if err := s.decode(data, &req, false); err != nil {
		return nil, err
	}
	p, err := s.node.Processes().Get(ctx, req.ID)
	if err != nil {
		return nil, processError(err)
	}
	return processInfo(p), nil
}

func (s *Server) processCancel(ctx context.Context, data []byte) (any, error) {
	var req ProcessRequest
	if err := s.decode(data, &req, false); err != nil {
		return nil, err
	}
	if _, err := s.node.Processes().RequestCancel(ctx, req.ID, req.Reason); err != nil {
		return nil, processError(err)
	}
	return s.processStatus(ctx, data)
}

// processAwait answers when the process ends or the timeout passes,
// whichever is first: then with the process as it stands (ended false).
func (s *Server) processAwait(ctx context.Context, data []byte) (any, error) {
	var req ProcessRequest
	if err := s.decode(data, &req, false); err != nil {
		return nil, err
	}
	most := max(s.cfg.Timeout-time.Second, time.Second)
	wait := most
	if req.TimeoutMS < 0 {
		return nil, badRequest("timeout_ms %d: must not be negative", req.TimeoutMS)
	}
	if req.TimeoutMS > 0 {
		wait = min(time.Duration(req.TimeoutMS)*time.Millisecond, most)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	p, err := s.node.Processes().Await(wctx, req.ID)
	if err == nil {
		return processInfo(p), nil
	}
	if wctx.Err() != nil && ctx.Err() == nil {
		return s.processStatus(ctx, data)
	}
	return nil, processError(err)
}

// ProcessStart registers a process.
func (c *Client) ProcessStart(ctx context.Context, req ProcessStartRequest) (*ProcessInfo, error) {
	var out ProcessInfo
	return &out, c.call(ctx, EndpointProcessStart, req, &out)
}

// ProcessStatus returns a process as it stands.
func (c *Client) ProcessStatus(ctx context.Context, id string) (*ProcessInfo, error) {
	var out ProcessInfo
	return &out, c.call(ctx, EndpointProcessStatus, ProcessRequest{ID: id}, &out)
}

// ProcessCancel asks a process's runner to stop.
func (c *Client) ProcessCancel(ctx context.Context, id, reason string) (*ProcessInfo, error) {
	var out ProcessInfo
	return &out, c.call(ctx, EndpointProcessCancel, ProcessRequest{ID: id, Reason: reason}, &out)
}

// ProcessAwait waits up to timeout (0: the node's most) for the process to
// end; the answer's Ended says whether it did.
func (c *Client) ProcessAwait(ctx context.Context, id string, timeout time.Duration) (*ProcessInfo, error) {
	var out ProcessInfo
	if err := c.call(ctx, EndpointProcessAwait, ProcessRequest{ID: id, TimeoutMS: int(timeout.Milliseconds())}, &out); err != nil {
		return nil, fmt.Errorf("await %s: %w", id, err)
	}
	return &out, nil
}
