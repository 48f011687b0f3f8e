package gateway_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lash-run/lash/gateway"
)

func uiUser(id, text string) map[string]any {
	return map[string]any{"id": id, "role": "user", "parts": []any{map[string]any{"type": "text", "text": text}}}
}

func types(chunks []map[string]any) []string {
	var out []string
	for _, c := range chunks {
		out = append(out, fmt.Sprint(c["type"]))
	}
	return out
}

// text joins the deltas of the text parts, checking each part is started
// before its deltas and ended once.
func text(t *testing.T, chunks []map[string]any) string {
	t.Helper()
	open := map[any]bool{}
	var b strings.Builder
	for _, c := range chunks {
		switch c["type"] {
		case "text-start":
			open[c["id"]] = true
		case "text-delta":
			if !open[c["id"]] {
				t.Fatalf("a delta of part %v before its start", c["id"])
			}
			b.WriteString(c["delta"].(string))
		case "text-end":
			if !open[c["id"]] {
				t.Fatalf("part %v ended twice", c["id"])
			}
			delete(open, c["id"])
		}
	}
	if len(open) > 0 {
		t.Fatalf("parts left open: %v", open)
	}
	return b.String()
}

// The AI SDK's chat: a streamed answer, a tool call with its result, an
// approval asked and answered in the same message, the same message sent
// again (one input, its response replayed), and a resume with nothing
// under way.
func TestAISDKChat(t *testing.T) {
	r := newRig(t)
	tok := token(t, gateway.Grant{SessionPrefix: "chat-", Decide: true})
	post := func(body map[string]any) []map[string]any {
		s := r.open("POST", "/v1/ai-sdk/chat", tok, body)
		if s.res.StatusCode != 200 || s.res.Header.Get("X-Vercel-Ai-Ui-Message-Stream") != "v1" {
			t.Fatalf("chat: %d %v", s.res.StatusCode, s.res.Header)
		}
		return s.chunks(t, nil)
	}
	history := []any{uiUser("u1", "hi")}
	got := post(map[string]any{"id": "chat-1", "trigger": "submit-message", "messages": history})
	if tt := types(got); tt[0] != "start" || tt[len(tt)-2] != "finish" || tt[len(tt)-1] != "[DONE]" {
		t.Fatalf("chunks: %v", tt)
	}
	if s := text(t, got); s != "Hello there, this answer streams in pieces." {
		t.Fatalf("text %q", s)
	}
	if got[len(got)-2]["finishReason"] != "stop" {
		t.Fatalf("finish: %v", got[len(got)-2])
	}
	id := got[0]["messageId"]
	// The same message again: one input, the response replayed whole.
	again := post(map[string]any{"id": "chat-1", "trigger": "submit-message", "messages": history})
	if text(t, again) != text(t, got) || again[0]["messageId"] != id {
		t.Fatalf("replay: %v", types(again))
	}
	if st, err := r.client.Status(r.ctx, "chat-1"); err != nil || st.Inputs != 1 {
		t.Fatalf("inputs: %+v, %v", st, err)
	}

	got = post(map[string]any{"id": "chat-1", "trigger": "submit-message", "messages": []any{uiUser("u2", "weather?")}})
	var input, output map[string]any
	for _, c := range got {
		switch c["type"] {
		case "tool-input-available":
			input = c
		case "tool-output-available":
			output = c
		}
	}
	if input == nil || input["toolName"] != "get_weather" || fmt.Sprint(input["input"]) != "map[city:Oslo]" ||
		output == nil || output["toolCallId"] != input["toolCallId"] || output["output"] != "-3C in Oslo" {
		t.Fatalf("tool chunks: %v / %v", input, output)
	}
	if s := text(t, got); s != "It is cold in Oslo, as usual in winter." {
		t.Fatalf("text after the tool %q", s)
	}

	got = post(map[string]any{"id": "chat-2", "trigger": "submit-message", "messages": []any{uiUser("u3", "deploy it")}})
	var ask map[string]any
	for _, c := range got {
		if c["type"] == "tool-approval-request" {
			ask = c
		}
	}
	if ask == nil || got[len(got)-2]["finishReason"] != "tool-calls" {
		t.Fatalf("approval: %v", types(got))
	}
	msgID := got[0]["messageId"].(string)
	callID := ask["toolCallId"].(string)
	// The client answers in the assistant message it was asked in.
	answer := map[string]any{"id": msgID, "role": "assistant", "parts": []any{
		map[string]any{"type": "tool-wait_for_approval", "toolCallId": callID, "state": "approval-responded",
			"approval": map[string]any{"id": ask["approvalId"], "approved": true}}}}
	got = post(map[string]any{"id": "chat-2", "trigger": "submit-message", "messageId": msgID,
		"messages": []any{uiUser("u3", "deploy it"), answer}})
	if got[0]["type"] != "start" || got[0]["messageId"] != msgID {
		t.Fatalf("the continuation starts %v, want message %s", got[0], msgID)
	}
	var out map[string]any
	for _, c := range got {
		switch {
		case c["type"] == "tool-output-available" && c["toolCallId"] == callID:
			out = c
		case c["type"] == "tool-input-available":
			t.Fatalf("the continuation announces call %v again: the client would hold it twice", c["toolCallId"])
		}
	}
	if out == nil || text(t, got) != "Deployed." || got[len(got)-2]["finishReason"] != "stop" {
		t.Fatalf("after the approval: %v", got)
	}
	// An answer to an approval no call waits for is refused, and changes
	// nothing.
	stale := map[string]any{"id": msgID, "role": "assistant", "parts": []any{
		map[string]any{"type": "tool-wait_for_approval", "toolCallId": "call_404", "state": "approval-responded",
			"approval": map[string]any{"id": "call_404", "approved": true}}}}
	before, _ := r.client.Status(r.ctx, "chat-2")
	res, body := r.call("POST", "/v1/ai-sdk/chat", tok, map[string]any{"id": "chat-2", "trigger": "submit-message", "messageId": msgID, "messages": []any{stale}})
	if res.StatusCode != 400 || !strings.Contains(string(body), "call_404") {
		t.Fatalf("a stale approval: %d %s", res.StatusCode, body)
	}
	if after, _ := r.client.Status(r.ctx, "chat-2"); after.Inputs != before.Inputs {
		t.Fatalf("a refused approval appended an input: %d -> %d", before.Inputs, after.Inputs)
	}
	// Nothing under way: the resume is a 204.
	res, body = r.call("GET", "/v1/ai-sdk/chat/chat-1/stream", tok, nil)
	if res.StatusCode != 204 {
		t.Fatalf("resume with nothing under way: %d %s", res.StatusCode, body)
	}
}

