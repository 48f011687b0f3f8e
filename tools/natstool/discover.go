package natstool

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

const (
	// DefaultDiscoverTimeout bounds discovery when ctx has no deadline.
	DefaultDiscoverTimeout = 2 * time.Second
	// DiscoverQuiet ends discovery once no service has answered for this
	// long after the first answer: there is no way to know how many services
	// will answer, and all on one server answer within milliseconds.
	DiscoverQuiet = 200 * time.Millisecond
)

// Discover returns one tool for each name served under <prefix>.tool.*, in
// name order. It asks every micro service for its info and gathers the
// answers until none has come for DiscoverQuiet, or until ctx's deadline
// (DefaultDiscoverTimeout when ctx has none). An empty prefix means
// DefaultPrefix.
//
// Instances of a service, and services that agree on a tool's schema and
// description, collapse into one tool. A tool whose endpoints disagree is
// left out with an ErrConflict error naming both services; an endpoint
// whose name or metadata is malformed is left out with an ErrMalformed
// error. Discover then returns the good tools together with those errors,
// joined, so a caller may log them and go on. Any other error (the
// connection failed, ctx was cancelled) comes with no tools.
func Discover(ctx context.Context, nc *nats.Conn, prefix string) ([]tools.Tool, error) {
	prefix, err := checkPrefix(prefix)
	if err != nil {
		return nil, err
	}
	infos, problems, err := gatherInfo(ctx, nc)
	if err != nil {
		return nil, err
	}
	// Answers come in any order; sorting keeps the errors and the choice of
	// the named first service the same from run to run.
	slices.SortFunc(infos, func(a, b micro.Info) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Version, b.Version), cmp.Compare(a.ID, b.ID))
	})

	type found struct {
		spec  turn.ToolSpec
		from  micro.Info
		clash bool
	}
	byName := map[string]*found{}
	base := prefix + ".tool."
	for _, info := range infos {
		for _, ep := range info.Endpoints {
			name, ok := strings.CutPrefix(ep.Subject, base)
			if !ok {
				continue
			}
			spec, err := endpointSpec(name, ep)
			if err != nil {
				problems = append(problems, fmt.Errorf("%w: service %s, endpoint %q on %s: %v",
					ErrMalformed, serviceName(info), ep.Name, ep.Subject, err))
				continue
			}
			f, ok := byName[name]
			if !ok {
				byName[name] = &found{spec: spec, from: info}
				continue
			}
			if what := differ(f.spec, spec); what != "" {
				f.clash = true
				problems = append(problems, &ConflictError{Name: name,
					Detail: fmt.Sprintf("services %s and %s differ in %s", serviceName(f.from), serviceName(info), what)})
			}
		}
	}
	var out []tools.Tool
	for name, f := range byName {
		if !f.clash {
			out = append(out, &remote{nc: nc, spec: f.spec, subject: Subject(prefix, name)})
		}
	}
	slices.SortFunc(out, func(a, b tools.Tool) int { return cmp.Compare(a.Spec().Name, b.Spec().Name) })
	return out, errors.Join(problems...)
}

func endpointSpec(name string, ep micro.EndpointInfo) (turn.ToolSpec, error) {
	schema, ok := ep.Metadata[MetaSchema]
	if !ok {
		return turn.ToolSpec{}, fmt.Errorf("no %s metadata", MetaSchema)
	}
	return checkSpec(turn.ToolSpec{Name: name, Description: ep.Metadata[MetaDescription], Schema: schema})
}

func differ(a, b turn.ToolSpec) string {
	switch {
	case a.Schema != b.Schema && a.Description != b.Description:
		return "schema and description"
	case a.Schema != b.Schema:
		return "schema"
	case a.Description != b.Description:
		return "description"
	}
	return ""
}

func serviceName(info micro.Info) string {
	return fmt.Sprintf("%q (version %s, id %s)", info.Name, info.Version, info.ID)
}

// gatherInfo publishes one $SRV.INFO request and collects the answers. An
// answer that is not a service's info is a problem, not a failure.
func gatherInfo(ctx context.Context, nc *nats.Conn) ([]micro.Info, []error, error) {
	if nc == nil {
		return nil, nil, errors.New("natstool: nil connection")
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("natstool: discover: %w", err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultDiscoverTimeout)
		defer cancel()
	}
	subject, err := micro.ControlSubject(micro.InfoVerb, "", "")
	if err != nil {
		return nil, nil, err
	}
	sub, err := nc.SubscribeSync(nc.NewInbox())
	if err != nil {
		return nil, nil, fmt.Errorf("natstool: discover: %w", err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(subject, sub.Subject, nil); err != nil {
		return nil, nil, fmt.Errorf("natstool: discover: %w", err)
	}

	var infos []micro.Info
	var problems []error
	answered := false
	for {
		wait, cancel := ctx, context.CancelFunc(func() {})
		if answered {
			wait, cancel = context.WithTimeout(ctx, DiscoverQuiet)
		}
		m, err := sub.NextMsgWithContext(wait)
		cancel()
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			return nil, nil, nil // no service at all
		case err != nil && errors.Is(ctx.Err(), context.Canceled):
			return nil, nil, fmt.Errorf("natstool: discover: %w", ctx.Err())
		case err != nil && (ctx.Err() != nil || wait.Err() != nil):
			return infos, problems, nil // the deadline or the quiet period ended it
		case err != nil:
			return nil, nil, fmt.Errorf("natstool: discover: %w", err)
		}
		answered = true
		var info micro.Info
		if err := json.Unmarshal(m.Data, &info); err != nil || info.Type != micro.InfoResponseType {
			problems = append(problems, fmt.Errorf("%w: an answer to %s is not a service's info: %.100q",
				ErrMalformed, subject, m.Data))
			continue
		}
		infos = append(infos, info)
	}
}
