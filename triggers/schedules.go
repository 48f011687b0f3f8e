package triggers

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/lash-run/lash/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// Schedules are time as a source (ADR 0025): a schedule named N fires
// ticks, each published as the signal <prefix>.signal.cron.N, which
// subscriptions with source "cron.N" match like any other. A schedule is
// a repeating JetStream message schedule on the TIMERS stream, which the
// server fires once per tick whatever the number of nodes; a tick's
// signal carries the fired message's sequence as its idempotency key, so
// every tick is one occurrence.

// CronSource is the source type of schedule ticks.
const CronSource = "cron"

// TimerKind names schedule timers on the TIMERS stream.
const TimerKind = "cron"

// Schedule is a named repeating schedule.
type Schedule struct {
	Name    string `json:"name"`
	Pattern string `json:"pattern"`
	// Seq is the stream sequence of the schedule's definition.
	Seq uint64 `json:"seq"`
}

// Tick is the payload of a schedule's signal.
type Tick struct {
	Schedule string    `json:"schedule"`
	At       time.Time `json:"at"`
	Seq      uint64    `json:"seq"`
}

// ScheduleStore is what schedules need from the stream layer.
type ScheduleStore interface {
	Subjects() streams.Subjects
	Schedule(ctx context.Context, t streams.Timer) (bool, error)
	Unschedule(ctx context.Context, subject string) error
	Read(ctx context.Context, filter string, from uint64, fn func(*streams.Msg) error) error
}

var (
	everyRE = regexp.MustCompile(`^@every [0-9][0-9a-zµ.]*$`)
	cronRE  = regexp.MustCompile(`^[0-9*/,\-A-Za-z?]+( [0-9*/,\-A-Za-z?]+){5}$`)
)

// checkPattern refuses what is plainly not a schedule the server takes;
// the server checks the rest when the schedule is stored.
func checkPattern(p string) error {
	switch {
	case slices.Contains([]string{"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}, p):
	case everyRE.MatchString(p):
		d, err := time.ParseDuration(strings.TrimPrefix(p, "@every "))
		if err != nil || d < time.Second {
			return fmt.Errorf("%w: schedule %q: @every takes a duration of at least 1s", ErrInvalid, p)
		}
	case cronRE.MatchString(p):
	default:
		return fmt.Errorf("%w: schedule %q: give \"@every <duration>\", @hourly, @daily, @weekly, @monthly, @yearly, or six cron fields (seconds first)", ErrInvalid, clip(p))
	}
	return nil
}

// SetSchedule stores (or changes) the schedule name: it fires ticks on
// <prefix>.signal.cron.<name> from now on.
func SetSchedule(ctx context.Context, s ScheduleStore, name, pattern string) error {
	if !tokenRE.MatchString(name) || len(name) > 64 {
		return fmt.Errorf("%w: schedule name %q: one token of letters, digits, '_' and '-' (at most 64)", ErrInvalid, clip(name))
	}
	if err := checkPattern(pattern); err != nil {
		return err
	}
	subj := s.Subjects()
	at, err := subj.TimerAt(TimerKind, name, "_")
	if err != nil {
		return err
	}
	due, err := subj.TimerDue(TimerKind, name, "_")
	if err != nil {
		return err
	}
	_, err = s.Schedule(ctx, streams.Timer{Subject: at, Target: due, Pattern: pattern, Replace: true})
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && slices.Contains([]jetstream.ErrorCode{10188, 10189, 10190, 10191, 10192, 10203, 10212, 10223}, apiErr.ErrorCode) {
		return fmt.Errorf("%w: schedule %q: %s", ErrInvalid, pattern, apiErr.Description)
	}
	return err
}

// RemoveSchedule stops a schedule; ticks fired before still deliver.
func RemoveSchedule(ctx context.Context, s ScheduleStore, name string) error {
	at, err := s.Subjects().TimerAt(TimerKind, name, "_")
	if err != nil {
		return fmt.Errorf("%w: schedule name: %v", ErrInvalid, err)
	}
	return s.Unschedule(ctx, at)
}

// Schedules lists the schedules, by name.
func Schedules(ctx context.Context, s ScheduleStore) ([]Schedule, error) {
	subj := s.Subjects()
	prefix, _ := subj.TimerAt(TimerKind, "x", "_")
	prefix = strings.TrimSuffix(prefix, "x._")
	var out []Schedule
	err := s.Read(ctx, prefix+"*._", 0, func(m *streams.Msg) error {
		_, name, _, err := subj.TimerOf(m.Subject)
		if err != nil {
			return nil
		}
		out = append(out, Schedule{Name: name, Pattern: m.Header.Get(jetstream.ScheduleHeader), Seq: m.Seq})
		return nil
	})
	slices.SortFunc(out, func(a, b Schedule) int { return strings.Compare(a.Name, b.Name) })
	return out, err
}
