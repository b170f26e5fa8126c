package openai

import (
	"strconv"
	"strings"
	"testing"
)

// streamShapes are streams built to cost the counter the most per byte:
// every path a line can take (the template, fastEvent, the jsonx walk, an
// oversized skip, the carry that joins a split line) at its worst, each
// repeated to about n bytes.
var streamShapes = []struct {
	name  string
	line  func(i int) string // the i-th line, newline included
	chunk int                // bytes per Write; 0: the whole stream at once
}{
	{name: "template", line: func(int) string {
		return `data: {"id":"c","choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}]}` + "\n\n"
	}},
	{name: "template/bytewise", chunk: 1, line: func(int) string {
		return `data: {"id":"c","choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}]}` + "\n\n"
	}},
	// Each event differs from the template outside its text, so every one
	// is compared with it and then read by fastEvent.
	{name: "fast", line: func(i int) string {
		return `data: {"id":"` + strconv.Itoa(i) + `","choices":[{"index":0,"delta":{"content":"t"},"finish_reason":null}]}` + "\n\n"
	}},
	// An escaped key sends every event to the jsonx walk.
	{name: "walk", line: func(i int) string {
		return `data: {"i\u0064":"` + strconv.Itoa(i) + `","choices":[{"delta":{"content":"t"}}]}` + "\n\n"
	}},
	// Lines just under MaxLineBytes: many choices each.
	{name: "wide", line: func(int) string {
		return `data: {"choices":[` + strings.Repeat(`{"text":"a","index":1},`, (MaxLineBytes-64)/23) + `{"text":"b"}]}` + "\n"
	}},
	// Nesting as deep as the Reader allows, fastEvent's and the walk's.
	{name: "deep", line: func(int) string {
		return `data: {"x":` + strings.Repeat("[", MaxDepth-1) + strings.Repeat("]", MaxDepth-1) + `,"choices":[{"text":"a"}]}` + "\n"
	}},
	// The template's head, then a long text whose event differs in its
	// tail: scanned to its end by the template check, then read again.
	{name: "template-miss", line: func(i int) string {
		tail := `"},"finish_reason":null}]}`
		if i%2 == 1 {
			tail = `"},"finish_reason":"x"}]}`
		}
		return `data: {"id":"c","choices":[{"index":0,"delta":{"content":"` + strings.Repeat(`ab\"`, (MaxLineBytes-200)/4) + tail + "\n"
	}},
	// Lines over MaxLineBytes, skipped to their newline, fed in small
	// chunks so that the carry fills before each skip.
	{name: "oversized", chunk: 61, line: func(int) string {
		return "data: " + strings.Repeat("x", 2*MaxLineBytes) + "\n"
	}},
	// Lines just under MaxLineBytes fed 7 bytes at a time: every line is
	// joined in the carry.
	{name: "carry", chunk: 7, line: func(int) string {
		return `data: {"choices":[{"text":"` + strings.Repeat("y", MaxLineBytes-64) + `"}]}` + "\n"
	}},
	{name: "blank", line: func(int) string { return "\n" }},
}

func buildStream(line func(int) string, n int) []byte {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(line(i))
	}
	return []byte(b.String())
}

// BenchmarkStreamCounterScaling feeds each of streamShapes at 64 KB and at
// 4 MB. Every response chunk of every stream passes through the counter, so
// its cost must be linear in the bytes: for each shape the two sizes'
// throughputs (MB/s) must match, and a drop at the larger size shows a
// superlinear path.
func BenchmarkStreamCounterScaling(b *testing.B) {
	for _, sh := range streamShapes {
		for _, size := range scalingSizes {
			stream := buildStream(sh.line, size)
			b.Run(sh.name+"/"+strconv.Itoa(size>>10)+"KB", func(b *testing.B) {
				c := new(StreamCounter)
				b.ReportAllocs()
				b.SetBytes(int64(len(stream)))
				for b.Loop() {
					c.Reset()
					writeChunks(c, stream, sh.chunk)
				}
			})
		}
	}
}

// writeChunks writes stream to c in chunks of step bytes (0: at once).
func writeChunks(c *StreamCounter, stream []byte, step int) {
	if step <= 0 {
		step = len(stream)
	}
	for i := 0; i < len(stream); i += step {
		c.Write(stream[i:min(i+step, len(stream))])
	}
}

var scalingSizes = []int{64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20}
