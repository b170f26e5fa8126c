package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"time"
)

// Plugin configuration keys the gateway writes (the plugin's README
// configuration reference).
const (
	keyTickMillis = "tick_ms"
	keyReplicas   = "replicas"
	keyStatusPath = "status_path"
	keyFallbacks  = "fallbacks"
	keyAdapters   = "adapters"
)

// Replica states of the plugin configuration.
const (
	StateActive   = "active"
	StateDraining = "draining"
	StateDrained  = "drained"
)

// MetricsClusterSuffix names a replica's metrics cluster in generated
// configurations: "<name>-metrics".
const MetricsClusterSuffix = "-metrics"

// ReplicaSpec is one replica of a generated plugin configuration.
type ReplicaSpec struct {
	Name     string // unique name
	Address  string // ip:port the plugin writes into HeaderDestination
	Hardware string // cost profile; "" leaves the plugin's default
	State    string // StateActive (""), StateDraining or StateDrained
	// DrainDeadline, for a draining replica, is when its streams are reset;
	// zero means none.
	DrainDeadline time.Time
}

// ConfigOptions are the non-replica keys of a generated configuration.
type ConfigOptions struct {
	TickMillis int    // 0: the plugin's default
	StatusPath string // "": no status endpoint
	// Fallbacks is how many next-best replicas follow the chosen one in
	// the destination header (override_host's list); 0: one address.
	Fallbacks int
	// Adapters maps LoRA adapter names to their base model.
	Adapters map[string]string
}

// ParseReplicaFlag reads "name=ip:port" (the CLI's --replica value).
func ParseReplicaFlag(v string) (ReplicaSpec, error) {
	name, addr, ok := strings.Cut(v, "=")
	if !ok || name == "" || addr == "" {
		return ReplicaSpec{}, errors.New("gateway: replica must be name=ip:port, got " + strconv.Quote(v))
	}
	return ReplicaSpec{Name: name, Address: addr}, nil
}

// PluginConfig renders a plugin configuration for replicas; each gets the
// metrics cluster name+MetricsClusterSuffix, which the gateway serves from
// the replica's own address.
func PluginConfig(replicas []ReplicaSpec, o ConfigOptions) ([]byte, error) {
	type replica struct {
		Name            string `json:"name"`
		Address         string `json:"address"`
		MetricsCluster  string `json:"metrics_cluster"`
		Hardware        string `json:"hardware,omitempty"`
		State           string `json:"state,omitempty"`
		DrainDeadlineMs int64  `json:"drain_deadline_ms,omitempty"`
	}
	seen := map[string]bool{}
	rs := make([]replica, 0, len(replicas))
	for _, r := range replicas {
		if r.Name == "" || r.Address == "" {
			return nil, errors.New("gateway: replica needs a name and an address, got name " + strconv.Quote(r.Name) + " address " + strconv.Quote(r.Address))
		}
		if seen[r.Name] {
			return nil, errors.New("gateway: replica name " + strconv.Quote(r.Name) + " appears twice")
		}
		seen[r.Name] = true
		out := replica{Name: r.Name, Address: r.Address, MetricsCluster: r.Name + MetricsClusterSuffix, Hardware: r.Hardware, State: r.State}
		if !r.DrainDeadline.IsZero() {
			out.DrainDeadlineMs = r.DrainDeadline.UnixMilli()
		}
		rs = append(rs, out)
	}
	m := map[string]any{keyReplicas: rs}
	if o.TickMillis > 0 {
		m[keyTickMillis] = o.TickMillis
	}
	if o.StatusPath != "" {
		m[keyStatusPath] = o.StatusPath
	}
	if o.Fallbacks > 0 {
		m[keyFallbacks] = o.Fallbacks
	}
	if len(o.Adapters) > 0 {
		m[keyAdapters] = o.Adapters
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, errors.New("gateway: render plugin configuration: " + err.Error())
	}
	return append(b, '\n'), nil
}

