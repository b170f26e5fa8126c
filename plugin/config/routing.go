package config

import (
	"errors"
	"strconv"
	"time"

	"github.com/gpuroute/gpuroute/plugin/jsonx"
	"github.com/gpuroute/gpuroute/scoring/prefix"
)

// parseRouting parses the top-level keys beyond the replica list: how
// requests are read, how the fleet is scraped, the decision's tunables and
// the opt-in operability features.
func parseRouting(cfg *Config, key string, r *jsonx.Reader) error {
	p := &cfg.Params
	switch key {
	case KeyAdapters:
		return parseAdapters(cfg, r)
	case KeyPeers:
		return parsePeers(cfg, r)
	case KeyFlowControl:
		return parseFlowControl(cfg, r)
	case KeyModelProfiles:
		return parseModelProfiles(cfg, r)
	}
	v := r.Value()
	var err error
	var n int64
	switch key {
	case KeyBlockChars:
		n, err = boundedInt(key, v, 8, prefix.MaxBlockChars)
		cfg.BlockChars = int(n)
	case KeyMaxBodyBytes:
		n, err = boundedInt(key, v, 1024, MaxBodyBytes)
		cfg.MaxBodyBytes = int(n)
	case KeyScrapeTimeoutMs:
		n, err = boundedInt(key, v, 1, 60_000)
		cfg.ScrapeTimeoutMillis = uint32(n)
	case KeyLeaseMs:
		n, err = boundedInt(key, v, 1, MaxTickMillis)
		cfg.LeaseMillis = uint32(n)
	case KeyUnhealthyAfter:
		n, err = boundedInt(key, v, 1, 1000)
		cfg.UnhealthyAfterFailures = int(n)
	case KeyDecisionHeader:
		cfg.DecisionHeader, err = boolValue(key, v)
	case KeyLearnKVCapacity:
		cfg.LearnKVCapacity, err = boolValue(key, v)
	case KeyRecordAnswers:
		cfg.RecordAnswers, err = boolValue(key, v)
	case KeySessionHeader:
		cfg.SessionHeader, err = headerName(key, v)
	case KeyStatusPath:
		var s string
		if s, err = stringValue(key, v); err != nil {
			return err
		}
		if s != "" && (s[0] != '/' || len(s) > 256) {
			return errors.New("config: " + key + " " + quoteString(s) + " must be empty or a path starting with / (at most 256 bytes)")
		}
		cfg.StatusPath = s
	case KeyRole:
		var s string
		if s, err = stringValue(key, v); err != nil {
			return err
		}
		if s != RoleWorker && s != RoleScraper {
			return errors.New("config: " + key + " " + quoteString(s) + " must be " + quoteString(RoleWorker) + " or " + quoteString(RoleScraper))
		}
		cfg.Scraper = s == RoleScraper
	case KeyMaxWaitMs:
		n, err = boundedInt(key, v, 0, 3_600_000)
		cfg.MaxWaitSec = float64(n) / 1000
	case KeyFallbacks:
		n, err = boundedInt(key, v, 0, MaxFallbacks)
		cfg.Fallbacks = int(n)
	case KeyPassiveFailures:
		n, err = boundedInt(key, v, 0, 1000)
		cfg.PassiveFailures = int(n)
	case KeyPassiveBackoffMs:
		n, err = boundedInt(key, v, 1, MaxPassiveBackoffMillis)
		cfg.PassiveBackoffMillis = uint32(n)
	case KeyRemovedDrainMs:
		n, err = boundedInt(key, v, 0, MaxRemovedDrainMillis)
		cfg.RemovedDrainMillis = uint32(n)
	case KeyPrefillChunkTokens:
		n, err = boundedInt(key, v, 1, 1<<24)
		p.PrefillChunkTokens = int(n)
	case KeyStaleAfterMs:
		n, err = boundedInt(key, v, 1, 3_600_000)
		p.StaleAfter = time.Duration(n) * time.Millisecond
	case KeyAdapterMemoryMs:
		n, err = boundedInt(key, v, 0, 3_600_000)
		p.AdapterMemory = time.Duration(n) * time.Millisecond
	case KeyAdapterHostMemMs:
		n, err = boundedInt(key, v, 0, 24*3_600_000)
		p.AdapterHostMemory = time.Duration(n) * time.Millisecond
	case KeyStalePenaltyMs:
		n, err = boundedInt(key, v, 0, 3_600_000)
		p.StalePenaltySec = float64(n) / 1000
	case KeyAdapterTolerance:
		n, err = boundedInt(key, v, 0, 3_600_000)
		p.AdapterToleranceSec = float64(n) / 1000
	case KeyPeerPath:
		err = parsePeerPath(cfg, v)
	case KeyPeerToken:
		err = parsePeerToken(cfg, v)
	case KeyTieEpsilonMs:
		n, err = boundedInt(key, v, 0, 10_000)
		p.TieEpsilonSec = float64(n) / 1000
	default:
		return errors.New("config: unknown key " + quoteString(key))
	}
	return err
}

// parseAdapters reads {"adapter-name": "base-model", ...}.
func parseAdapters(cfg *Config, r *jsonx.Reader) error {
	if k := r.Kind(); k != jsonx.Object {
		r.Skip()
		return errors.New("config: " + KeyAdapters + " must be an object of adapter name to base model, got " + k.String())
	}
	cfg.Adapters = map[string]Adapter{}
	r.Object()
	for r.Member() {
		name := string(r.Key())
		if _, dup := cfg.Adapters[name]; dup {
			return errors.New("config: " + KeyAdapters + ": duplicate key " + quoteString(name))
		}
		if len(cfg.Adapters) >= MaxAdapters {
			return errors.New("config: " + KeyAdapters + " has more than " + strconv.Itoa(MaxAdapters) + " entries")
		}
		base, err := stringValue(KeyAdapters+"."+name, r.Value())
		if err != nil {
			return err
		}
		if name == "" || base == "" || len(name) > 256 || len(base) > 256 {
			return errors.New("config: " + KeyAdapters + " entry " + quoteString(name) + ": " + quoteString(base) +
				" needs an adapter name and a base model of 1 to 256 bytes")
		}
		cfg.Adapters[name] = Adapter{Name: name, Base: base}
	}
	return malformed(r)
}

// boundedInt reads an integer and checks it is within [lo, hi].
func boundedInt(name string, v jsonx.Value, lo, hi int64) (int64, error) {
	n, err := intValue(name, v)
	if err != nil {
		return 0, err
	}
	if n < lo || n > hi {
		return 0, errors.New("config: " + name + " must be in [" + strconv.FormatInt(lo, 10) + ", " +
			strconv.FormatInt(hi, 10) + "], got " + strconv.FormatInt(n, 10))
	}
	return n, nil
}
