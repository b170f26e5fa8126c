// Package openai reads what the router needs from OpenAI-compatible request
// bodies and response streams, without allocating in steady state and without
// panicking on any input (it runs inside the proxy-wasm plugin).
//
//	var p openai.Parser            // one per VM or per HTTP context, reused
//	var req openai.Request
//	err := p.Parse(openai.Chat, body, &req)     // model, max_tokens, stream, ...
//	hasher.Reset(seedFor(req.Model))            // seed before any prompt byte
//	err = p.WriteText(hasher, &req)             // prompt bytes, framed; PromptChars
//
// Requests are validated by an iterative scanner (nesting bounded by MaxDepth,
// RFC 8259 escapes) and then walked with github.com/buger/jsonparser. Bodies
// cut at the plugin's buffer limit go through ParseTruncated, which reads the
// complete prefix. Responses: StreamCounter counts generated tokens in a
// server-sent-event stream fed chunk by chunk; ParseUsage reads the usage of
// a non-streamed response.
package openai