// RebindReplicas rewrites the address of every replica of cfg named in
// addrs (name → ip:port), keeping everything else of cfg, and returns the
// new configuration and the names it rebound. The gateway's --simulate uses
// it: simulated replicas listen on new ports each run, and an older
// configuration file still names the previous run's.
func RebindReplicas(cfg []byte, addrs map[string]string) ([]byte, []string, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(cfg, &top); err != nil {
		return nil, nil, errors.New("gateway: rebind replicas: configuration is not a JSON object: " + err.Error())
	}
	var reps []map[string]json.RawMessage
	if err := json.Unmarshal(top[keyReplicas], &reps); err != nil {
		return nil, nil, errors.New("gateway: rebind replicas: " + keyReplicas + " is not a list of objects: " + err.Error())
	}
	var rebound []string
	for _, r := range reps {
		var name string
		if json.Unmarshal(r["name"], &name) != nil {
			continue
		}
		if addr, ok := addrs[name]; ok {
			r["address"], _ = json.Marshal(addr)
			rebound = append(rebound, name)
		}
	}
	top[keyReplicas], _ = json.Marshal(reps)
	b, err := json.MarshalIndent(top, "", "  ")
	if err != nil {
		return nil, nil, errors.New("gateway: rebind replicas: " + err.Error())
	}
	return append(b, '\n'), rebound, nil
}

// ReloadFile reads a plugin configuration file and applies it unless it is
// the configuration last tried (force applies it anyway, as SIGHUP does). A
// refused or unreadable file leaves the serving configuration in place; the
// next file is tried even when it equals the one serving, so restoring the
// good file after a refused edit applies it (TestReloadAfterRefusal).
func (g *Gateway) ReloadFile(path string, force bool) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return errors.New("gateway: reload: " + err.Error())
	}
	g.cfgMu.Lock()
	defer g.cfgMu.Unlock()
	if !force && g.lastTried != nil && bytes.Equal(b, g.lastTried) {
		return nil
	}
	return g.reconfigureLocked(b)
}

// Reconfigure hands every worker VM a new plugin configuration, as Envoy
// does on an update: each VM gets a new root context; streams in flight keep
// the root they started under. If the plugin refuses it, nothing changes
// (the previous configuration keeps serving, its metrics clusters where they
// were) and the error says why.
func (g *Gateway) Reconfigure(cfg []byte) error {
	g.cfgMu.Lock()
	defer g.cfgMu.Unlock()
	return g.reconfigureLocked(cfg)
}

// reconfigureLocked applies cfg with the clock stopped, so no tick of the
// serving roots runs while the metrics clusters point where cfg says: a
// refusal puts them back before any of them scrapes
// (TestRefusedConfigurationChangesNothing).
func (g *Gateway) reconfigureLocked(cfg []byte) error {
	g.lastTried = append(g.lastTried[:0], cfg...)
	g.clockMu.Lock()
	defer g.clockMu.Unlock()
	undo := g.registerClusters(cfg)
	g.vmsMu.RLock()
	vms := g.vms
	g.vmsMu.RUnlock()
	for i, vm := range vms {
		if _, err := vm.Configure(g.opts.RootID, cfg); err != nil {
			if i > 0 {
				// The plugin decides the same on every VM; a later one
				// failing is a VM failure, and the earlier ones serve cfg.
				g.commitConfig(cfg)
				return errors.New("gateway: reconfigure: " + err.Error() + " (workers 0–" + strconv.Itoa(i-1) + " took the new configuration)")
			}
			undo()
			return errors.New("gateway: reconfigure: " + err.Error())
		}
	}
	g.commitConfig(cfg)
	g.log.Printf("gateway: plugin configuration %d applied (%d bytes)", g.gen.Load(), len(cfg))
	return nil
}

func (g *Gateway) commitConfig(cfg []byte) {
	g.lastCfg = append(g.lastCfg[:0], cfg...)
	g.fallbacks.Store(int64(readConfig(cfg).Fallbacks))
	g.gen.Add(1)
}

