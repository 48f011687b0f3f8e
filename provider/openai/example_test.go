package openai_test

import (
	"context"
	"fmt"
	"time"

	"github.com/lash-run/lash/provider/openai"
	"github.com/lash-run/lash/turn"
)

// A client for a local Ollama; for vLLM, llama.cpp's server or OpenAI only
// the base URL (and the API key) differ.
func ExampleClient_Complete() {
	c, err := openai.New(openai.Config{
		BaseURL: "http://localhost:11434/v1",
		Model:   "qwen3:8b",
		Timeout: 2 * time.Minute,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	req := turn.ModelRequest{Messages: []turn.Message{{Role: turn.RoleUser, Text: "Say hello."}}}
	resp, err := c.Complete(context.Background(), req, func(delta string) { fmt.Print(delta) })
	if err != nil {
		ce := openai.CallError(err) // what the turn machine is fed
		fmt.Println("failed:", ce.Code, "retryable:", ce.Retryable)
		return
	}
	fmt.Println("\nfinish:", resp.Finish, "tokens:", resp.Usage.Total())
}
