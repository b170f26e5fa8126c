package pool

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"

	"github.com/gpuroute/gpuroute/plugin/config"
)

// Merge returns the plugin configuration base with its replica list
// replaced by rs, indented, checked by the plugin's parser. base is a JSON
// object (the rest of the configuration: tick_ms, adapters, …) with or
// without a replicas key; its other keys keep their order and values. An
// empty base is {}. The error says why the plugin would refuse the result,
// so nobody pushes a configuration the proxies will reject.
func Merge(base []byte, rs []Replica) ([]byte, error) {
	keys, values, err := members(base)
	if err != nil {
		return nil, err
	}
	list, err := json.Marshal(rs)
	if err != nil {
		return nil, errors.New("pool: " + err.Error())
	}
	if rs == nil {
		list = []byte("[]")
	}
	var b bytes.Buffer
	b.WriteByte('{')
	placed := false
	for i, k := range keys {
		v := values[i]
		if k == config.KeyReplicas {
			v, placed = list, true
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Quote(k))
		b.WriteByte(':')
		b.Write(v)
	}
	if !placed {
		if len(keys) > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + config.KeyReplicas + `":`)
		b.Write(list)
	}
	b.WriteByte('}')
	var out bytes.Buffer
	if err := json.Indent(&out, b.Bytes(), "", "  "); err != nil {
		return nil, errors.New("pool: " + err.Error())
	}
	out.WriteByte('\n')
	if _, err := config.Parse(out.Bytes()); err != nil {
		return nil, errors.New("pool: the plugin would refuse the configuration: " + err.Error())
	}
	return out.Bytes(), nil
}

// members reads a JSON object's keys and raw values in order, refusing a
// key given twice (the plugin refuses it too, and a merge must not pick
// one silently).
func members(data []byte) ([]string, []json.RawMessage, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, nil, errors.New("pool: the base configuration must be a JSON object, got " + quote(string(data)))
	}
	var keys []string
	var values []json.RawMessage
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, nil, errors.New("pool: the base configuration: " + err.Error())
		}
		k := t.(string) // inside an object the decoder yields keys as strings
		for _, seen := range keys {
			if seen == k {
				return nil, nil, errors.New("pool: the base configuration has key " + strconv.Quote(k) + " twice")
			}
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, errors.New("pool: the base configuration, key " + strconv.Quote(k) + ": " + err.Error())
		}
		keys, values = append(keys, k), append(values, v)
	}
	if _, err := dec.Token(); err != nil {
		return nil, nil, errors.New("pool: the base configuration: " + err.Error())
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, errors.New("pool: the base configuration has data after its object")
	}
	return keys, values, nil
}
