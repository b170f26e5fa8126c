// Package metrics turns one model-server replica's Prometheus text scrape into
// a compact Sample: queued and running requests, KV-cache usage and capacity,
// resident LoRA adapters and prefix-cache counters.
//
//	p, err := metrics.NewParser(metrics.EngineVLLM, metrics.DefaultNames(metrics.EngineVLLM))
//	var s metrics.Sample // reuse across scrapes: adapter slices keep their capacity
//	err = p.Parse(body, &s) // body: the proxy_http_call response
//	if s.Has(metrics.FieldWaiting) { queued := s.Waiting; _ = queued }
//
// It runs inside the proxy-wasm plugin, on every scrape tick, so it uses no fmt,
// regexp, reflect or encoding/json, never panics on any input, and allocates
// nothing in steady state (a reused Parser and Sample; see TestParseAllocs).
//
// The parser follows the Prometheus text exposition format 0.0.4 as implemented
// by github.com/prometheus/common/expfmt (the cross-check test holds it to that
// parser's numbers and line verdicts), with deliberate leniencies: CRLF line
// ends are accepted, an invalid line is skipped and counted instead of
// aborting the whole scrape, and only the lines of the metrics it reads are
// validated. HELP, TYPE and other comment lines are not interpreted: every
// extracted value is taken from sample lines by exact name, and any other
// line (`_created` companions, `_bucket`/`_sum`/`_count` series, the HTTP
// server's and the process's families: most of a real page) is skipped once
// its name is read, unexamined. A body without a valid sample of a metric
// read is ErrNoSamples.
//
// Each engine has default metric names (DefaultNames, cited per engine in
// names.go); configuration may override any of them. Fields the replica does not
// expose stay absent in Sample.Present, which is how callers tell "missing"
// from "zero" (TGI, for instance, exposes no KV-cache or LoRA metric).
package metrics
