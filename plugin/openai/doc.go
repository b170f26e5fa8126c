// Package openai reads what the router needs from OpenAI-compatible request
// bodies and response streams, without allocating in steady state and without
// panicking on any input (it runs inside the proxy-wasm plugin).
//
//	var p openai.Parser            // one per VM or per HTTP context, reused
//	var req openai.Request
//	hasher.ResetDeferred()                                  // seed unknown yet
//	err := p.ParseText(openai.Chat, body, false, hasher, &req) // fields + prompt bytes, one pass
//	hasher.SetSeed(modelAndAdapter(req.Model))              // key the chain afterwards
//
// Requests are read with plugin/jsonx in one forward pass that validates the
// whole body while extracting fields (nesting bounded by MaxDepth, RFC 8259
// grammar and escapes) and decodes the prompt into a writer. A body cut at
// the plugin's buffer limit is read with truncated set: its complete prefix
// counts. Responses: StreamCounter counts generated tokens in a
// server-sent-event stream fed chunk by chunk; ParseUsage reads the usage of
// a non-streamed response.
package openai
