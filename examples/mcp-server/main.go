// Command mcp-server serves lash's example ledger as a Model Context
// Protocol server on the official Go SDK: over its standard input and
// output (a child process of the node, the default) or over streamable
// HTTP (--http ADDR). Its tool ledger_append appends an entry to a ledger
// file at most once per idempotency key, which lash sends in the call's
// _meta ("lash/idempotency_key"): a call retried in doubt after a node
// died finds its key and does not append again. echo_meta answers with
// the _meta it got.
//
// --calls FILE logs one line per invocation, for tests that count them;
// --test-tools adds crash (the process exits mid-call), hang (never
// answers) and huge (answers 10 MiB).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lash-run/lash/internal/ledger"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mcp-server:", err)
		os.Exit(1)
	}
}

type appendArgs struct {
	Entry string `json:"entry" jsonschema:"the line to append"`
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("mcp-server", flag.ContinueOnError)
	path := fs.String("journal", "ledger.jsonl", "the ledger `FILE`, one JSON line per appended entry")
	calls := fs.String("calls", "", "log one line per invocation to this `FILE`")
	addr := fs.String("http", "", "serve streamable HTTP on this `address` instead of stdio")
	testTools := fs.Bool("test-tools", false, "add the tools crash, hang and huge")
	if err := fs.Parse(args); err != nil {
		return err
	}
	l := ledger.New(*path)
	var mu sync.Mutex
	logCall := func(tool string, meta mcp.Meta) {
		if *calls == "" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		f, err := os.OpenFile(*calls, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return
		}
		defer f.Close()
		_, ticket := meta[`lash/call_ticket`].(string)
		fmt.Fprintf(f, "%s %v ticket=%t\n", tool, meta[`lash/idempotency_key`], ticket)
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "lash-ledger", Version: "1.0.0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "ledger_append", Description: "Append an entry to the ledger. Each call appends at most once, even when retried."},
		func(_ context.Context, req *mcp.CallToolRequest, a appendArgs) (*mcp.CallToolResult, any, error) {
			meta := req.Params.GetMeta()
			logCall("ledger_append", meta)
			key, _ := meta["lash/idempotency_key"].(string)
			if key == "" {
				return nil, nil, fmt.Errorf("no lash/idempotency_key in _meta")
			}
			applied, err := l.Append(key, a.Entry)
			if err != nil {
				return nil, nil, err
			}
			text := "appended"
			if !applied {
				text = "already appended"
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "echo_meta", Description: "Answer with the _meta of the call."},
		func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			logCall("echo_meta", req.Params.GetMeta())
			b, _ := json.Marshal(req.Params.GetMeta())
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}, nil, nil
		})
	if *testTools {
		mcp.AddTool(s, &mcp.Tool{Name: "crash", Description: "The process exits mid-call."},
			func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
				logCall("crash", req.Params.GetMeta())
				os.Exit(3)
				return nil, nil, nil
			})
		mcp.AddTool(s, &mcp.Tool{Name: "hang", Description: "Never answers."},
			func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
				logCall("hang", req.Params.GetMeta())
				<-ctx.Done()
				return nil, nil, ctx.Err()
			})
		mcp.AddTool(s, &mcp.Tool{Name: "huge", Description: "Answers 10 MiB."},
			func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
				logCall("huge", req.Params.GetMeta())
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", 10<<20)}}}, nil, nil
			})
	}
	if *addr == "" {
		return s.Run(ctx, &mcp.StdioTransport{})
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "mcp-server: serving streamable HTTP on http://%s/mcp\n", ln.Addr())
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	srv := &http.Server{Handler: mux}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}
