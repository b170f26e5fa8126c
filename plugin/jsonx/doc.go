// Package jsonx is the plugin's JSON reader: one forward pass, no
// allocation, nesting (and the recursion of skipping a container) bounded by
// MaxDepth, built on errors, strconv, math/bits and unicode/utf8 only. It
// exists because the wasm module must not link fmt, os, time or reflect:
// encoding/json and github.com/buger/jsonparser import them, and a wasip1
// module that links os may initialise netpoll and die with "poll_oneoff
// failed" inside Envoy (docs/abi.md, "Envoy behaviour"; golang/go#78513).
//
//	var r jsonx.Reader
//	r.Reset(body)
//	r.Object()
//	for r.Member() {
//		switch string(r.Key()) {
//		case "model":
//			if v := r.Value(); v.Kind == jsonx.String {
//				model = jsonx.AppendUnescape(buf[:0], v.Raw)
//			}
//		case "max_tokens":
//			n, ok := jsonx.ParseInt(r.Value().Raw)
//		default:
//			r.Skip() // validated, not decoded
//		}
//	}
//	if err := r.End(); err != nil { /* err quotes the offset and what was wrong */ }
//
// The Reader is a pull parser: Object/Array enter a container, Member/Elem
// step to its next member or element (skipping a value the caller left
// unread), Value/Skip/WriteString consume a value. Every byte it passes over
// is validated, so extracting fields and validating the document is one pass.
//
// Validity is RFC 8259 as encoding/json.Valid implements it: strict number
// grammar, the §7 escapes only, no raw control characters in strings. Invalid
// UTF-8 inside strings is accepted and passed through undecoded, as
// encoding/json accepts it (it would substitute U+FFFD when decoding; the
// plugin hashes prompt bytes as sent). A lone UTF-16 surrogate escape decodes
// to U+FFFD, as in encoding/json.
//
// Prefix mode (ResetPrefix) reads a document cut at a buffer limit: instead
// of an "unexpected end of input" error, every loop ends, Truncated reports
// the cut, and the value the cut falls in is reported as far as it is
// reliable — a string up to the last whole character (never half an escape or
// half a surrogate pair), a container up to its last complete element. A
// number or literal at the cut is dropped (it may continue).
//
// Strings are scanned eight bytes at a time with SWAR bit tricks (wasm has
// no SIMD in Go): one 64-bit load, then the classic "has zero byte" test for
// '"', '\\' and bytes below 0x20 (Hacker's Delight §6-1; Mycroft's trick).
package jsonx
