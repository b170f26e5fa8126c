package config

import (
	"strconv"
	"strings"
	"testing"
)

func TestParsePeers(t *testing.T) {
	const rep = `{"replicas":[{"name":"a","address":"10.0.0.1:1"}]`
	const token = `"0123456789abcdef"`
	tests := []struct {
		name string
		in   string
		want PeerExchange
	}{
		{name: "off by default", in: rep + `}`},
		{name: "serving only", in: rep + `,"peer_path":"/gpuroute/peer","peer_token":` + token + `}`,
			want: PeerExchange{Path: "/gpuroute/peer", Token: "0123456789abcdef"}},
		{name: "serving and asking", in: rep + `,"peer_path":"/p","peer_token":` + token +
			`,"peers":[{"name":"gw-b","cluster":"gw-b-peer"},{"cluster":"gw-c-peer","name":"gw-c"}]}`,
			want: PeerExchange{Path: "/p", Token: "0123456789abcdef", Peers: []Peer{{"gw-b", "gw-b-peer"}, {"gw-c", "gw-c-peer"}}}},
		{name: "empty peer list", in: rep + `,"peers":[]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tt.in))
			if err != nil {
				t.Fatalf("Parse(%s) error %v", tt.in, err)
			}
			got := cfg.PeerExchange
			if got.Path != tt.want.Path || got.Token != tt.want.Token || len(got.Peers) != len(tt.want.Peers) {
				t.Fatalf("Parse(%s).PeerExchange = %+v, want %+v", tt.in, got, tt.want)
			}
			for i := range got.Peers {
				if got.Peers[i] != tt.want.Peers[i] {
					t.Errorf("peer %d = %+v, want %+v", i, got.Peers[i], tt.want.Peers[i])
				}
			}
			if got.Serving() != (tt.want.Path != "") {
				t.Errorf("Serving() = %v, want %v", got.Serving(), tt.want.Path != "")
			}
		})
	}
}

func TestParsePeersRejects(t *testing.T) {
	const rep = `{"replicas":[{"name":"a","address":"10.0.0.1:1"}]`
	const ok = `,"peer_path":"/p","peer_token":"0123456789abcdef"`
	tests := []struct {
		name string
		in   string
		want string
	}{
		{name: "path without token", in: rep + `,"peer_path":"/p"}`,
			want: `config: peer_path and peer_token go together: set both or neither`},
		{name: "peers without serving", in: rep + `,"peers":[{"name":"b","cluster":"c"}]}`,
			want: `config: peers needs peer_path and peer_token (the peers answer on that path for that token)`},
		{name: "short token", in: rep + `,"peer_path":"/p","peer_token":"secret"}`,
			want: `config: peer_token must be 16 to 256 bytes, got 6`},
		{name: "token with a space", in: rep + `,"peer_path":"/p","peer_token":"0123456789 abcdef"}`,
			want: `config: peer_token must be printable ASCII without spaces (it is sent as a header value)`},
		{name: "relative path", in: rep + `,"peer_path":"p","peer_token":"0123456789abcdef"}`,
			want: `config: peer_path "p" must be empty or a path starting with / (at most 1024 bytes)`},
		{name: "same as status", in: rep + ok + `,"status_path":"/p"}`,
			want: `config: peer_path and status_path must differ, both are "/p"`},
		{name: "peers not an array", in: rep + ok + `,"peers":{"name":"b"}}`,
			want: `config: peers must be an array of {"name", "cluster"} objects, got object`},
		{name: "peer not an object", in: rep + ok + `,"peers":["b"]}`,
			want: `config: peers[0] must be an object, got string`},
		{name: "peer without cluster", in: rep + ok + `,"peers":[{"name":"b"}]}`,
			want: `config: peers[0] needs a name and a cluster of 1 to 253 bytes`},
		{name: "unknown peer key", in: rep + ok + `,"peers":[{"name":"b","cluster":"c","port":1}]}`,
			want: `config: peers[0]: unknown key "port"`},
		{name: "duplicate peer", in: rep + ok + `,"peers":[{"name":"b","cluster":"c"},{"name":"b","cluster":"d"}]}`,
			want: `config: peers[1]: duplicate peer name "b"`},
		{name: "duplicate key in peer", in: rep + ok + `,"peers":[{"name":"b","name":"c"}]}`,
			want: `config: peers[0]: duplicate key "name"`},
		{name: "too many peers", in: rep + ok + `,"peers":[` + manyPeers(MaxPeers+1) + `]}`,
			want: `config: peers has more than 64 entries`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			if err == nil || err.Error() != tt.want {
				t.Errorf("Parse(%s) error = %v, want %q", tt.in, err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), "0123456789") {
				t.Errorf("Parse(%s) error %q repeats the secret token", tt.in, err)
			}
		})
	}
}

func manyPeers(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"name":"gw-` + strconv.Itoa(i) + `","cluster":"c"}`)
	}
	return b.String()
}