// A reader that leaves mid-answer cancels nothing, and the AI SDK's resume
// replays the answer under way from its start, under the same message id.
func TestAISDKResume(t *testing.T) {
	r := newRig(t)
	tok := token(t, gateway.Grant{Sessions: []string{"c2"}})
	s := r.open("POST", "/v1/ai-sdk/chat", tok, map[string]any{"id": "c2", "trigger": "submit-message",
		"messages": []any{uiUser("u1", "say it slowly")}})
	first := s.chunks(t, func(c map[string]any) bool { return c["type"] == "text-delta" })
	s.close()
	re := r.open("GET", "/v1/ai-sdk/chat/c2/stream", tok, nil)
	if re.res.StatusCode != 200 {
		t.Fatalf("resume: %d", re.res.StatusCode)
	}
	got := re.chunks(t, nil)
	if got[0]["messageId"] != first[0]["messageId"] || text(t, got) != "one two three four five six seven eight nine ten eleven twelve" {
		t.Fatalf("resumed: %v", got)
	}
	st, err := r.client.Status(r.ctx, "c2")
	if err != nil || st.Termination != "natural-end" {
		t.Fatalf("the turn after its reader left: %+v, %v", st, err)
	}
}

// An AG-UI run: text messages, a tool call with its result, an interrupt
// for an approval and the run that resumes it.
func TestAGUIRun(t *testing.T) {
	r := newRig(t)
	tok := token(t, gateway.Grant{Sessions: []string{"t1", "t2"}, Decide: true})
	run := func(body map[string]any) []map[string]any {
		s := r.open("POST", "/v1/ag-ui", tok, body, "Accept", "text/event-stream")
		if s.res.StatusCode != 200 {
			t.Fatalf("run: %d", s.res.StatusCode)
		}
		return s.chunks(t, nil)
	}
	got := run(map[string]any{"threadId": "t1", "runId": "r1", "messages": []any{map[string]any{"id": "m1", "role": "user", "content": "weather?"}}})
	tt := types(got)
	if tt[0] != "RUN_STARTED" || tt[len(tt)-1] != "RUN_FINISHED" || got[len(got)-1]["outcome"] != nil {
		t.Fatalf("events: %v", tt)
	}
	var content strings.Builder
	results := 0
	for _, e := range got {
		switch e["type"] {
		case "TEXT_MESSAGE_CONTENT":
			content.WriteString(e["delta"].(string))
		case "TOOL_CALL_RESULT":
			results++
			if e["content"] != "-3C in Oslo" || e["messageId"] == nil {
				t.Fatalf("result: %v", e)
			}
		}
	}
	if content.String() != "It is cold in Oslo, as usual in winter." || results != 1 || !strings.Contains(strings.Join(tt, " "), "TOOL_CALL_START TOOL_CALL_ARGS TOOL_CALL_END") {
		t.Fatalf("events: %v, text %q", tt, content.String())
	}
	got = run(map[string]any{"threadId": "t2", "runId": "r2", "messages": []any{map[string]any{"id": "m2", "role": "user", "content": "deploy it"}}})
	last := got[len(got)-1]
	outcome, _ := last["outcome"].(map[string]any)
	if last["type"] != "RUN_FINISHED" || outcome["type"] != "interrupt" {
		t.Fatalf("interrupt: %v", last)
	}
	interrupt := outcome["interrupts"].([]any)[0].(map[string]any)
	got = run(map[string]any{"threadId": "t2", "runId": "r3", "messages": []any{},
		"resume": []any{map[string]any{"interruptId": interrupt["id"], "status": "resolved"}}})
	content.Reset()
	for _, e := range got {
		if e["type"] == "TEXT_MESSAGE_CONTENT" {
			content.WriteString(e["delta"].(string))
		}
	}
	if last := got[len(got)-1]; last["type"] != "RUN_FINISHED" || last["outcome"] != nil || content.String() != "Deployed." {
		t.Fatalf("resumed: %v", got)
	}
}
