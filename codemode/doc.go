// Package codemode runs the programs a model writes, in Starlark
// (go.starlark.net): deterministic by construction (no clock, randomness
// or IO but through the calls it makes) and bounded (steps, output,
// calls, the sizes of values crossing its edge, time without a call).
//
// Memory and the time of one step are not bounded here. One expression
// can build gigabytes in a few steps (s + s, repeated), and one builtin
// call can recurse in Go for minutes (str of a list nested millions
// deep): no check between steps sees either. Run programs from a model
// only in a process the OS bounds: Sandbox.Run runs one in a child
// process with memory and CPU limits (on Linux; elsewhere the runtime's
// soft memory limit only), killed when quiet past its bound (ADR 0042).
// A lash node runs its model's programs so (its run_program tool).
//
// Every call a program makes (a tool, llm(...), sleep(...)) goes through
// a Host at its ordinal, the call's place in the program's order. Run
// again from its start, a program makes the same calls at the same
// ordinals until an answer differs (or the bound on time without a call,
// the one bound read from a clock, ends one run where another went on),
// so a host that journals each call's
// outcome under the program's key and the ordinal answers the recorded
// ones without making them again, and a call at a recorded ordinal that
// is not the recorded call is the program taking another path.
//
// What a program has:
//
//	get_weather(city="Oslo")        a tool, by keyword or one dict; its
//	                                value, or the program ends with its failure
//	tool("name-with.dots", ...)     a tool whose name is no Starlark name,
//	                                or is Starlark's or another tool's
//	llm("prompt", ...)              the model; its answer
//	sleep(seconds)                  a sleep, recorded once it ends
//	attempt(get_weather, city=...)  the call, its outcome a value:
//	                                struct(ok, value, error, cancelled)
//	parallel([call(get_weather, city="Oslo"), ...])
//	                                the calls at once, each outcome as above
//	print(...)                      output, returned with the result
//	result = ...                    the program's result (JSON-able)
//	json.encode, json.decode        bounded as values crossing the edge
//	struct(...)                     go.starlark.net's
package codemode
