package gateway

import (
	_ "embed"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// DefaultFleetPath is where the gateway serves its fleet page; the page's
// data is at DefaultFleetPath + "/stats.json".
const DefaultFleetPath = "/gpuroute/fleet"

// fleetPage is the live fleet page: static HTML and JavaScript (no build
// step, nothing fetched from elsewhere) that polls the plugin's status
// endpoint and the gateway's stats through the gateway.
//
//go:embed fleet/fleet.html
var fleetPage []byte

// serveFleet answers the fleet page and its stats; false if the path is
// neither. The gateway answers them itself, before the plugin, as Envoy's
// admin interface answers /stats: like it, they belong on a listener only
// operators reach.
func (g *Gateway) serveFleet(w http.ResponseWriter, req *http.Request) bool {
	if g.opts.FleetPath == "" || req.Method != http.MethodGet {
		return false
	}
	switch strings.TrimSuffix(req.URL.Path, "/") {
	case g.opts.FleetPath:
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(fleetPage)
	case g.opts.FleetPath + "/stats.json":
		writeJSON(w, g.statsJSON())
	default:
		return false
	}
	return true
}

// statsJSON renders the plugin's Envoy stats (as Envoy's admin
// /stats?format=json lists them: {"stats":[{"name","value"}]}), plus the
// serving configuration's status_path and the configuration and module
// generations.
func (g *Gateway) statsJSON() []byte {
	g.cfgMu.Lock()
	statusPath := readConfig(g.lastCfg).StatusPath
	g.cfgMu.Unlock()
	b := []byte(`{"status_path":`)
	b = appendJSONString(b, statusPath)
	b = append(b, `,"generation":`...)
	b = strconv.AppendUint(b, g.Generation(), 10)
	b = append(b, `,"module_generation":`...)
	b = strconv.AppendUint(b, g.ModuleGeneration(), 10)
	b = append(b, `,"stats":[`...)
	names := g.host.MetricNames()
	slices.Sort(names)
	for i, name := range names {
		m, _ := g.host.Metric(name)
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendJSONString(b, name)
		b = append(b, `,"value":`...)
		b = strconv.AppendInt(b, m.Value, 10)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}
