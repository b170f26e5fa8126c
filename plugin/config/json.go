package config

import (
	"errors"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// A strict, allocation-light JSON reader (RFC 8259) for the configuration.
//
// Why not github.com/buger/jsonparser: its parser.go imports fmt, which links
// os and time into the wasm module (`go list -deps` shows fmt, os, time,
// reflect), and a Go wasip1 module that links os may initialise netpoll and die
// with "poll_oneoff failed" in Envoy before proxy-wasm-cpp-host PR #533
// (ABI.md §1.5, golang/go#78513). The configuration needs only objects, arrays,
// strings and integers, so a small validator with visitors is enough; its
// agreement with encoding/json is fuzzed in json_test.go.

// kind is the type of a JSON value; names match the error messages.
type kind uint8

const (
	kindInvalid kind = iota
	kindObject
	kindArray
	kindString
	kindNumber
	kindBoolean
	kindNull
)

func (k kind) String() string {
	switch k {
	case kindObject:
		return "object"
	case kindArray:
		return "array"
	case kindString:
		return "string"
	case kindNumber:
		return "number"
	case kindBoolean:
		return "boolean"
	case kindNull:
		return "null"
	}
	return "invalid"
}

// maxDepth bounds nesting so hostile input cannot exhaust the stack.
const maxDepth = 64

// jsonError reports malformed JSON with the byte offset.
func jsonError(off int, what string) error {
	return errors.New("config: malformed JSON at offset " + strconv.Itoa(off) + ": " + what)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// value validates the JSON value starting at b[i] (no leading space) and
// returns its kind and end offset.
func value(b []byte, i, depth int) (kind, int, error) {
	if i >= len(b) {
		return kindInvalid, i, jsonError(i, "unexpected end of input")
	}
	switch c := b[i]; {
	case c == '{':
		end, err := object(b, i, depth+1, nil)
		return kindObject, end, err
	case c == '[':
		end, err := array(b, i, depth+1, nil)
		return kindArray, end, err
	case c == '"':
		end, err := stringEnd(b, i)
		return kindString, end, err
	case c == '-' || (c >= '0' && c <= '9'):
		end, err := number(b, i)
		return kindNumber, end, err
	case c == 't':
		return literal(b, i, "true", kindBoolean)
	case c == 'f':
		return literal(b, i, "false", kindBoolean)
	case c == 'n':
		return literal(b, i, "null", kindNull)
	}
	return kindInvalid, i, jsonError(i, "unexpected character "+strconv.QuoteRune(rune(b[i])))
}

func literal(b []byte, i int, word string, k kind) (kind, int, error) {
	if len(b)-i < len(word) || string(b[i:i+len(word)]) != word {
		return kindInvalid, i, jsonError(i, "invalid literal")
	}
	return k, i + len(word), nil
}

// member is called for each key/value of an object; key is the decoded key and
// raw the value's bytes (strings with their quotes).
type member func(key string, k kind, raw []byte) error

// object validates the object at b[i] == '{' and returns its end. With f
// non-nil it visits the members in order; f's error stops the walk and is
// returned as is.
func object(b []byte, i, depth int, f member) (int, error) {
	if depth > maxDepth {
		return i, jsonError(i, "nesting deeper than "+strconv.Itoa(maxDepth))
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return i, jsonError(i, "want a string key")
		}
		kend, err := stringEnd(b, i)
		if err != nil {
			return i, err
		}
		keyRaw := b[i:kend]
		i = skipSpace(b, kend)
		if i >= len(b) || b[i] != ':' {
			return i, jsonError(i, "want ':' after key")
		}
		i = skipSpace(b, i+1)
		vstart := i
		k, vend, err := value(b, i, depth)
		if err != nil {
			return i, err
		}
		if f != nil {
			if err := f(unquote(keyRaw), k, b[vstart:vend]); err != nil {
				return i, err
			}
		}
		i = skipSpace(b, vend)
		if i >= len(b) {
			return i, jsonError(i, "unterminated object")
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return i + 1, nil
		default:
			return i, jsonError(i, "want ',' or '}'")
		}
	}
}

// element is called for each value of an array.
type element func(index int, k kind, raw []byte) error

// array validates the array at b[i] == '[' and returns its end, visiting
// elements with f when non-nil.
func array(b []byte, i, depth int, f element) (int, error) {
	if depth > maxDepth {
		return i, jsonError(i, "nesting deeper than "+strconv.Itoa(maxDepth))
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, nil
	}
	for n := 0; ; n++ {
		vstart := i
		k, vend, err := value(b, i, depth)
		if err != nil {
			return i, err
		}
		if f != nil {
			if err := f(n, k, b[vstart:vend]); err != nil {
				return i, err
			}
		}
		i = skipSpace(b, vend)
		if i >= len(b) {
			return i, jsonError(i, "unterminated array")
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case ']':
			return i + 1, nil
		default:
			return i, jsonError(i, "want ',' or ']'")
		}
	}
}

// stringEnd validates the string at b[i] == '"' and returns the offset after
// its closing quote. Control characters, bad escapes and invalid UTF-8 are
// errors, as in encoding/json's validator.
func stringEnd(b []byte, i int) (int, error) {
	start := i
	i++
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			return i + 1, nil
		case c == '\\':
			if i+1 >= len(b) {
				return i, jsonError(i, "unterminated escape")
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(b)-i < 6 || !isHex4(b[i+2:i+6]) {
					return i, jsonError(i, "bad \\u escape")
				}
				i += 6
			default:
				return i, jsonError(i, "bad escape")
			}
		case c < 0x20:
			return i, jsonError(i, "control character in string")
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				return i, jsonError(i, "invalid UTF-8 in string")
			}
			i += size
		}
	}
	return start, jsonError(start, "unterminated string")
}

func isHex4(h []byte) bool {
	for _, c := range h {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// number validates -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at b[i].
func number(b []byte, i int) (int, error) {
	start := i
	if b[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digits() == 0:
		return start, jsonError(start, "bad number")
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return start, jsonError(start, "bad number")
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return start, jsonError(start, "bad number")
		}
	}
	return i, nil
}

// unquote decodes a validated JSON string (raw includes the quotes).
func unquote(raw []byte) string {
	body := raw[1 : len(raw)-1]
	plain := true
	for _, c := range body {
		if c == '\\' {
			plain = false
			break
		}
	}
	if plain {
		return string(body)
	}
	out := make([]byte, 0, len(body))
	for i := 0; i < len(body); {
		c := body[i]
		if c != '\\' {
			out = append(out, c)
			i++
			continue
		}
		switch body[i+1] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := rune(hex4(body[i+2 : i+6]))
			i += 6
			if utf16.IsSurrogate(r) {
				if len(body)-i >= 6 && body[i] == '\\' && body[i+1] == 'u' {
					if r2 := utf16.DecodeRune(r, rune(hex4(body[i+2:i+6]))); r2 != utf8.RuneError {
						out = utf8.AppendRune(out, r2)
						i += 6
						continue
					}
				}
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
			continue
		default: // '"', '\\', '/'
			out = append(out, body[i+1])
		}
		i += 2
	}
	return string(out)
}

func hex4(h []byte) uint16 {
	var v uint16
	for _, c := range h {
		v <<= 4
		switch {
		case c >= '0' && c <= '9':
			v |= uint16(c - '0')
		case c >= 'a' && c <= 'f':
			v |= uint16(c - 'a' + 10)
		default:
			v |= uint16(c - 'A' + 10)
		}
	}
	return v
}
