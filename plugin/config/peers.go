package config

import (
	"errors"
	"strconv"

	"github.com/gpuroute/gpuroute/plugin/jsonx"
)

// Keys of the gateway peer exchange: several Envoy instances in front of the
// same fleet share their prefix placements and in-flight work, so affinity
// holds across instances (shared data ends at the Envoy process:
// docs/design.md "Shared state").
const (
	KeyPeers       = "peers"
	KeyPeerPath    = "peer_path"
	KeyPeerToken   = "peer_token"
	KeyPeerCluster = "cluster"
)

// Bounds of the peer exchange.
const (
	// MaxPeers bounds the peer list: each peer costs one call per tick.
	MaxPeers = 64
	// MinPeerTokenBytes is the shortest accepted peer_token: it is the only
	// thing that keeps a client from reading the exchange (or learning the
	// fleet's layout from it), so it must not be guessable.
	MinPeerTokenBytes = 16
	maxPeerTokenBytes = 256
)

// Peer is another gateway instance whose placements this one imports.
type Peer struct {
	// Name identifies the peer in logs and stats; it is also the
	// :authority of the calls.
	Name string
	// Cluster is the Envoy cluster that reaches the peer's listener.
	Cluster string
}

// PeerExchange configures the gateway peer exchange; the zero value turns it
// off. With Path and Token set, this gateway answers Path for callers that
// present Token; with Peers listed, its scrape leader also asks each peer
// every tick.
type PeerExchange struct {
	Path  string
	Token string
	Peers []Peer
}

// Serving reports whether this gateway answers peer requests.
func (p *PeerExchange) Serving() bool { return p.Path != "" && p.Token != "" }

func parsePeerPath(cfg *Config, v jsonx.Value) error {
	s, err := stringValue(KeyPeerPath, v)
	if err != nil {
		return err
	}
	if s != "" && (s[0] != '/' || len(s) > MaxPathBytes) {
		return errors.New("config: " + KeyPeerPath + " " + quoteString(s) + " must be empty or a path starting with / (at most " +
			strconv.Itoa(MaxPathBytes) + " bytes)")
	}
	cfg.PeerExchange.Path = s
	return nil
}

func parsePeerToken(cfg *Config, v jsonx.Value) error {
	s, err := stringValue(KeyPeerToken, v)
	if err != nil {
		return err
	}
	// The value is a secret: errors give its length, never its bytes.
	if len(s) < MinPeerTokenBytes || len(s) > maxPeerTokenBytes {
		return errors.New("config: " + KeyPeerToken + " must be " + strconv.Itoa(MinPeerTokenBytes) + " to " +
			strconv.Itoa(maxPeerTokenBytes) + " bytes, got " + strconv.Itoa(len(s)))
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return errors.New("config: " + KeyPeerToken + " must be printable ASCII without spaces (it is sent as a header value)")
		}
	}
	cfg.PeerExchange.Token = s
	return nil
}

// parsePeers reads [{"name": "gateway-b", "cluster": "gateway-b-peer"}, ...].
func parsePeers(cfg *Config, r *jsonx.Reader) error {
	if k := r.Kind(); k != jsonx.Array {
		r.Skip()
		return errors.New("config: " + KeyPeers + " must be an array of {\"name\", \"cluster\"} objects, got " + k.String())
	}
	peers := cfg.PeerExchange.Peers[:0]
	r.Array()
	for i := 0; r.Elem(); i++ {
		where := KeyPeers + "[" + strconv.Itoa(i) + "]"
		if i >= MaxPeers {
			return errors.New("config: " + KeyPeers + " has more than " + strconv.Itoa(MaxPeers) + " entries")
		}
		if k := r.Kind(); k != jsonx.Object {
			r.Skip()
			return errors.New("config: " + where + " must be an object, got " + k.String())
		}
		var p Peer
		var seen seenKeys
		r.Object()
		for r.Member() {
			key := string(r.Key())
			if err := seen.add(where, key); err != nil {
				return err
			}
			if key != KeyName && key != KeyPeerCluster {
				r.Skip()
				return errors.New("config: " + where + ": unknown key " + quoteString(key))
			}
			s, err := stringValue(where+"."+key, r.Value())
			if err != nil {
				return err
			}
			if key == KeyName {
				p.Name = s
			} else {
				p.Cluster = s
			}
		}
		if p.Name == "" || p.Cluster == "" || len(p.Name) > MaxNameBytes || len(p.Cluster) > MaxNameBytes {
			return errors.New("config: " + where + " needs a " + KeyName + " and a " + KeyPeerCluster + " of 1 to " +
				strconv.Itoa(MaxNameBytes) + " bytes")
		}
		for _, q := range peers {
			if q.Name == p.Name {
				return errors.New("config: " + where + ": duplicate peer name " + quoteString(p.Name))
			}
		}
		peers = append(peers, p)
	}
	cfg.PeerExchange.Peers = peers
	return malformed(r)
}

// validatePeers checks the exchange as a whole: asking peers needs the path
// and token they answer, and the path must not shadow another endpoint.
func validatePeers(cfg *Config) error {
	p := &cfg.PeerExchange
	if (p.Path == "") != (p.Token == "") {
		return errors.New("config: " + KeyPeerPath + " and " + KeyPeerToken + " go together: set both or neither")
	}
	if len(p.Peers) > 0 && !p.Serving() {
		return errors.New("config: " + KeyPeers + " needs " + KeyPeerPath + " and " + KeyPeerToken + " (the peers answer on that path for that token)")
	}
	if p.Path != "" && p.Path == cfg.StatusPath {
		return errors.New("config: " + KeyPeerPath + " and " + KeyStatusPath + " must differ, both are " + quoteString(p.Path))
	}
	return nil
}
