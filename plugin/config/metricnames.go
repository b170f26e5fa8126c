package config

import (
	"errors"

	"github.com/gpuroute/gpuroute/plugin/jsonx"
	"github.com/gpuroute/gpuroute/plugin/metrics"
)

// Keys of metric-name overrides (issue #4): "metric_names" maps a field key
// (metrics.KeyWaiting …, metrics.KeyCacheConfigInfo, metrics.KeyLoRAInfo)
// to a metric name, null (read nothing) or, for a label-keyed family in
// Triton's style, {"metric": …, "label": …, "value": …}. At the top level it
// applies to every replica on top of its engine's defaults; a replica's own
// applies on top of that. Deployments that rename series need it: NVIDIA
// Dynamo re-exports trtllm-serve's gauges with a "trtllm:" prefix instead
// of "trtllm_" (plugin/metrics/names.go).
const (
	KeyMetricNames  = "metric_names"
	KeySourceMetric = "metric"
	KeySourceLabel  = "label"
	KeySourceValue  = "value"
)

// MaxMetricNameBytes bounds each metric, label name and label value of an
// override. Real names are under 50 bytes (vllm:gpu_prefix_cache_queries_total
// is 35); every one is compared with sample lines on every scrape and copied
// into every worker VM, so a kilobyte-long one is a generator bug.
const MaxMetricNameBytes = 256

// nameOverride is one metric_names entry. Overrides are kept until the whole
// document is read, because the replica's engine and the top-level
// overrides may come after it.
type nameOverride struct {
	key  string
	src  metrics.Source // for an info metric only src.Metric is used
	info bool
}

type nameOverrides []nameOverride

// apply sets each override on n. Keys were checked when they were parsed.
func (o nameOverrides) apply(n *metrics.Names) {
	for _, x := range o {
		if x.info {
			if p := n.InfoField(x.key); p != nil {
				*p = x.src.Metric
			}
		} else if p := n.SourceField(x.key); p != nil {
			*p = x.src
		}
	}
}

// parseMetricNames reads a metric_names object; where is its path in the
// document ("metric_names" or "replicas[2].metric_names").
func parseMetricNames(where string, r *jsonx.Reader) (nameOverrides, error) {
	if k := r.Kind(); k != jsonx.Object {
		v := r.Value()
		return nil, errors.New("config: " + where + " must be an object of field key to metric name, got " + v.Kind.String() + " " + shown(v))
	}
	var out nameOverrides
	var seen seenKeys
	var probe metrics.Names
	r.Object()
	for r.Member() {
		key := string(r.Key())
		if err := seen.add(where, key); err != nil {
			return nil, err
		}
		name := where + "." + key
		info := probe.InfoField(key) != nil
		if !info && probe.SourceField(key) == nil {
			return nil, errors.New("config: " + where + ": unknown key " + quoteString(key))
		}
		var src metrics.Source
		if r.Kind() == jsonx.Object && !info {
			var err error
			if src, err = parseSourceObject(name, r); err != nil {
				return nil, err
			}
		} else {
			switch v := r.Value(); v.Kind {
			case jsonx.Null:
			case jsonx.String:
				s, err := metricName(name, v)
				if s == "" && err == nil {
					err = errors.New("config: " + name + " must not be empty (null reads nothing)")
				}
				if err != nil {
					return nil, err
				}
				src.Metric = s
			default:
				if info {
					return nil, errors.New("config: " + name + " must be a string or null, got " + v.Kind.String() + " " + shown(v))
				}
				return nil, errors.New("config: " + name + " must be a string, an object or null, got " + v.Kind.String() + " " + shown(v))
			}
		}
		out = append(out, nameOverride{key: key, src: src, info: info})
	}
	return out, malformed(r)
}

// parseSourceObject reads {"metric": m, "label": l, "value": v}: the samples
// of m whose label l equals v ("label" and "value" go together).
func parseSourceObject(where string, r *jsonx.Reader) (metrics.Source, error) {
	var src metrics.Source
	var seen seenKeys
	r.Object()
	for r.Member() {
		key := string(r.Key())
		if err := seen.add(where, key); err != nil {
			return src, err
		}
		var dst *string
		switch key {
		case KeySourceMetric:
			dst = &src.Metric
		case KeySourceLabel:
			dst = &src.Label
		case KeySourceValue:
			dst = &src.Value
		default:
			return src, errors.New("config: " + where + ": unknown key " + quoteString(key))
		}
		s, err := metricName(where+"."+key, r.Value())
		if s == "" && err == nil {
			err = errors.New("config: " + where + "." + key + " must not be empty")
		}
		if err != nil {
			return src, err
		}
		*dst = s
	}
	if err := malformed(r); err != nil {
		return src, err
	}
	switch {
	case src.Metric == "":
		return src, errors.New("config: " + where + " needs " + quoteString(KeySourceMetric))
	case src.Label != "" && src.Value == "":
		return src, errors.New("config: " + where + " has " + quoteString(KeySourceLabel) + " without " + quoteString(KeySourceValue))
	case src.Label == "" && src.Value != "":
		return src, errors.New("config: " + where + " has " + quoteString(KeySourceValue) + " without " + quoteString(KeySourceLabel))
	}
	return src, nil
}

// metricName reads a name of at most MaxMetricNameBytes bytes (callers
// refuse the empty one, each with its own hint).
func metricName(where string, v jsonx.Value) (string, error) {
	s, err := stringValue(where, v)
	if err != nil {
		return "", err
	}
	if err := maxLen(where, s, MaxMetricNameBytes); err != nil {
		return "", err
	}
	return s, nil
}
