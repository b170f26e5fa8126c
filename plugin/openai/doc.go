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
// Requests are read with plugin/jsonx in one forward pass that validates the
// whole body while extracting fields (nesting bounded by MaxDepth, RFC 8259
// grammar and escapes); WriteText re-reads only the prompt. Bodies cut at the
// plugin's buffer limit go through ParseTruncated, which reads the
// complete prefix. Responses: StreamCounter counts generated tokens in a
// server-sent-event stream fed chunk by chunk; ParseUsage reads the usage of
// a non-streamed response.
package openai