// pluginConfigView is what the gateway reads from a plugin configuration:
// the metrics clusters it must be able to reach and the length of the
// destination list (the override_host fallbacks, which the route's retries
// walk).
type pluginConfigView struct {
	Replicas []struct {
		Address        string `json:"address"`
		MetricsCluster string `json:"metrics_cluster"`
	} `json:"replicas"`
	Fallbacks  int    `json:"fallbacks"`
	StatusPath string `json:"status_path"`
}

// readConfig reads cfg leniently: what does not parse is left zero, and the
// plugin refuses it with a better message.
func readConfig(cfg []byte) pluginConfigView {
	var c pluginConfigView
	_ = json.Unmarshal(cfg, &c)
	return c
}

// registerClusters makes every metrics_cluster of cfg reachable (at
// Options.Clusters' URL for it, else the replica's own address) and returns
// the function that restores the clusters as they were. Clusters are never
// removed on success: a retired root may still have a call in flight.
func (g *Gateway) registerClusters(cfg []byte) (undo func()) {
	want := map[string]string{}
	for _, r := range readConfig(cfg).Replicas {
		if r.MetricsCluster == "" {
			continue
		}
		base, ok := g.opts.Clusters[r.MetricsCluster]
		if !ok {
			base = "http://" + r.Address
		}
		want[r.MetricsCluster] = base
	}
	for name, base := range g.opts.Clusters {
		want[name] = base
	}
	previous := map[string]string{}
	for name, base := range want {
		old, had := g.clusters[name]
		if had && old == base {
			continue
		}
		previous[name] = old // "" for a cluster that did not exist
		g.setCluster(name, base)
	}
	return func() {
		for name, base := range previous {
			if base == "" {
				g.host.RemoveCluster(name)
				delete(g.clusters, name)
				continue
			}
			g.setCluster(name, base)
		}
	}
}

func (g *Gateway) setCluster(name, base string) {
	g.host.AddCluster(name, &envoyCluster{base: base, rt: g.client.Transport})
	g.clusters[name] = base
}

// WatchFile polls path's modification time and size every interval and
// reloads the plugin configuration when either changes (no fsnotify:
// polling is portable and cheap for one file). It returns when ctx ends;
// errors are logged.
func (g *Gateway) WatchFile(ctx context.Context, path string, interval time.Duration) {
	poll(ctx, path, interval, func() {
		if err := g.ReloadFile(path, false); err != nil {
			g.log.Print(err, "; the previous configuration keeps serving")
		}
	})
}

// ReloadModuleFile reads a module file and swaps it in if it differs from
// the serving one (force swaps anyway).
func (g *Gateway) ReloadModuleFile(ctx context.Context, path string, force bool) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return errors.New("gateway: reload module: " + err.Error())
	}
	g.cfgMu.Lock()
	same := bytes.Equal(b, g.lastWASM)
	g.cfgMu.Unlock()
	if same && !force {
		return nil
	}
	return g.ReloadModule(ctx, b)
}

// WatchModule is WatchFile for the module file: a changed module is swapped
// in with ReloadModule.
func (g *Gateway) WatchModule(ctx context.Context, path string, interval time.Duration) {
	poll(ctx, path, interval, func() {
		if err := g.ReloadModuleFile(ctx, path, false); err != nil {
			g.log.Print(err)
		}
	})
}

// poll calls changed whenever path's modification time or size changes.
func poll(ctx context.Context, path string, interval time.Duration, changed func()) {
	var lastMod time.Time
	lastSize := int64(-1)
	if fi, err := os.Stat(path); err == nil {
		lastMod, lastSize = fi.ModTime(), fi.Size()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fi, err := os.Stat(path)
		if err != nil || (fi.ModTime().Equal(lastMod) && fi.Size() == lastSize) {
			continue
		}
		lastMod, lastSize = fi.ModTime(), fi.Size()
		changed()
	}
}
