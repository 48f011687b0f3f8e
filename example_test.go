package lash_test

import (
	"context"
	"fmt"
	"os"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
)

// A node on an embedded NATS server runs a turn with a tool against a
// scripted model: send input, run the session, read the transcript.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "lash-example")
	defer os.RemoveAll(dir)

	model := scripted.NewModel(scripted.MustParse(`
rule look-up
  when tools = 0
  call clock {"zone":"UTC"}

default
  say It is noon in UTC.
`))
	reg := tools.New()
	clock, _ := tools.Func("clock", "the time in a zone", func(ctx context.Context, a struct {
		Zone string `json:"zone"`
	}) (string, error) {
		return "12:00 " + a.Zone, nil
	})
	reg.Register(clock)

	node, err := lash.Open(ctx, lash.WithEmbedded(dir), lash.WithModel(model), lash.WithTools(reg),
		lash.WithMachine(turn.Config{Model: "scripted"}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer node.Close(ctx)

	s := node.Session("demo")
	if _, _, err := s.Send(ctx, "msg-1", lash.Input{Text: "What time is it?"}); err != nil {
		fmt.Println(err)
		return
	}
	turns, err := s.Run(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(turns[0].Turn, turns[0].Outcome.Termination)
	transcript, _ := s.Transcript(ctx)
	for _, m := range transcript {
		fmt.Printf("%s: %s%s\n", m.Role, m.Text, calls(m))
	}
	// Output:
	// in-1 natural-end
	// user: What time is it?
	// assistant: [clock {"zone":"UTC"}]
	// tool: 12:00 UTC
	// assistant: It is noon in UTC.
}

func calls(m turn.Message) string {
	s := ""
	for _, c := range m.ToolCalls {
		s += fmt.Sprintf("[%s %s]", c.Name, c.Arguments)
	}
	return s
}
