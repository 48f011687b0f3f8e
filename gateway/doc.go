// Package gateway is lash's client API over HTTP: what a web or mobile
// app, or a chat UI built on the AI SDK or an AG-UI client, speaks instead
// of NATS. lash-node serves it with --api (ADR 0041).
//
// A gateway keeps no state: it appends inputs through the node API (so the
// same Idempotency-Key twice is one input, as on NATS) and reads events
// from the LIVE stream, following it once for all its streams (hub.go). A
// client that disconnects cancels nothing; a stop names the turn it stops.
//
// Endpoints (openapi.json, served at /v1/openapi.json):
//
//	GET  /v1/sessions                    the sessions the token grants
//	POST /v1/sessions                    start one with its first message
//	GET  /v1/sessions/{id}               status, with the suspended calls
//	GET  /v1/sessions/{id}/messages      the committed transcript
//	POST /v1/sessions/{id}/messages      send a message
//	POST /v1/sessions/{id}/decisions     resume or cancel a suspended call
//	POST /v1/sessions/{id}/stop          stop one turn
//	GET  /v1/sessions/{id}/events        live events (lash's schema), SSE
//	POST /v1/ai-sdk/chat                 the AI SDK's UI message stream
//	GET  /v1/ai-sdk/chat/{id}/stream     its resume
//	POST /v1/ag-ui                       an AG-UI run
//	POST /v1/chat/completions            OpenAI's Chat Completions, over a
//	                                     session named by Lash-Session
//
// Every request carries a bearer token, a JWT whose "lash" claim is a
// Grant: the sessions (by id or prefix) its holder may use, the agents it
// may name, whether it may decide. A session outside the grant is answered
// as unknown (404). Tokens are checked per request and kept nowhere.
package gateway
