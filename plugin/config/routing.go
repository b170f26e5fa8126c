package config

import (
	"errors"
	"strconv"
	"time"

	"github.com/gpuroute/gpuroute/scoring"
)

// parseRouting parses the top-level keys beyond the replica list: how
// requests are read, how the fleet is scraped, the decision's tunables and
// the opt-in operability features.
func parseRouting(cfg *Config, key string, k kind, raw []byte) error {
	p := &cfg.Params
	switch key {
	case KeyAdapters:
		return parseAdapters(cfg, k, raw)
	case KeyBlockChars:
		v, err := boundedInt(key, k, raw, 8, scoring.MaxBlockChars)
		cfg.BlockChars = int(v)
		return err
	case KeyMaxBodyBytes:
		v, err := boundedInt(key, k, raw, 1024, MaxBodyBytes)
		cfg.MaxBodyBytes = int(v)
		return err
	case KeyScrapeTimeoutMs:
		v, err := boundedInt(key, k, raw, 1, 60_000)
		cfg.ScrapeTimeoutMillis = uint32(v)
		return err
	case KeyLeaseMs:
		v, err := boundedInt(key, k, raw, 1, MaxTickMillis)
		cfg.LeaseMillis = uint32(v)
		return err
	case KeyUnhealthyAfter:
		v, err := boundedInt(key, k, raw, 1, 1000)
		cfg.UnhealthyAfterFailures = int(v)
		return err
	case KeyDecisionHeader:
		if k != kindBoolean {
			return errors.New("config: " + key + " must be true or false, got " + shown(k, raw))
		}
		cfg.DecisionHeader = raw[0] == 't'
		return nil
	case KeyStatusPath:
		s, err := stringValue(key, k, raw)
		if err != nil {
			return err
		}
		if s != "" && (s[0] != '/' || len(s) > 256) {
			return errors.New("config: " + key + " " + quoteString(s) + " must be empty or a path starting with / (at most 256 bytes)")
		}
		cfg.StatusPath = s
		return nil
	case KeyMaxWaitMs:
		v, err := boundedInt(key, k, raw, 0, 3_600_000)
		cfg.MaxWaitSec = float64(v) / 1000
		return err
	case KeyFallbacks:
		v, err := boundedInt(key, k, raw, 0, MaxFallbacks)
		cfg.Fallbacks = int(v)
		return err
	case KeyStaleAfterMs:
		return millis(key, k, raw, 1, &p.StaleAfter)
	case KeyAdapterMemoryMs:
		return millis(key, k, raw, 0, &p.AdapterMemory)
	case KeyStalePenaltyMs:
		return seconds(key, k, raw, &p.StalePenaltySec)
	case KeyAdapterTolerance:
		return seconds(key, k, raw, &p.AdapterToleranceSec)
	case KeyTieEpsilonMs:
		return seconds(key, k, raw, &p.TieEpsilonSec)
	}
	return errors.New("config: unknown key " + quoteString(key))
}

// parseAdapters reads {"adapter-name": "base-model", ...}.
func parseAdapters(cfg *Config, k kind, raw []byte) error {
	if k != kindObject {
		return errors.New("config: " + KeyAdapters + " must be an object of adapter name to base model, got " + k.String())
	}
	cfg.Adapters = map[string]Adapter{}
	_, err := object(raw, 0, 2, func(name string, k kind, raw []byte) error {
		where := KeyAdapters + "." + name
		if _, dup := cfg.Adapters[name]; dup {
			return errors.New("config: " + KeyAdapters + ": duplicate key " + quoteString(name))
		}
		if len(cfg.Adapters) >= MaxAdapters {
			return errors.New("config: " + KeyAdapters + " has more than " + strconv.Itoa(MaxAdapters) + " entries")
		}
		base, err := stringValue(where, k, raw)
		if err != nil {
			return err
		}
		if name == "" || base == "" || len(name) > 256 || len(base) > 256 {
			return errors.New("config: " + KeyAdapters + " entry " + quoteString(name) + ": " + quoteString(base) +
				" needs a non-empty adapter name and base model of at most 256 bytes")
		}
		cfg.Adapters[name] = Adapter{Name: name, Base: base}
		return nil
	})
	return err
}

// boundedInt reads an integer and checks it is within [lo, hi].
func boundedInt(name string, k kind, raw []byte, lo, hi int64) (int64, error) {
	v, err := intValue(name, k, raw)
	if err != nil {
		return 0, err
	}
	if v < lo || v > hi {
		return 0, errors.New("config: " + name + " must be in [" + strconv.FormatInt(lo, 10) + ", " +
			strconv.FormatInt(hi, 10) + "], got " + strconv.FormatInt(v, 10))
	}
	return v, nil
}

// millis reads a duration in whole milliseconds (at least lo, at most an hour).
func millis(name string, k kind, raw []byte, lo int64, dst *time.Duration) error {
	v, err := boundedInt(name, k, raw, lo, 3_600_000)
	*dst = time.Duration(v) * time.Millisecond
	return err
}

// seconds reads whole milliseconds into seconds, the unit the decision sums.
func seconds(name string, k kind, raw []byte, dst *float64) error {
	v, err := boundedInt(name, k, raw, 0, 3_600_000)
	*dst = float64(v) / 1000
	return err
}
