// Package scripted is a model that answers from a script: a small text file
// of rules, each matching the conversation so far and saying what the model
// answers. The same script drives the in-process Model (offline runs, tests
// without a network) and the OpenAI-compatible test server in testenv.
//
// # The format
//
// A script is a list of rules. A rule starts with a header line, "rule
// <name>" (names are unique) or "default", and holds the lines up to the next
// header. Blank lines and lines starting with # are ignored; indentation is
// optional and only for the reader.
//
// The lines of a rule are conditions ("when ...") and directives. A rule
// matches when all its conditions hold; the first matching rule in file order
// answers. "default" is a rule without conditions; it must be the last rule,
// because a rule after it could never answer. A request that no rule
// matches fails with ErrNoMatch.
//
// Conditions look at the request:
//
//	when user contains TEXT   the last user message contains TEXT
//	when user is TEXT         the last user message is exactly TEXT
//	when tool contains TEXT   the last tool result contains TEXT
//	when tool is TEXT         the last tool result is exactly TEXT
//	when system contains TEXT the system messages (joined by newlines)
//	when notice contains TEXT the newest system message but the first
//	                          (the prompt): a node's notice, such as a
//	                          process's end, unless a user message came
//	                          after it
//	when model is TEXT        the requested model
//	when tools OP N           the number of tool results so far
//	when step OP N            which model call of the conversation this is
//	when not CONDITION        negation of any condition above
//
// OP is one of = != < <= > >=. A missing message reads as empty text. The
// text of a tool result is provider.ToolText: its text, with "error: " in
// front when the call failed. Tool results count every tool message,
// including pending placeholders and late results. The step is one more than
// the number of assistant messages in the request, so the first call of a
// conversation is step 1 and a retry of a call has the same step.
//
// Directives say what the model answers:
//
//	say TEXT                  text of the answer; several say lines are
//	                          joined by newlines
//	call NAME [JSON]          a tool call with JSON arguments (default {});
//	                          several call lines make parallel calls
//	finish REASON             stop, tool_calls, length or content_filter;
//	                          by default tool_calls when the rule calls a
//	                          tool and stop otherwise
//	usage IN OUT              token usage; by default derived from the text
//	delay DURATION            wait before answering (Go syntax: 50ms, 2s)
//	pace DURATION             when streaming, wait that long between pieces
//	fail STATUS [first K] [MESSAGE]
//	                          fail with an HTTP status and message; with
//	                          "first K" only the first K requests this rule
//	                          matches fail, and later ones get its answer
//	hang                      never answer: wait until the request is
//	                          cancelled (or the test server closes)
//
// TEXT and MESSAGE are the rest of the line, trimmed; to keep leading or
// trailing spaces or to write escapes like \n, give a Go string literal in
// double quotes. A rule needs something to do: say, call, fail or hang. A
// rule that hangs, or fails without "first", cannot also say or call.
//
// # Determinism
//
// Respond is a pure function of the request: the same request gets the same
// reply. Tool call ids are "call_<n>", numbered on from the tool calls the
// conversation already holds, so they are unique within a conversation and
// the same on every replay. Derived usage counts one token per four
// characters (runes), rounded up: the input is every message's text and tool
// call arguments, the output the answer's text and arguments. Counting the
// "first K" failures is the only state, and it lives in Model (one counter
// per rule), which the test server shares.
//
// # Example
//
//	# A weather agent: look the weather up, then answer.
//	rule hello
//	  when user contains hello
//	  say Hello! Ask me about the weather.
//
//	rule flaky-start
//	  when user contains weather
//	  when step = 1
//	  fail 503 first 1 the model is overloaded
//	  say Let me check both cities.
//	  call get_weather {"city": "Oslo"}
//	  call get_weather {"city": "Lima"}
//
//	rule answer
//	  when tools = 2
//	  when tool contains "°C"
//	  delay 20ms
//	  say "Oslo is cold and Lima is mild.\nAnything else?"
//	  usage 120 14
//
//	rule tool-failed
//	  when tool contains "error: "
//	  say I could not get the weather.
//	  finish stop
//
//	rule stuck
//	  when user contains wait forever
//	  hang
//
//	default
//	  say I only know about the weather.
//
// # Streaming
//
// When asked to stream, Model (and the test server) cut the text into
// Chunks: each piece is a word with the white space after it, so the
// pieces join back into the text.
package scripted
