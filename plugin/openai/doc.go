// Package openai reads what the router needs from the request bodies and
// responses of OpenAI-compatible endpoints (/v1/chat/completions,
// /v1/completions), of the Anthropic Messages API (/v1/messages) and of the
// OpenAI Responses API (/v1/responses), without allocating in steady state
// and without panicking on any input (it runs inside the proxy-wasm plugin).
//
//	var p openai.Parser            // one per VM or per HTTP context, reused
//	var req openai.Request
//	kind, _ := openai.KindFromPath(path)
//	hasher.ResetDeferred()                                 // seed unknown yet
//	err := p.ParseText(kind, body, false, hasher, &req)    // fields + prompt bytes, one pass
//	hasher.SetSeed(modelAndAdapter(req.Model))             // key the chain afterwards
//	hasher.Save(&cont)                                     // the prompt's chain, for its answer
//
//	counter.Reset()
//	counter.Record(kind, answerHasher)                     // the answer continues the chain
//	answerHasher.Resume(&cont); counter.Write(chunk); answerHasher.Save(&cont) // per chunk
//	counter.Tokens(), counter.UsageCachedTokens, counter.ResponseID
//
// Requests are read with plugin/jsonx in one forward pass that validates the
// whole body while extracting fields (nesting bounded by MaxDepth, RFC 8259
// grammar and escapes) and decodes the prompt into a writer, framed alike for
// the four endpoints. A body cut at the plugin's buffer limit is read with
// truncated set: its complete prefix counts. Responses: StreamCounter reads a
// server-sent-event stream fed chunk by chunk, or a whole body (Reply): the
// tokens generated, the usage and cached tokens the engine reports, the
// Responses API's response id, and the answer's text, written framed as the
// next request will quote it; ParseUsage reads the usage of a body alone.
package openai
