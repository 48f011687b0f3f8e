package lash

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
)

// blockingTools holds every weather call until released or cancelled; a
// cancelled call notes when in ended, if given.
func blockingTools(t *testing.T, started chan<- struct{}, release <-chan struct{}, ended ...*atomic.Int64) *tools.Registry {
	reg := tools.New()
	tool, err := tools.Func("weather", "current weather", func(ctx context.Context, a weatherArgs) (string, error) {
		select {
		case started <- struct{}{}:
		default:
		}
		select {
		case <-release:
			return "fine", nil
		case <-ctx.Done():
			for _, e := range ended {
				e.Store(time.Now().UnixNano())
			}
			return "", ctx.Err()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	reg.Register(tool)
	return reg
}

// Close drains: a turn that finishes within the deadline commits; one that
// does not is stopped, releases its lease at once, and another node
// finishes it by replay.
func TestCloseDrains(t *testing.T) {
	for _, finish := range []bool{true, false} {
		t.Run(map[bool]string{true: "turn-finishes", false: "deadline-passes"}[finish], func(t *testing.T) {
			r := newRig(t)
			started, release := make(chan struct{}, 1), make(chan struct{})
			n := r.node("a", WithTools(blockingTools(t, started, release)))
			s := n.Session("s1")
			if _, _, err := s.Send(r.ctx, "k1", Input{Text: "Weather?"}); err != nil {
				t.Fatal(err)
			}
			ran := make(chan error, 1)
			go func() { _, err := s.Run(r.ctx); ran <- err }()
			<-started
			closed := make(chan error, 1)
			deadline := time.Minute
			if !finish {
				deadline = 100 * time.Millisecond
			}
			go func() {
				ctx, cancel := context.WithTimeout(r.ctx, deadline)
				defer cancel()
				closed <- n.Close(ctx)
			}()
			// New work is refused while draining.
			testenv.WaitFor(t, 5*time.Second, func() error {
				if _, err := n.Session("other").Run(r.ctx); !errors.Is(err, ErrClosed) {
					return errors.New("still taking work")
				}
				return nil
			})
			if finish {
				close(release)
				if err := <-ran; err != nil {
					t.Fatalf("the draining turn: %v", err)
				}
				if err := <-closed; err != nil {
					t.Fatalf("Close: %v", err)
				}
				return
			}
			if err := <-closed; !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Close past its deadline: %v", err)
			}
			if err := <-ran; err == nil {
				t.Fatal("the stopped turn reported success")
			}
			// The lease was released: another node claims it at once.
			b := r.node("b", WithTools(blockingTools(t, make(chan struct{}, 1), closedChan())))
			key, _ := leases.Key("sess", "s1")
			if _, err := leases.New(b.Streams(), leases.LocalOwner("probe")).Claim(r.ctx, key, 2*time.Second); err != nil {
				t.Fatalf("lease not released by the drain: %v", err)
			}
		})
	}
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}
